#include "gui/tile_cache.h"

#include <algorithm>
#include <unordered_set>

namespace tessel::gui {

std::string to_string(const TileKey& key) {
  return "level " + std::to_string(key.level) + " (" + std::to_string(key.column) + ", " +
         std::to_string(key.row) + ")";
}

int64_t TileCache::bytes_of(const QPixmap& tile) {
  return static_cast<int64_t>(tile.width()) * tile.height() * std::max(tile.depth(), 8) / 8;
}

const QPixmap* TileCache::find(const TileKey& key) {
  const auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  order_.splice(order_.begin(), order_, it->second);
  return &it->second->tile;
}

const QPixmap* TileCache::peek(const TileKey& key) const {
  const auto it = index_.find(key);
  return it == index_.end() ? nullptr : &it->second->tile;
}

void TileCache::insert(const TileKey& key, QPixmap tile) {
  if (const auto it = index_.find(key); it != index_.end()) {
    bytes_ -= bytes_of(it->second->tile);
    order_.erase(it->second);
    index_.erase(it);
  }
  bytes_ += bytes_of(tile);
  order_.push_front({key, std::move(tile)});
  index_.emplace(key, order_.begin());
  while (bytes_ > capacity_bytes_ && order_.size() > 1) {
    const Entry& oldest = order_.back();
    bytes_ -= bytes_of(oldest.tile);
    index_.erase(oldest.key);
    order_.pop_back();
  }
}

void TileCache::clear() {
  order_.clear();
  index_.clear();
  bytes_ = 0;
}

size_t TileJobQueue::request(const std::vector<TileKey>& wanted) {
  std::unordered_set<TileKey, TileKeyHash> seen;
  std::vector<TileKey> jobs;
  jobs.reserve(wanted.size());
  for (const TileKey& key : wanted) {
    if (seen.insert(key).second) jobs.push_back(key);
  }
  size_t dropped = 0;
  for (const TileKey& key : jobs_) {
    if (!seen.contains(key)) ++dropped;
  }
  jobs_ = std::move(jobs);
  return dropped;
}

std::optional<TileKey> TileJobQueue::pop() {
  if (jobs_.empty()) return std::nullopt;
  const TileKey key = jobs_.front();
  jobs_.erase(jobs_.begin());
  return key;
}

}  // namespace tessel::gui
