// The tile store: blocks of checkpoints (and their gradients) kept resident, in host memory, or
// in a scratch file, written behind use and read back ahead of use by a background I/O thread
// within a byte window (Hayakawa & Narihira's adaptive window: a block is swapped in when the
// bytes read between now and its use fall under the window). DESIGN.md "Memory".
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "core/plan/plan.h"

namespace tessel::core {

struct TileStoreOptions {
  // Where the disk tier's scratch file lives; empty: the system's temporary directory.
  std::filesystem::path scratch_dir;
  int64_t window_bytes = int64_t{64} << 20;
  // Writes in flight before put() waits (write-behind); 0: window_bytes. The planner sets one of
  // its blocks: a steady stream needs one block being written and one queued, and every byte
  // queued is memory the budget counts (a queue as deep as the window made offloading plans
  // predict 1.7× their measured peak; bench/NOTES.md, session 30).
  int64_t write_behind_bytes = 0;
  // The cold-disk case (benchmarks): reads come from the disk, not from RAM the budget does not
  // count. Direct I/O (O_DIRECT) where the file system has it, which also spares the I/O thread
  // the page cache's CPU work; else each write is flushed to the device and its pages dropped
  // (sync_file_range + posix_fadvise DONTNEED). Off by default: rereads from the page cache
  // only help (and direct_io, below, already spares the CPU its copies).
  bool bypass_page_cache = false;
  // Direct I/O where the file system has it, else the page cache (never the flush-and-drop
  // path): the disk without the page cache's copies on the I/O thread. The executor asks for it
  // where the step computes on the CPU (core/device/device.h direct_disk_io).
  bool direct_io = false;
};

struct TileStoreStats {
  int64_t written_bytes = 0, read_bytes = 0;  // to (queued) and from host memory or disk
  int64_t resident_bytes = 0;                 // held by the store in the compute device's memory
  int64_t host_bytes = 0, disk_bytes = 0;     // held in the other tiers
  int64_t disk_peak_bytes = 0;                // the most held on disk at once
  int64_t scratch_file_bytes = 0;    // the scratch file's size (pages, freed extents' reuse)
  int64_t in_flight_bytes = 0;       // writes not yet done
  int64_t in_flight_peak_bytes = 0;  // the most at once (at most the write-behind and one block)
  // Reads of blocks not in the schedule: each waits for its block (the executor schedules
  // every read it makes, so this stays 0; a test checks it).
  int64_t unscheduled_reads = 0;
  double wait_ms = 0;        // time the caller waited for a read or a write
  double read_wait_ms = 0;   // of it, waiting in get() for a block to be read back
  double write_wait_ms = 0;  // of it, waiting in put() or flush() for writes in flight
  // Time the I/O thread spent moving blocks (checksums and, when bypassing the page cache, the
  // flush included): what wait_ms hides when it is smaller.
  double write_ms = 0, read_ms = 0;
};

class TileStore {
 public:
  using BlockId = int64_t;

  // Creates the scratch file lazily, at the first disk block; removes scratch files that crashed
  // runs left in the scratch directory now. Throws tessel::Error when that directory is unusable.
  explicit TileStore(TileStoreOptions options = {});
  ~TileStore();  // stops the I/O thread, removes the scratch file
  TileStore(const TileStore&) = delete;
  TileStore& operator=(const TileStore&) = delete;

  // Stores `block` (any shape) in `tier`; a disk block is written behind by the I/O thread (the
  // caller waits only when the writes in flight exceed write_behind_bytes).
  BlockId put(const at::Tensor& block, Tier tier);
  // An id for a block of about `bytes` in `tier` that put(id, ...) writes later: its reads can
  // be scheduled before it exists (the window counts it, and keeps it when it is written
  // within the window), so the store reads ahead across passes whose blocks are yet to come.
  BlockId reserve(int64_t bytes, Tier tier);
  void put(BlockId id, const at::Tensor& block);
  // The block, read back if needed, and taken out of the store: its id stays reserved for the
  // next put (a gradient block reopened for another pass of additions keeps its id, so reads
  // of it scheduled for a later pass stay valid).
  at::Tensor take(BlockId id);
  // The upcoming gets, in order (appended to what is already scheduled): blocks within the
  // window ahead are read back in the background.
  void schedule(const std::vector<BlockId>& reads);
  // The block, read back if it is not resident (waiting for it if needed). Throws tessel::Error
  // when the scratch file is gone, short or corrupt: never a silently wrong block; and for a
  // reserved block not written yet.
  at::Tensor get(BlockId id);
  void erase(BlockId id);
  // Waits for every write; rethrows an I/O error.
  void flush();
  // The write-behind from now on (TileStoreOptions::write_behind_bytes): the executor sets each
  // pass's (Segment::forward_write_behind) before the pass. Waits for the writes in flight
  // beyond it, so a pass never starts with more than its own (rethrows an I/O error).
  void set_write_behind(int64_t bytes);

  TileStoreStats stats() const;
  std::filesystem::path scratch_file() const;  // empty until the first disk block

  // The scratch directory must take a file before a run starts: a store that cannot create its
  // scratch file mid-step would fail slide after slide. Creates it, and removes what crashed runs
  // left there; throws tessel::ScratchError when it cannot.
  static void check_scratch_dir(const std::filesystem::path& dir);
  // A step that will keep up to `bytes` in the scratch directory (stored_bytes) must find them
  // free there before it starts, not run out an hour into it: throws tessel::ScratchError
  // naming both figures when the file system has less available.
  static void check_free_space(const std::filesystem::path& dir, int64_t bytes);
  // Scratch files are named tessel-offload-<pid>-<n>.scratch; those whose process is gone are
  // removed. Returns how many were removed.
  static int remove_stale_scratch_files(const std::filesystem::path& dir);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessel::core
