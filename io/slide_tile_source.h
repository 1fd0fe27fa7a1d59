// The engine's TileSource over one level of a slide, as it is or shrunk to a resolution (see
// io/resolution.h): reads only the windows the engine asks for, on a small thread pool, through a
// byte-bounded LRU cache of fixed-size internal tiles of the level, and prefetches the tiles of
// the engine's upcoming windows in schedule order.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "core/tile_source.h"
#include "io/resolution.h"
#include "io/slide.h"
#include "io/tiff_reader.h"

namespace tessel::io {

struct SlideTileSourceOptions {
  // Pixel value v (0..255) of channel c becomes (v / 255 − mean[c]) / std[c]. The defaults give
  // plain [0, 1] scaling; kImageNetMean / kImageNetStd give what ImageNet-trained weights expect.
  std::array<float, 3> mean = {0.0F, 0.0F, 0.0F};
  std::array<float, 3> std = {1.0F, 1.0F, 1.0F};
  Rgb background = {};                       // transparent and outside-the-slide pixels: white
  int threads = 2;                           // reader threads (0: read on the calling thread only)
  int64_t tile_size = 512;                   // internal tile edge, in pixels of the level
  int64_t cache_bytes = int64_t{256} << 20;  // RGB bytes of cached tiles (3 per pixel)
  // Prefetch runs ahead of the reads by at most this many tile bytes (default: half the cache,
  // so prefetched tiles are not evicted before the engine reads them).
  int64_t prefetch_bytes = -1;
  // Who decodes the internal tiles: kAuto takes libvips for plain tiled TIFF levels
  // (io/tiff_reader.h) and OpenSlide otherwise; forcing kLibvips throws where it cannot apply.
  PixelReader reader = PixelReader::kAuto;
};

inline constexpr std::array<float, 3> kImageNetMean = {0.485F, 0.456F, 0.406F};
inline constexpr std::array<float, 3> kImageNetStd = {0.229F, 0.224F, 0.225F};

// What the cache did, for tests, benchmarks and logs.
struct TileCacheStats {
  int64_t hits = 0;        // internal tiles a read found cached (or already being read)
  int64_t misses = 0;      // internal tiles a read had to load itself
  int64_t prefetched = 0;  // internal tiles loaded ahead of a read
  int64_t cached_tiles = 0;
  int64_t cached_bytes = 0;
  // The time the engine waits for pixels: reads served, and the nanoseconds read() spent getting
  // their tiles (loading them itself or blocked on other threads' loads), not assembling floats.
  int64_t reads = 0;
  int64_t wait_ns = 0;
};

class SlideTileSource : public core::TileSource {
 public:
  SlideTileSource(const std::filesystem::path& slide, int level,
                  SlideTileSourceOptions options = {});
  SlideTileSource(std::shared_ptr<const Slide> slide, int level,
                  SlideTileSourceOptions options = {});
  // The level of `choice` shrunk by its scale to choice.width × choice.height (io/shrink.h: a
  // box filter whose pixels do not depend on how the image is cut into windows).
  SlideTileSource(std::shared_ptr<const Slide> slide, const ResolutionChoice& choice,
                  SlideTileSourceOptions options = {});
  ~SlideTileSource() override;
  SlideTileSource(const SlideTileSource&) = delete;
  SlideTileSource& operator=(const SlideTileSource&) = delete;

  int64_t channels() const override { return 3; }
  int64_t height() const override;
  int64_t width() const override;
  // Float 1×3×h×w, contiguous, normalised as the options say. `r` is in output pixels (the
  // level's when the scale is 1) and must lie inside the image. Throws tessel::Error (naming the
  // slide) when OpenSlide fails. Thread-safe.
  at::Tensor read(const core::Region& r) override;
  // Replaces the prefetch schedule: the internal tiles of `upcoming` are loaded in order on the
  // pool, at most prefetch_bytes ahead of the reads that follow the schedule.
  void will_read(const std::vector<core::Region>& upcoming) override;

  // Blocks until no prefetch is queued or running (tests, benchmarks).
  void wait_for_prefetch();
  TileCacheStats cache_stats() const;
  const Slide& slide() const;
  int level() const;
  double scale() const;        // level pixels per output pixel
  PixelReader reader() const;  // kOpenSlide or kLibvips: the one chosen at construction

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessel::io
