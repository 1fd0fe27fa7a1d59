#include "core/store/stored_activation.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "core/device/copies.h"
#include "core/error.h"
#include "core/store/tile_tensor.h"

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
  const int64_t element = static_cast<int64_t>(options_.dtype().itemsize());
  for (int64_t i = 0; i < blocks_.tiles(); ++i) {
    Block& b = block_[static_cast<size_t>(i)];
    b.region = blocks_.tile(i);
    // Ids from the start, kept for the activation's life: its reads can be scheduled before
    // its blocks are written (or while they are reopened for additions).
    b.id = store_.reserve(shape.channels * b.region.area() * element,
                          i < resident_blocks_ ? Tier::kResident : tier_);
  }
}

StoredActivation::~StoredActivation() {
  for (const Block& b : block_) store_.erase(b.id);
}

std::vector<size_t> StoredActivation::overlapping(const Region& r) const {
  std::vector<size_t> out;
  for (int64_t i : blocks_.meeting(r)) out.push_back(static_cast<size_t>(i));
  return out;
}

void StoredActivation::store(Block& b) {
  store_.put(b.id, b.open);
  b.stored = true;
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
    if (!b.open.defined() && b.stored) {
      // Stored after an earlier pass of additions: back, to add this pass's (taken out of the
      // store, its id kept for the next put).
      b.open = store_.take(b.id);
      b.stored = false;
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
    if (b.stored) continue;
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

std::vector<TileStore::BlockId> StoredActivation::reopen_reads(
    const Region& r, std::vector<char>& listed, const std::vector<char>* stored) const {
  listed.resize(block_.size(), 0);
  std::vector<TileStore::BlockId> ids;
  for (size_t i : overlapping(r)) {
    const Block& b = block_[i];
    const bool in_store = stored != nullptr ? (*stored)[i] != 0 : b.stored && !b.open.defined();
    if (listed[i] || !in_store) continue;
    listed[i] = 1;
    ids.push_back(b.id);
  }
  return ids;
}

std::vector<char> StoredActivation::stored_after(const std::vector<Region>& regions) const {
  std::vector<char> stored(block_.size(), 0);
  for (size_t i = 0; i < block_.size(); ++i) {
    stored[i] = block_[i].stored && !block_[i].open.defined() ? 1 : 0;
  }
  for (const Region& r : regions) {
    for (size_t i : overlapping(r)) stored[i] = 1;
  }
  return stored;
}

at::Tensor StoredActivation::read(const Region& r, at::MemoryFormat format) {
  at::Tensor out =
      at::empty({1, shape_.channels, r.y.size(), r.x.size()}, options_.memory_format(format));
  for (size_t i : overlapping(r)) {
    Block& b = block_[i];
    if (!b.stored) throw Error("internal: an offloaded checkpoint block was read before written");
    const Region part = intersect(r, b.region);
    copy_tile(crop({out, r}, part), crop({store_.get(b.id), b.region}, part));
  }
  return out;
}

}  // namespace tessel::core
