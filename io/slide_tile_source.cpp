#include "io/slide_tile_source.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <future>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "io/shrink.h"

namespace tessel::io {
namespace {

struct Tile {
  int64_t x = 0, y = 0, width = 0, height = 0;  // placement in the level
  std::vector<uint8_t> rgb;                     // interleaved, as Slide reads it
};
using TilePtr = std::shared_ptr<const Tile>;

struct TileKey {
  int64_t row = 0, column = 0;
  bool operator==(const TileKey&) const = default;
};

struct TileKeyHash {
  size_t operator()(const TileKey& k) const noexcept {
    return std::hash<int64_t>()(k.row * 1'000'003 + k.column);
  }
};

}  // namespace

struct SlideTileSource::Impl {
  struct Job {
    TileKey key;
    std::shared_ptr<std::promise<TilePtr>> promise;
    bool prefetch = false;
  };
  struct CacheEntry {
    TilePtr tile;
    std::list<TileKey>::iterator recency;
  };

  std::shared_ptr<const Slide> slide;
  int level = 0;
  double scale = 1.0;  // level pixels per output pixel
  SlideTileSourceOptions options;
  int64_t height = 0, width = 0;              // of the output
  int64_t level_height = 0, level_width = 0;  // of the level the tiles come from
  int64_t tile_bytes = 0;
  std::array<std::array<float, 256>, 3> lut{};
  std::unique_ptr<TiffLevelReader>
      tiff;  // set when libvips decodes the level  // 8-bit value -> normalised float, per channel

  mutable std::mutex mutex;
  std::condition_variable work_ready;
  std::condition_variable prefetch_idle;
  bool stopping = false;
  std::vector<std::thread> workers;

  // The cache: most recently used first.
  std::list<TileKey> recency;
  std::unordered_map<TileKey, CacheEntry, TileKeyHash> cache;
  int64_t cached_bytes = 0;
  std::unordered_map<TileKey, std::shared_future<TilePtr>, TileKeyHash> in_flight;
  TileCacheStats stats;

  std::deque<Job> demand;        // claimed by a read that waits for them: run first
  std::deque<TileKey> prefetch;  // claimed only when a worker starts them
  int prefetch_running = 0;

  // The engine's schedule: regions before `consumed` were read, regions before `issued` had
  // their tiles queued; `ahead_bytes` is what the issued-but-unread regions need.
  std::vector<core::Region> schedule;
  size_t consumed = 0, issued = 0;
  int64_t ahead_bytes = 0;

  Impl(std::shared_ptr<const Slide> s, const ResolutionChoice& choice, SlideTileSourceOptions opts)
      : slide(std::move(s)), level(choice.level), scale(choice.scale), options(opts) {
    if (!slide) throw Error("a slide tile source needs a slide");
    const Level& info = slide->level(level);
    level_height = info.height;
    level_width = info.width;
    const std::string name = "slide tile source for " + slide->path().string() + ": ";
    if (scale == 1.0) {
      height = level_height;
      width = level_width;
    } else {
      if (!(scale > 1.0 && std::isfinite(scale))) throw Error(name + "scale must be at least 1");
      if (choice.height < 1 || choice.width < 1) throw Error(name + "output size must be positive");
      height = choice.height;
      width = choice.width;
    }
    if (options.tile_size < 1) throw Error(name + "tile_size must be at least 1");
    if (options.threads < 0) throw Error(name + "threads must be 0 or more");
    if (options.cache_bytes < 0) throw Error(name + "cache_bytes must be 0 or more");
    if (options.prefetch_bytes < 0) options.prefetch_bytes = options.cache_bytes / 2;
    tile_bytes = 3 * options.tile_size * options.tile_size;
    for (size_t c = 0; c < 3; ++c) {
      if (!(options.std[c] != 0.0F)) throw Error(name + "std must not be 0");
      for (int v = 0; v < 256; ++v) {
        lut[c][static_cast<size_t>(v)] =
            (static_cast<float>(v) / 255.0F - options.mean[c]) / options.std[c];
      }
    }
    choose_reader(name);
    for (int i = 0; i < options.threads; ++i) workers.emplace_back([this] { work(); });
  }

  void choose_reader(const std::string& name) {
    if (options.reader == PixelReader::kOpenSlide) {
      spdlog::debug("{}level {}: OpenSlide decodes the pixels (forced)", name, level);
      return;
    }
    std::string why;
    const bool forced = options.reader == PixelReader::kLibvips;
    const std::optional<int> page = libvips_page_of(*slide, level, forced, &why);
    if (!page) {
      if (forced)
        throw Error(name + "libvips cannot read level " + std::to_string(level) + ": " + why);
      spdlog::debug("{}level {}: OpenSlide decodes the pixels ({})", name, level, why);
      return;
    }
    tiff = std::make_unique<TiffLevelReader>(slide->path(), *page, level_width, level_height);
    spdlog::debug("{}level {}: libvips decodes the pixels (TIFF page {}{})", name, level, *page,
                  forced ? ", forced" : "");
  }

  ~Impl() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
      prefetch.clear();
    }
    work_ready.notify_all();
    for (std::thread& worker : workers) worker.join();
  }

  // Internal tiles that region `r` (inside the level) overlaps, row by row.
  std::vector<TileKey> tiles_of(const core::Region& r) const {
    std::vector<TileKey> keys;
    if (r.empty()) return keys;
    const int64_t t = options.tile_size;
    for (int64_t row = r.y.begin / t; row <= (r.y.end - 1) / t; ++row) {
      for (int64_t column = r.x.begin / t; column <= (r.x.end - 1) / t; ++column) {
        keys.push_back({row, column});
      }
    }
    return keys;
  }

  core::Region clip(const core::Region& r) const {
    return core::intersect(r, core::Region{{0, height}, {0, width}});
  }

  // Output region (inside the image) → the level region its pixels come from.
  core::Region source_of(const core::Region& r) const {
    if (scale == 1.0 || r.empty()) return r;
    return shrink_footprint(r, scale, level_height, level_width);
  }

  TilePtr load(const TileKey& key) const {
    auto tile = std::make_shared<Tile>();
    tile->x = key.column * options.tile_size;
    tile->y = key.row * options.tile_size;
    tile->width = std::min(options.tile_size, level_width - tile->x);
    tile->height = std::min(options.tile_size, level_height - tile->y);
    tile->rgb.resize(static_cast<size_t>(3 * tile->width * tile->height));
    if (tiff) {
      tiff->read_into(tile->x, tile->y, tile->width, tile->height, tile->rgb.data());
    } else {
      slide->read_region_into(level, tile->x, tile->y, tile->width, tile->height,
                              options.background, tile->rgb.data());
    }
    return tile;
  }

  // With the mutex held.
  Job claim(const TileKey& key, bool is_prefetch) {
    Job job{key, std::make_shared<std::promise<TilePtr>>(), is_prefetch};
    in_flight.emplace(key, job.promise->get_future().share());
    return job;
  }

  // With the mutex held.
  void touch(CacheEntry& entry) { recency.splice(recency.begin(), recency, entry.recency); }

  // With the mutex held. Strong guarantee: on bad_alloc the cache is unchanged.
  void insert(const TileKey& key, TilePtr tile) {
    const int64_t bytes = static_cast<int64_t>(tile->rgb.size());
    const auto entry = cache.try_emplace(key, CacheEntry{std::move(tile), recency.end()}).first;
    try {
      recency.push_front(key);
    } catch (...) {
      cache.erase(entry);
      throw;
    }
    entry->second.recency = recency.begin();
    cached_bytes += bytes;
    while (cached_bytes > options.cache_bytes && !recency.empty()) {
      const auto oldest = cache.find(recency.back());
      cached_bytes -= static_cast<int64_t>(oldest->second.tile->rgb.size());
      cache.erase(oldest);
      recency.pop_back();
    }
  }

  // Without the mutex held. Errors go to whoever waits for the tile.
  void run(Job& job) {
    TilePtr tile;
    std::exception_ptr error;
    try {
      tile = load(job.key);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex);
      in_flight.erase(job.key);
      if (tile) {
        if (job.prefetch) ++stats.prefetched;
        try {
          insert(job.key, tile);
        } catch (const std::bad_alloc&) {
          // Caching is an optimisation: the waiting reader still gets the tile.
        }
      }
    }
    if (error) {
      job.promise->set_exception(error);
    } else {
      job.promise->set_value(std::move(tile));
    }
  }

  void work() {
    std::unique_lock lock(mutex);
    while (true) {
      work_ready.wait(lock, [this] { return stopping || !demand.empty() || !prefetch.empty(); });
      if (stopping) return;
      if (!demand.empty()) {
        Job job = std::move(demand.front());
        demand.pop_front();
        lock.unlock();
        run(job);
        lock.lock();
        continue;
      }
      const TileKey key = prefetch.front();
      prefetch.pop_front();
      if (cache.count(key) == 0 && in_flight.count(key) == 0) {
        Job job = claim(key, true);
        ++prefetch_running;
        lock.unlock();
        run(job);
        lock.lock();
        --prefetch_running;
      }
      if (prefetch.empty() && prefetch_running == 0) prefetch_idle.notify_all();
    }
  }

  int64_t bytes_of(const core::Region& r) const {
    return static_cast<int64_t>(tiles_of(source_of(clip(r))).size()) * tile_bytes;
  }

  // With the mutex held: a read of `r` that is in the schedule moves the schedule past it.
  void advance_schedule(const core::Region& r) {
    for (size_t i = consumed; i < schedule.size(); ++i) {
      if (!(schedule[i] == r)) continue;
      for (size_t j = consumed; j <= i && j < issued; ++j) ahead_bytes -= bytes_of(schedule[j]);
      consumed = i + 1;
      issued = std::max(issued, consumed);
      return;
    }
  }

  // With the mutex held: queue the tiles of upcoming regions, up to prefetch_bytes ahead.
  void pump_prefetch() {
    if (workers.empty()) return;
    bool queued = false;
    while (issued < schedule.size() && ahead_bytes < options.prefetch_bytes) {
      const core::Region r = source_of(clip(schedule[issued]));
      for (const TileKey& key : tiles_of(r)) {
        if (const auto it = cache.find(key); it != cache.end()) {
          touch(it->second);  // needed soon: keep it
        } else if (in_flight.count(key) == 0) {
          prefetch.push_back(key);
          queued = true;
        }
      }
      ahead_bytes += bytes_of(schedule[issued]);
      ++issued;
    }
    if (queued) work_ready.notify_all();
  }

  at::Tensor read(const core::Region& r) {
    if (r.empty() || r.y.begin < 0 || r.x.begin < 0 || r.y.end > height || r.x.end > width) {
      throw Error("slide tile source read " + core::to_string(r) + " outside level " +
                  std::to_string(level) + (scale == 1.0 ? "" : " shrunk") + " (" +
                  std::to_string(height) + "×" + std::to_string(width) + ") of " +
                  slide->path().string());
    }
    const auto started = std::chrono::steady_clock::now();
    const std::vector<TileKey> keys = tiles_of(source_of(r));
    std::vector<TilePtr> tiles(keys.size());
    std::vector<std::pair<size_t, std::shared_future<TilePtr>>> pending;
    std::vector<Job> mine;
    {
      std::lock_guard lock(mutex);
      advance_schedule(r);
      for (size_t i = 0; i < keys.size(); ++i) {
        if (const auto it = cache.find(keys[i]); it != cache.end()) {
          touch(it->second);
          tiles[i] = it->second.tile;
          ++stats.hits;
        } else if (const auto f = in_flight.find(keys[i]); f != in_flight.end()) {
          pending.emplace_back(i, f->second);
          ++stats.hits;
        } else {
          Job job = claim(keys[i], false);
          pending.emplace_back(i, in_flight.at(keys[i]));
          ++stats.misses;
          // Workers take all but the first; this thread reads the first itself.
          if (mine.empty()) {
            mine.push_back(std::move(job));
          } else {
            demand.push_back(std::move(job));
          }
        }
      }
      pump_prefetch();
    }
    work_ready.notify_all();
    for (Job& job : mine) run(job);
    // Help with queued demand (ours or another reader's) rather than wait idle.
    while (true) {
      Job job;
      {
        std::lock_guard lock(mutex);
        if (demand.empty()) break;
        job = std::move(demand.front());
        demand.pop_front();
      }
      run(job);
    }
    for (auto& [i, future] : pending) tiles[i] = future.get();
    const auto waited = std::chrono::steady_clock::now() - started;
    {
      std::lock_guard lock(mutex);
      ++stats.reads;
      stats.wait_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count();
    }
    return scale == 1.0 ? assemble(r, tiles) : assemble_shrunk(r, tiles);
  }

  // The level's pixels of `r` as interleaved RGB.
  std::vector<uint8_t> gather(const core::Region& r, const std::vector<TilePtr>& tiles) const {
    const int64_t w = r.x.size();
    std::vector<uint8_t> rgb(static_cast<size_t>(3 * r.area()));
    for (const TilePtr& tile : tiles) {
      const int64_t y0 = std::max(r.y.begin, tile->y);
      const int64_t y1 = std::min(r.y.end, tile->y + tile->height);
      const int64_t x0 = std::max(r.x.begin, tile->x);
      const int64_t x1 = std::min(r.x.end, tile->x + tile->width);
      for (int64_t y = y0; y < y1; ++y) {
        const uint8_t* in = tile->rgb.data() + 3 * ((y - tile->y) * tile->width + (x0 - tile->x));
        std::copy(in, in + 3 * (x1 - x0), rgb.data() + 3 * ((y - r.y.begin) * w + x0 - r.x.begin));
      }
    }
    return rgb;
  }

  at::Tensor assemble_shrunk(const core::Region& r, const std::vector<TilePtr>& tiles) const {
    const std::vector<uint8_t> source = gather(source_of(r), tiles);
    std::vector<uint8_t> rgb(static_cast<size_t>(3 * r.area()));
    shrink_rgb(source.data(), r, scale, level_height, level_width, rgb.data());
    const int64_t h = r.y.size(), w = r.x.size();
    at::Tensor out = at::empty({1, 3, h, w}, at::kFloat);
    float* data = out.data_ptr<float>();
    for (int64_t p = 0; p < h * w; ++p) {
      for (int64_t c = 0; c < 3; ++c) {
        data[c * h * w + p] = lut[static_cast<size_t>(c)][rgb[static_cast<size_t>(3 * p + c)]];
      }
    }
    return out;
  }

  at::Tensor assemble(const core::Region& r, const std::vector<TilePtr>& tiles) const {
    const int64_t h = r.y.size(), w = r.x.size();
    at::Tensor out = at::empty({1, 3, h, w}, at::kFloat);
    float* data = out.data_ptr<float>();
    for (const TilePtr& tile : tiles) {
      const int64_t y0 = std::max(r.y.begin, tile->y);
      const int64_t y1 = std::min(r.y.end, tile->y + tile->height);
      const int64_t x0 = std::max(r.x.begin, tile->x);
      const int64_t x1 = std::min(r.x.end, tile->x + tile->width);
      for (int64_t y = y0; y < y1; ++y) {
        const uint8_t* in = tile->rgb.data() + 3 * ((y - tile->y) * tile->width + (x0 - tile->x));
        float* row = data + (y - r.y.begin) * w + (x0 - r.x.begin);
        for (int64_t x = 0; x < x1 - x0; ++x) {
          for (int64_t c = 0; c < 3; ++c) {
            row[c * h * w + x] = lut[static_cast<size_t>(c)][in[3 * x + c]];
          }
        }
      }
    }
    return out;
  }
};

SlideTileSource::SlideTileSource(const std::filesystem::path& slide, int level,
                                 SlideTileSourceOptions options)
    : SlideTileSource(std::make_shared<const Slide>(slide), level, options) {}

SlideTileSource::SlideTileSource(std::shared_ptr<const Slide> slide, int level,
                                 SlideTileSourceOptions options)
    : impl_(std::make_unique<Impl>(std::move(slide), ResolutionChoice{level, 1.0, {}, 0, 0},
                                   options)) {}

SlideTileSource::SlideTileSource(std::shared_ptr<const Slide> slide, const ResolutionChoice& choice,
                                 SlideTileSourceOptions options)
    : impl_(std::make_unique<Impl>(std::move(slide), choice, options)) {}

SlideTileSource::~SlideTileSource() = default;

int64_t SlideTileSource::height() const { return impl_->height; }
int64_t SlideTileSource::width() const { return impl_->width; }
const Slide& SlideTileSource::slide() const { return *impl_->slide; }
int SlideTileSource::level() const { return impl_->level; }
double SlideTileSource::scale() const { return impl_->scale; }
PixelReader SlideTileSource::reader() const {
  return impl_->tiff ? PixelReader::kLibvips : PixelReader::kOpenSlide;
}

at::Tensor SlideTileSource::read(const core::Region& r) { return impl_->read(r); }

void SlideTileSource::will_read(const std::vector<core::Region>& upcoming) {
  std::lock_guard lock(impl_->mutex);
  impl_->schedule = upcoming;
  impl_->consumed = 0;
  impl_->issued = 0;
  impl_->ahead_bytes = 0;
  impl_->prefetch.clear();
  impl_->pump_prefetch();
  if (impl_->prefetch.empty() && impl_->prefetch_running == 0) impl_->prefetch_idle.notify_all();
}

void SlideTileSource::wait_for_prefetch() {
  std::unique_lock lock(impl_->mutex);
  impl_->prefetch_idle.wait(
      lock, [this] { return impl_->prefetch.empty() && impl_->prefetch_running == 0; });
}

TileCacheStats SlideTileSource::cache_stats() const {
  std::lock_guard lock(impl_->mutex);
  TileCacheStats stats = impl_->stats;
  stats.cached_tiles = static_cast<int64_t>(impl_->cache.size());
  stats.cached_bytes = impl_->cached_bytes;
  return stats;
}

}  // namespace tessel::io
