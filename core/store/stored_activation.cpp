#include "core/store/stored_activation.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

#include "core/device/copies.h"
#include "core/error.h"
#include "core/store/tile_tensor.h"

namespace tessel::core {

StoredActivation::StoredActivation(TileStore& store, const Shape& shape, const Partition& blocks,
                                   Tier tier, at::TensorOptions options, KeptBlocks kept)
    : store_(store),
      shape_(shape),
      blocks_(blocks),
      tier_(tier),
      options_(options),
      resident_blocks_(kept.resident),
      uniform_(std::move(kept.uniform)) {
  if (blocks_.y_edges.back() != shape.height || blocks_.x_edges.back() != shape.width) {
    throw Error("internal: offload blocks of " + std::to_string(blocks_.y_edges.back()) + "×" +
                std::to_string(blocks_.x_edges.back()) + " for a " + to_string(shape) +
                " checkpoint");
  }
  block_.resize(static_cast<size_t>(blocks_.tiles()));
  if (!uniform_.empty() && uniform_.size() != block_.size()) {
    throw Error("internal: uniform flags for " + std::to_string(uniform_.size()) + " of " +
                std::to_string(block_.size()) + " offload blocks");
  }
  const int64_t element = static_cast<int64_t>(options_.dtype().itemsize());
  for (int64_t i = 0; i < blocks_.tiles(); ++i) {
    Block& b = block_[static_cast<size_t>(i)];
    b.region = blocks_.tile(i);
    if (uniform(static_cast<size_t>(i))) continue;  // its value alone, outside the store
    // Ids from the start, kept for the activation's life: its reads can be scheduled before
    // its blocks are written (or while they are reopened for additions).
    b.id = store_.reserve(shape.channels * b.region.area() * element,
                          i < resident_blocks_ ? Tier::kResident : tier_);
  }
}

namespace {

// A uniform block's value: `tile`'s (region `r`) at the first position of `part` (its part of
// the block), as 1×C×1×1.
at::Tensor first_value(const at::Tensor& tile, const Region& r, const Region& part) {
  const int64_t y = part.y.begin - r.y.begin, x = part.x.begin - r.x.begin;
  return tile.slice(2, y, y + 1).slice(3, x, x + 1).clone();
}

}  // namespace

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
  store_.put(b.id, b.open);
  b.stored = true;
  b.open = at::Tensor();
}

void StoredActivation::write(const Region& r, const at::Tensor& tile) {
  for (size_t i : overlapping(r)) {
    Block& b = block_[i];
    const Region part = intersect(r, b.region);
    if (uniform(i)) {
      if (!b.value.defined()) b.value = first_value(tile, r, part);
      b.filled += part.area();
      b.stored = b.filled == b.region.area();
      continue;
    }
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

void StoredActivation::receive(const Region& r, const at::Tensor& tile) {
  for (size_t i : overlapping(r)) {
    Block& b = block_[i];
    if (b.stored) throw Error("internal: a received piece overlaps a stored block");
    const Region part = intersect(r, b.region);
    b.filled += part.area();
    if (uniform(i)) {
      if (!b.value.defined()) b.value = first_value(tile, r, part);
      continue;
    }
    if (!b.open.defined()) {
      b.open = at::zeros({1, shape_.channels, b.region.y.size(), b.region.x.size()},
                         options_.memory_format(tile.suggest_memory_format()));
    }
    copy_tile(crop({b.open, b.region}, part), crop({tile, r}, part));
  }
}

void StoredActivation::seal() {
  for (size_t i = 0; i < block_.size(); ++i) {
    Block& b = block_[i];
    if (b.stored || b.filled == 0) continue;
    if (uniform(i)) {
      b.stored = true;
    } else {
      store(b);
    }
  }
}

void StoredActivation::expect_additions(const std::vector<Region>& regions) {
  if (!uniform_.empty()) throw Error("internal: additions into a checkpoint with uniform blocks");
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

void StoredActivation::finish_additions(const std::vector<Region>* within) {
  for (Block& b : block_) {
    if (b.stored) continue;
    const auto meets = [&](const Region& r) { return !intersect(r, b.region).empty(); };
    if (!b.open.defined() && within != nullptr &&
        std::none_of(within->begin(), within->end(), meets)) {
      continue;
    }
    if (!b.open.defined()) {
      b.open = at::zeros({1, shape_.channels, b.region.y.size(), b.region.x.size()}, options_);
    }
    store(b);
  }
}

std::vector<TileStore::BlockId> StoredActivation::reads(const Region& r) const {
  std::vector<TileStore::BlockId> ids;
  for (size_t i : overlapping(r)) {
    if (!uniform(i)) ids.push_back(block_[i].id);
  }
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
    at::Tensor to = crop({out, r}, part);
    if (uniform(i)) {
      to.copy_(b.value.expand_as(to));
    } else {
      copy_tile(to, crop({store_.get(b.id), b.region}, part));
    }
  }
  return out;
}

SparseCheckpoint::SparseCheckpoint(const Shape& shape, Partition blocks,
                                   std::vector<uint8_t> uniform, at::TensorOptions options)
    : shape_(shape),
      blocks_(std::move(blocks)),
      uniform_(std::move(uniform)),
      options_(options),
      block_(static_cast<size_t>(blocks_.tiles())) {
  if (uniform_.size() != block_.size()) {
    throw Error("internal: uniform flags for " + std::to_string(uniform_.size()) + " of " +
                std::to_string(block_.size()) + " checkpoint blocks");
  }
}

void SparseCheckpoint::write(const Region& r, const at::Tensor& tile) {
  const std::vector<int64_t> hit = blocks_.meeting(r);
  if (hit.size() != 1 || blocks_.tile(hit.front()) != r) {
    throw Error("internal: a checkpoint's write " + to_string(r) + " is not one of its blocks");
  }
  const auto b = static_cast<size_t>(hit.front());
  if (uniform_[b] != 0) {
    block_[b] = tile.slice(2, 0, 1).slice(3, 0, 1).clone();
  } else {
    block_[b] = at::empty(tile.sizes(), options_.memory_format(tile.suggest_memory_format()));
    copy_tile(block_[b], tile);
  }
}

at::Tensor SparseCheckpoint::read(const Region& r, at::MemoryFormat format) const {
  const std::vector<int64_t> hit = blocks_.meeting(r);
  for (int64_t b : hit) {
    if (!block_[static_cast<size_t>(b)].defined()) {
      throw Error("internal: a checkpoint block was read before written");
    }
  }
  if (hit.size() == 1 && uniform_[static_cast<size_t>(hit.front())] == 0) {
    return crop({block_[static_cast<size_t>(hit.front())], blocks_.tile(hit.front())}, r);
  }
  at::Tensor out =
      at::empty({1, shape_.channels, r.y.size(), r.x.size()}, options_.memory_format(format));
  for (int64_t b : hit) {
    const at::Tensor& held = block_[static_cast<size_t>(b)];
    const Region part = intersect(r, blocks_.tile(b));
    at::Tensor to = crop({out, r}, part);
    if (uniform_[static_cast<size_t>(b)] != 0) {
      to.copy_(held.expand_as(to));
    } else {
      copy_tile(to, crop({held, blocks_.tile(b)}, part));
    }
  }
  return out;
}

}  // namespace tessel::core
