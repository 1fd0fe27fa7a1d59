// SlideTileSource gives exactly the pixels of a direct Slide read, whatever its internal tiling,
// cache and prefetch do. Small internal tiles make the real slides cross many tile boundaries.
#include "io/slide_tile_source.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "core/error.h"
#include "tests/io/shared_slides.h"

namespace {

using tessel::core::Region;
using tessel::io::Slide;
using tessel::io::SlideTileSource;
using tessel::io::SlideTileSourceOptions;
using tessel::test::shared_slide;

// The region read directly through Slide, as float 1×3×h×w in [0, 1].
at::Tensor direct_read(const Slide& slide, int level, const Region& r,
                       tessel::io::Rgb background = {}) {
  const auto image =
      slide.read_region(level, r.x.begin, r.y.begin, r.x.size(), r.y.size(), background);
  return at::from_blob(const_cast<uint8_t*>(image.pixels.data()),  // cloned below
                       {image.height, image.width, 3}, at::kByte)
      .permute({2, 0, 1})
      .unsqueeze(0)
      .to(at::kFloat)
      .div(255.0F)
      .contiguous();
}

Region random_region(std::mt19937& rng, int64_t height, int64_t width, int64_t max_size) {
  const int64_t h = std::uniform_int_distribution<int64_t>(1, std::min(max_size, height))(rng);
  const int64_t w = std::uniform_int_distribution<int64_t>(1, std::min(max_size, width))(rng);
  const int64_t y = std::uniform_int_distribution<int64_t>(0, height - h)(rng);
  const int64_t x = std::uniform_int_distribution<int64_t>(0, width - w)(rng);
  return {{y, y + h}, {x, x + w}};
}

SlideTileSourceOptions small_tiles(int64_t tile_size = 64) {
  SlideTileSourceOptions options;
  options.tile_size = tile_size;
  return options;
}

TEST(SlideTileSource, ReadsTheSamePixelsAsTheSlideAcrossInternalTileBoundaries) {
  const auto slide = std::make_shared<const Slide>(shared_slide("cmu-1-small-region.svs"));
  SlideTileSource source(slide, 0, small_tiles());
  EXPECT_EQ(source.channels(), 3);
  EXPECT_EQ(source.height(), 2967);
  EXPECT_EQ(source.width(), 2220);
  // Crossing one vertical boundary, one horizontal, both, and many tiles at once.
  for (const Region& r : {Region{{10, 50}, {60, 70}}, Region{{60, 70}, {10, 50}},
                          Region{{63, 65}, {127, 129}}, Region{{100, 391}, {33, 517}}}) {
    const at::Tensor tile = source.read(r);
    EXPECT_EQ(tile.sizes(), (at::IntArrayRef{1, 3, r.y.size(), r.x.size()})) << r;
    EXPECT_TRUE(tile.is_contiguous());
    EXPECT_TRUE(at::equal(tile, direct_read(*slide, 0, r))) << r;
  }
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    const Region r = random_region(rng, source.height(), source.width(), 300);
    EXPECT_TRUE(at::equal(source.read(r), direct_read(*slide, 0, r))) << r;
  }
}

TEST(SlideTileSource, ReadsTheSamePixelsAsTheSlideAtTheImageEdge) {
  const auto slide = std::make_shared<const Slide>(shared_slide("cmu-1-small-region.svs"));
  SlideTileSource source(slide, 0, small_tiles(100));  // 2220×2967: partial last tiles
  const int64_t h = source.height(), w = source.width();
  for (const Region& r : {Region{{h - 7, h}, {w - 150, w}}, Region{{0, h}, {w - 1, w}},
                          Region{{h - 1, h}, {0, w}}, Region{{h - 230, h}, {w - 230, w}}}) {
    EXPECT_TRUE(at::equal(source.read(r), direct_read(*slide, 0, r))) << r;
  }
  // A whole slide smaller than one internal tile.
  const auto small = std::make_shared<const Slide>(shared_slide("small.svs"));
  SlideTileSource whole(small, 0);
  const Region all{{0, 16}, {0, 16}};
  EXPECT_TRUE(at::equal(whole.read(all), direct_read(*small, 0, all)));
}

TEST(SlideTileSource, ReadsPyramidLevelsLikeTheSlide) {
  // boxes.tiff levels 1 (downsample 2) and 0. Its levels 2 and 3 are left out: OpenSlide 3.4.1
  // returns uninitialised memory for parts of them (see slide_test.cpp).
  const auto boxes = std::make_shared<const Slide>(shared_slide("boxes.tiff"));
  for (int level = 0; level < 2; ++level) {
    SlideTileSource source(boxes, level, small_tiles(16));
    EXPECT_EQ(source.width(), boxes->level(level).width);
    EXPECT_EQ(source.height(), boxes->level(level).height);
    const Region all{{0, source.height()}, {0, source.width()}};
    const Region inner{{5, source.height() - 3}, {7, source.width() - 2}};
    for (const Region& r : {all, inner}) {
      EXPECT_TRUE(at::equal(source.read(r), direct_read(*boxes, level, r)))
          << "level " << level << " " << r;
    }
  }
  // At a non-integer downsample (tcga level 1: 2.0005) OpenSlide resamples the sub-pixel offset
  // of each read's level-0 position, so a tile-aligned read and a direct read of the same pixels
  // differ by interpolation: close, not equal.
  const auto tcga = std::make_shared<const Slide>(shared_slide("tcga-cr-7395-01a-01-ts1.svs"));
  SlideTileSource source(tcga, 1, small_tiles());
  const Region r{{900, 1100}, {1000, 1150}};
  const at::Tensor difference = (source.read(r) - direct_read(*tcga, 1, r)).abs();
  EXPECT_LT(difference.mean().item<float>(), 0.02F);
}

TEST(SlideTileSource, NormalisesWithTheGivenMeanAndStd) {
  const auto slide = std::make_shared<const Slide>(shared_slide("small.svs"));
  SlideTileSourceOptions options;
  options.mean = tessel::io::kImageNetMean;
  options.std = tessel::io::kImageNetStd;
  SlideTileSource plain(slide, 0), imagenet(slide, 0, options);
  const Region all{{0, 16}, {0, 16}};
  const at::Tensor mean = at::tensor({0.485F, 0.456F, 0.406F}).view({1, 3, 1, 1});
  const at::Tensor std = at::tensor({0.229F, 0.224F, 0.225F}).view({1, 3, 1, 1});
  EXPECT_TRUE(at::allclose(imagenet.read(all), (plain.read(all) - mean) / std, 1e-5, 1e-5));
  EXPECT_GE(plain.read(all).min().item<float>(), 0.0F);
  EXPECT_LE(plain.read(all).max().item<float>(), 1.0F);
}

TEST(SlideTileSource, ServesRepeatedAndOverlappingWindowsFromTheCache) {
  SlideTileSource source(shared_slide("cmu-1-small-region.svs"), 0, small_tiles());
  const Region r{{0, 128}, {0, 128}};  // 4 internal tiles
  const at::Tensor first = source.read(r);
  EXPECT_EQ(source.cache_stats().misses, 4);
  EXPECT_EQ(source.cache_stats().hits, 0);
  EXPECT_TRUE(at::equal(source.read(r), first));
  EXPECT_TRUE(
      at::equal(source.read({{32, 96}, {32, 96}}), first.slice(2, 32, 96).slice(3, 32, 96)));
  const auto stats = source.cache_stats();
  EXPECT_EQ(stats.misses, 4);
  EXPECT_EQ(stats.hits, 8);
  EXPECT_EQ(stats.cached_tiles, 4);
  EXPECT_EQ(stats.cached_bytes, 4 * 64 * 64 * 3);
}

TEST(SlideTileSource, KeepsTheCacheWithinItsByteBound) {
  SlideTileSourceOptions options = small_tiles();
  options.cache_bytes = 3 * 64 * 64 * 3;  // three tiles
  SlideTileSource source(shared_slide("cmu-1-small-region.svs"), 0, options);
  const auto slide = std::make_shared<const Slide>(shared_slide("cmu-1-small-region.svs"));
  for (int64_t i = 0; i < 10; ++i) {
    const Region r{{i * 64, i * 64 + 100}, {i * 30, i * 30 + 100}};
    EXPECT_TRUE(at::equal(source.read(r), direct_read(*slide, 0, r))) << r;
    EXPECT_LE(source.cache_stats().cached_bytes, options.cache_bytes);
  }
}

TEST(SlideTileSource, PrefetchAndCacheGiveTheSamePixelsAsColdReads) {
  const auto slide = std::make_shared<const Slide>(shared_slide("cmu-1-small-region.svs"));
  // The reference: no threads, no cache, nothing kept between reads.
  SlideTileSourceOptions cold = small_tiles();
  cold.threads = 0;
  cold.cache_bytes = 0;
  SlideTileSource reference(slide, 0, cold);
  SlideTileSource source(slide, 0, small_tiles());
  // An engine-like schedule: overlapping windows (a halo of 20) in row-major order.
  std::vector<Region> schedule;
  for (int64_t y = 0; y < 600; y += 150) {
    for (int64_t x = 0; x < 600; x += 150) {
      schedule.push_back(
          {{std::max<int64_t>(0, y - 20), y + 170}, {std::max<int64_t>(0, x - 20), x + 170}});
    }
  }
  source.will_read(schedule);
  source.wait_for_prefetch();
  EXPECT_GT(source.cache_stats().prefetched, 0);
  for (const Region& r : schedule) {
    EXPECT_TRUE(at::equal(source.read(r), reference.read(r))) << r;
  }
  const auto stats = source.cache_stats();
  EXPECT_EQ(stats.misses, 0) << "prefetch should have loaded every tile of the schedule";
  EXPECT_GT(stats.hits, 0);
}

TEST(SlideTileSource, PrefetchRunsOnlyABoundedDistanceAheadOfTheReads) {
  SlideTileSourceOptions options = small_tiles();
  options.prefetch_bytes = 2 * 64 * 64 * 3;  // two tiles ahead
  SlideTileSource source(shared_slide("cmu-1-small-region.svs"), 0, options);
  std::vector<Region> schedule;
  for (int64_t x = 0; x < 64 * 10; x += 64) schedule.push_back({{0, 64}, {x, x + 64}});
  source.will_read(schedule);
  source.wait_for_prefetch();
  EXPECT_EQ(source.cache_stats().prefetched, 2);
  for (const Region& r : schedule) source.read(r);
  source.wait_for_prefetch();
  EXPECT_EQ(source.cache_stats().misses + source.cache_stats().prefetched, 10);
}

TEST(SlideTileSource, GivesTheSamePixelsToConcurrentReaders) {
  const auto slide = std::make_shared<const Slide>(shared_slide("cmu-1-small-region.svs"));
  SlideTileSourceOptions options = small_tiles();
  options.cache_bytes = 40 * 64 * 64 * 3;  // small enough to evict while reading
  SlideTileSource source(slide, 0, options);
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::vector<Region> regions;
  std::mt19937 rng(seed);
  for (int i = 0; i < 32; ++i) regions.push_back(random_region(rng, 700, 700, 200));
  source.will_read(regions);
  std::vector<at::Tensor> results(regions.size());
  std::vector<std::thread> readers;
  for (size_t t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      for (size_t i = t; i < regions.size(); i += 4) results[i] = source.read(regions[i]);
    });
  }
  for (std::thread& reader : readers) reader.join();
  for (size_t i = 0; i < regions.size(); ++i) {
    EXPECT_TRUE(at::equal(results[i], direct_read(*slide, 0, regions[i]))) << regions[i];
  }
}

TEST(SlideTileSource, ThrowsTesselErrorForABrokenSlideEvenAfterPrefetch) {
  SlideTileSource source(shared_slide("unreadable.svs"), 0);
  const Region all{{0, 16}, {0, 16}};
  source.will_read({all});
  source.wait_for_prefetch();
  try {
    source.read(all);
    FAIL() << "a read of a broken slide returned pixels";
  } catch (const tessel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("unreadable.svs"), std::string::npos) << e.what();
  }
  EXPECT_THROW(source.read(all), tessel::Error);
}

TEST(SlideTileSource, RefusesReadsOutsideTheLevelAndLevelsItDoesNotHave) {
  SlideTileSource source(shared_slide("small.svs"), 0);
  EXPECT_THROW(source.read({{0, 17}, {0, 4}}), tessel::Error);
  EXPECT_THROW(source.read({{-1, 4}, {0, 4}}), tessel::Error);
  EXPECT_THROW(source.read({{2, 2}, {0, 4}}), tessel::Error);
  EXPECT_THROW(SlideTileSource(shared_slide("small.svs"), 1), tessel::Error);
}

}  // namespace
