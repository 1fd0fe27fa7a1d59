// The viewer's tiles: a key per (level, column, row), a byte-bounded LRU cache of decoded tiles,
// and the job queue the loader's workers take tiles from. Pure bookkeeping, no threads: the
// loader locks around the queue, the cache lives on the UI thread.
#pragma once

#include <QMetaType>
#include <QPixmap>

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace tessel::gui {

// A tile of one pyramid level: pixels [column·size, (column+1)·size) × [row·size, ...) of it.
struct TileKey {
  int level = 0;
  int64_t column = 0, row = 0;
  auto operator<=>(const TileKey&) const = default;
};

struct TileKeyHash {
  size_t operator()(const TileKey& key) const noexcept {
    const auto mix = [](size_t h, uint64_t v) {
      return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
    };
    return mix(mix(std::hash<int>{}(key.level), static_cast<uint64_t>(key.column)),
               static_cast<uint64_t>(key.row));
  }
};

std::string to_string(const TileKey& key);  // "level 1 (3, 4)"

// Least-recently-used tiles, evicted once their pixel bytes pass the capacity. A tile larger than
// the whole capacity is still kept (alone): the view must be able to draw what it just loaded.
class TileCache {
 public:
  explicit TileCache(int64_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  // The tile, marked as just used; nullptr when absent.
  const QPixmap* find(const TileKey& key);
  // Without touching the order (for painting coarser levels under finer ones).
  const QPixmap* peek(const TileKey& key) const;
  bool contains(const TileKey& key) const { return index_.contains(key); }
  void insert(const TileKey& key, QPixmap tile);
  void clear();

  int64_t bytes() const { return bytes_; }
  int64_t capacity_bytes() const { return capacity_bytes_; }
  size_t size() const { return index_.size(); }

  static int64_t bytes_of(const QPixmap& tile);

 private:
  struct Entry {
    TileKey key;
    QPixmap tile;
  };
  int64_t capacity_bytes_;
  int64_t bytes_ = 0;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<TileKey, std::list<Entry>::iterator, TileKeyHash> index_;
};

// Tiles waiting for a worker, newest request first (ASAP's TileManager): when the view moves it
// sends the tiles it now needs, most important first; queued tiles it no longer needs are
// dropped, so workers never read what has scrolled out of sight.
class TileJobQueue {
 public:
  // `wanted` in the order to serve them. Returns how many queued jobs were dropped as stale.
  size_t request(const std::vector<TileKey>& wanted);
  std::optional<TileKey> pop();
  void clear() { jobs_.clear(); }
  size_t size() const { return jobs_.size(); }
  bool empty() const { return jobs_.empty(); }
  const std::vector<TileKey>& jobs() const { return jobs_; }  // front is served first

 private:
  std::vector<TileKey> jobs_;
};

}  // namespace tessel::gui

Q_DECLARE_METATYPE(tessel::gui::TileKey)  // carried by TileLoader's signals
