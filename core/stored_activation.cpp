#include "core/stored_activation.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "core/error.h"
#include "core/tile_ops.h"

namespace tessel::core {

StoredActivation::StoredActivation(TileStore& store, const Shape& shape, const Partition& blocks,
                                   Tier tier, at::TensorOptions options, int64_t resident_blocks)
    : store_(store),
      shape_(shape),
      blocks_(blocks),
      tier_(tier),
      options_(options),
      resident_blocks_(resident_blocks) {
  if (blocks_.y_edges.back() != shape.height || blocks_.x_edges.back() != shape.width) {
    throw Error("internal: offload blocks of " + std::to_string(blocks_.y_edges.back()) + "×" +
                std::to_string(blocks_.x_edges.back()) + " for a " + to_string(shape) +
                " checkpoint");
  }
  block_.resize(static_cast<size_t>(blocks_.tiles()));
  for (int64_t i = 0; i < blocks_.tiles(); ++i)
    block_[static_cast<size_t>(i)].region = blocks_.tile(i);
}

StoredActivation::~StoredActivation() {
  for (const Block& b : block_) {
    if (b.id >= 0) store_.erase(b.id);
  }
}

std::vector<size_t> StoredActivation::overlapping(const Region& r) const {
  std::vector<size_t> out;
  for (int64_t i : blocks_.meeting(r)) out.push_back(static_cast<size_t>(i));
  return out;
}

void StoredActivation::store(Block& b) {
  const bool resident = &b - block_.data() < resident_blocks_;
  b.id = store_.put(b.open, resident ? Tier::kResident : tier_);
  b.open = at::Tensor();
}

void StoredActivation::write(const Region& r, const at::Tensor& tile) {
  for (size_t i : overlapping(r)) {
    Block& b = block_[i];
    const Region part = intersect(r, b.region);
    if (!b.open.defined()) {
      // In the tile's layout (channels-last from the forward's convs): the copy in, and the
      // forward's reads of it, need no transpose (4.7% of a batch-norm step's CPU at 4096² went
      // to transposes, bench/NOTES.md, session 25).
      b.open = at::empty({1, shape_.channels, b.region.y.size(), b.region.x.size()},
                         options_.memory_format(tile.suggest_memory_format()));
    }
    copy_tile(crop({b.open, b.region}, part), crop({tile, r}, part));
    b.filled += part.area();
    if (b.filled == b.region.area()) store(b);
  }
}

void StoredActivation::expect_additions(const std::vector<Region>& regions) {
  for (const Region& r : regions) {
    for (size_t i : overlapping(r)) ++block_[i].additions_left;
  }
}

void StoredActivation::accumulate(const Region& r, const at::Tensor& tile) {
  for (size_t i : overlapping(r)) {
    Block& b = block_[i];
    if (!b.open.defined() && b.id >= 0) {
      // Stored after an earlier pass of additions: back, to add this pass's. A copy: the
      // store's I/O thread may still be writing the block it holds.
      b.open = store_.get(b.id).clone();
      store_.erase(b.id);
      b.id = -1;
    } else if (!b.open.defined()) {
      b.open = at::zeros({1, shape_.channels, b.region.y.size(), b.region.x.size()}, options_);
    }
    const Region part = intersect(r, b.region);
    crop({b.open, b.region}, part).add_(crop({tile, r}, part));
    if (--b.additions_left == 0) store(b);
  }
}

void StoredActivation::finish_additions() {
  for (Block& b : block_) {
    if (b.id >= 0) continue;
    if (!b.open.defined()) {
      b.open = at::zeros({1, shape_.channels, b.region.y.size(), b.region.x.size()}, options_);
    }
    store(b);
  }
}

std::vector<TileStore::BlockId> StoredActivation::reads(const Region& r) const {
  std::vector<TileStore::BlockId> ids;
  for (size_t i : overlapping(r)) ids.push_back(block_[i].id);
  return ids;
}

at::Tensor StoredActivation::read(const Region& r, at::MemoryFormat format) {
  at::Tensor out =
      at::empty({1, shape_.channels, r.y.size(), r.x.size()}, options_.memory_format(format));
  for (size_t i : overlapping(r)) {
    Block& b = block_[i];
    if (b.id < 0) throw Error("internal: an offloaded checkpoint block was read before written");
    const Region part = intersect(r, b.region);
    copy_tile(crop({out, r}, part), crop({store_.get(b.id), b.region}, part));
  }
  return out;
}

}  // namespace tessel::core
