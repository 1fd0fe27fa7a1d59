// A whole activation (a checkpoint or its gradient) kept in the tile store as blocks, read and
// written by region as the executor's tiles need it. Reads, writes and accumulation copy
// exactly the elements a whole tensor would hold, so gradients stay those of plain autograd.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "core/graph/graph.h"
#include "core/plan/plan.h"
#include "core/store/tile_store.h"

namespace tessel::core {

// Which blocks stay out of the tier: the first `resident` (row-major) stay resident, and
// those `uniform` flags (one flag a block, or empty) will be written with one value at every
// position (a checkpoint's glass, core/plan/glass.h): each keeps that 1×C×1×1 vector, never
// goes to the store and is not among the reads.
struct KeptBlocks {
  int64_t resident = 0;
  std::vector<uint8_t> uniform;
};

class StoredActivation {
 public:
  // `blocks` partitions the 1×C×H×W activation `shape`; `options` are its tensors' dtype and
  // device; the blocks not `kept` go to `tier`.
  StoredActivation(TileStore& store, const Shape& shape, const Partition& blocks, Tier tier,
                   at::TensorOptions options, KeptBlocks kept = {});
  ~StoredActivation();  // erases its blocks from the store
  StoredActivation(const StoredActivation&) = delete;
  StoredActivation& operator=(const StoredActivation&) = delete;

  // Copies `tile` (region `r`) in; a block goes to the store once it is wholly written. A
  // uniform block keeps the tile's value at its first position (the writer's promise: the same
  // at every position).
  void write(const Region& r, const at::Tensor& tile);
  // A step split over ranks (docs/slide-parallel.md) holds another rank's blocks only where its
  // own tiles read them: `receive` copies `tile` (region `r`) into blocks that start at zero and
  // stay open, and `seal`, after the last, sends every block written in part to the store.
  void receive(const Region& r, const at::Tensor& tile);
  void seal();
  // Before accumulating: every region that will be added, in order, so each block goes to the
  // store after its last addition. May be called again for a later pass of additions: a block
  // stored before is read back at its first addition there and stored again after its last.
  void expect_additions(const std::vector<Region>& regions);
  // Adds `tile` into region `r` (blocks start at zero).
  void accumulate(const Region& r, const at::Tensor& tile);
  // Stores the blocks no addition touched (zeros), so every block is readable; given `within`,
  // only those that meet one of its regions (a step split over ranks reads no others).
  void finish_additions(const std::vector<Region>* within = nullptr);

  // The store's block reads `read(r)` makes, in its order: for TileStore::schedule.
  std::vector<TileStore::BlockId> reads(const Region& r) const;
  // The same for `accumulate(r)` in a pass of additions that has not started: the blocks an
  // earlier pass stored, which it reads back. `listed` (one flag a block; empty at the pass's
  // first call) marks those an earlier call listed: a block comes back once a pass.
  // `stored`, when given: which blocks will be in the store when the pass starts (stored_after),
  // instead of which are now.
  std::vector<TileStore::BlockId> reopen_reads(const Region& r, std::vector<char>& listed,
                                               const std::vector<char>* stored = nullptr) const;
  // Which blocks (one flag each) are in the store after a pass of additions over `regions`
  // that has not run yet: every block it touches is stored again at its end.
  std::vector<char> stored_after(const std::vector<Region>& regions) const;
  // A new tensor holding region `r`, in memory format `format`.
  at::Tensor read(const Region& r, at::MemoryFormat format = at::MemoryFormat::Contiguous);

 private:
  struct Block {
    Region region;
    TileStore::BlockId id = -1;  // reserved in the store at construction
    bool stored = false;         // in the store (else not written yet, or open)
    at::Tensor open;             // being written or accumulated
    int64_t filled = 0;          // elements written so far
    int64_t additions_left = 0;
    at::Tensor value;  // a uniform block's 1×C×1×1 value, once written
  };
  bool uniform(size_t i) const { return !uniform_.empty() && uniform_[i] != 0; }
  std::vector<size_t> overlapping(const Region& r) const;
  void store(Block& b);

  TileStore& store_;
  Shape shape_;
  Partition blocks_;
  Tier tier_;
  at::TensorOptions options_;
  int64_t resident_blocks_;
  std::vector<uint8_t> uniform_;
  std::vector<Block> block_;
};

// A resident checkpoint whose glass is kept as one vector (core/plan/glass.h): held by block
// (`blocks`, the forward partition: each tile writes one block), a block `uniform` flags holding
// the 1×C×1×1 value its tile writes at every position, the others their tile's values. Reads
// and writes copy exactly the elements a whole tensor would hold.
class SparseCheckpoint {
 public:
  SparseCheckpoint(const Shape& shape, Partition blocks, std::vector<uint8_t> uniform,
                   at::TensorOptions options);
  // Block `r` (a tile of `blocks`, written once) from `tile`.
  void write(const Region& r, const at::Tensor& tile);
  // Region `r`: a view where it lies in one dense block, else a new tensor in `format`.
  at::Tensor read(const Region& r, at::MemoryFormat format) const;

 private:
  Shape shape_;
  Partition blocks_;
  std::vector<uint8_t> uniform_;
  at::TensorOptions options_;
  std::vector<at::Tensor> block_;  // by block: its values, or the uniform value
};

}  // namespace tessel::core
