// SlideTileSource at a resolution between levels: a window's pixels are exactly the same pixels of
// a whole-image read however the image is cut (the engine's exactness needs consistent input), a
// box shrink keeps flat colour exact, and a shrunk level approximates the pyramid's own level.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "io/resolution.h"
#include "io/shrink.h"
#include "io/slide_tile_source.h"
#include "tests/io/shared_slides.h"

namespace {

using tessel::core::Region;
using tessel::io::choose_resolution;
using tessel::io::Resolution;
using tessel::io::ResolutionChoice;
using tessel::io::Slide;
using tessel::io::SlideTileSource;
using tessel::io::SlideTileSourceOptions;
using tessel::test::shared_slide;

SlideTileSourceOptions tiles_of_size(int64_t tile_size, int threads = 2) {
  SlideTileSourceOptions options;
  options.tile_size = tile_size;
  options.threads = threads;
  return options;
}

Region random_region(std::mt19937& rng, int64_t height, int64_t width, int64_t max_size) {
  const int64_t h = std::uniform_int_distribution<int64_t>(1, std::min(max_size, height))(rng);
  const int64_t w = std::uniform_int_distribution<int64_t>(1, std::min(max_size, width))(rng);
  const int64_t y = std::uniform_int_distribution<int64_t>(0, height - h)(rng);
  const int64_t x = std::uniform_int_distribution<int64_t>(0, width - w)(rng);
  return {{y, y + h}, {x, x + w}};
}

at::Tensor crop(const at::Tensor& whole, const Region& r) {
  return whole.slice(2, r.y.begin, r.y.end).slice(3, r.x.begin, r.x.end);
}

// Whole image vs random windows (internal tiles of 61 px, on 2 threads), for one choice; the
// whole image is read on the calling thread through internal tiles of `whole_tile_size`.
void expect_windows_match_whole_image(const std::string& file, const ResolutionChoice& choice,
                                      uint32_t seed, int64_t whole_tile_size = 512) {
  SCOPED_TRACE(file + " " + tessel::io::to_string(choice) + ", seed " + std::to_string(seed));
  const auto slide = std::make_shared<const Slide>(shared_slide(file));
  SlideTileSource whole_source(slide, choice, tiles_of_size(whole_tile_size, 0));
  ASSERT_EQ(whole_source.height(), choice.height);
  ASSERT_EQ(whole_source.width(), choice.width);
  const at::Tensor whole = whole_source.read({{0, choice.height}, {0, choice.width}});
  ASSERT_GT(whole.std().item<float>(), 0.01F) << "a blank image proves nothing";
  SlideTileSource windows(slide, choice, tiles_of_size(61));
  std::mt19937 rng(seed);
  for (int i = 0; i < 60; ++i) {
    const Region r = random_region(rng, choice.height, choice.width, 150);
    const at::Tensor window = windows.read(r);
    ASSERT_TRUE(at::equal(window, crop(whole, r))) << "window " << r;
  }
  // Single pixels and single rows at the right and bottom edges, where the footprint is clipped.
  for (const Region& r :
       {Region{{choice.height - 1, choice.height}, {0, choice.width}},
        Region{{0, choice.height}, {choice.width - 1, choice.width}},
        Region{{choice.height - 1, choice.height}, {choice.width - 1, choice.width}}}) {
    ASSERT_TRUE(at::equal(windows.read(r), crop(whole, r))) << "window " << r;
  }
}

TEST(ResampledTileSource, WindowsAreBitForBitTheWholeImageAtANonIntegerScale) {
  // CMU-1 (0.499 mpp) at 1.17 mpp: level 0 shrunk by 2.3447...
  const Slide slide(shared_slide("cmu-1-small-region.svs"));
  const ResolutionChoice c =
      choose_resolution(tessel::io::pyramid_of(slide), Resolution::at_mpp(1.17));
  ASSERT_EQ(c.level, 0);
  ASSERT_GT(c.scale, 2.3);
  expect_windows_match_whole_image("cmu-1-small-region.svs", c, 20261122);
}

TEST(ResampledTileSource, WindowsAreBitForBitTheWholeImageAtAScaleBelowTwo) {
  const Slide slide(shared_slide("cmu-1-small-region.svs"));
  const ResolutionChoice c =
      choose_resolution(tessel::io::pyramid_of(slide), Resolution::at_mpp(0.7));
  ASSERT_NEAR(c.scale, 0.7 / 0.499, 1e-12);
  expect_windows_match_whole_image("cmu-1-small-region.svs", c, 7);
}

TEST(ResampledTileSource, WindowsAreBitForBitTheWholeImageFromLevelOneOfTcga) {
  // Level 1 (downsample 2.0005) shrunk again, with a base mpp the file lacks. Same internal tile
  // size for both: at a non-integer downsample OpenSlide's pixels of a level depend on where a
  // read starts (slide_tile_source_test.cpp), so the level itself is only consistent per tiling.
  const Slide slide(shared_slide("tcga-cr-7395-01a-01-ts1.svs"));
  const ResolutionChoice c =
      choose_resolution(tessel::io::pyramid_of(slide), Resolution::at_mpp(1.3).with_base_mpp(0.25));
  ASSERT_EQ(c.level, 1);
  expect_windows_match_whole_image("tcga-cr-7395-01a-01-ts1.svs", c, 42, 61);
}

TEST(ResampledTileSource, PrefetchedWindowsAreTheSameAsReadOnes) {
  const auto slide = std::make_shared<const Slide>(shared_slide("cmu-1-small-region.svs"));
  const ResolutionChoice c =
      choose_resolution(tessel::io::pyramid_of(*slide), Resolution::at_mpp(1.5));
  SlideTileSource plain(slide, c, tiles_of_size(100, 0));
  SlideTileSource prefetching(slide, c, tiles_of_size(100, 2));
  std::vector<Region> schedule;
  for (int64_t y = 0; y < c.height; y += 128) {
    schedule.push_back({{y, std::min(c.height, y + 128)}, {0, c.width}});
  }
  prefetching.will_read(schedule);
  for (const Region& r : schedule) ASSERT_TRUE(at::equal(prefetching.read(r), plain.read(r))) << r;
  EXPECT_GT(prefetching.cache_stats().prefetched, 0);
}

TEST(ResampledTileSource, ShrinkingByTwoApproximatesTheNextLevelOfBoxes) {
  // boxes.tiff level 1 is level 0 shrunk by 2 by whoever made the file; our shrink of level 0
  // should be close (levels 2–3 are not comparable: OpenSlide reads garbage there).
  const auto slide = std::make_shared<const Slide>(shared_slide("boxes.tiff"));
  SlideTileSource shrunk(slide, ResolutionChoice{0, 2.0, std::nullopt, 150, 125});
  SlideTileSource level1(slide, 1);
  ASSERT_EQ(level1.width(), 150);
  ASSERT_EQ(level1.height(), 125);
  const Region all{{0, 125}, {0, 150}};
  const at::Tensor a = shrunk.read(all), b = level1.read(all);
  ASSERT_GT(b.std().item<float>(), 0.05F);
  const double mean_abs = (a - b).abs().mean().item<double>() * 255.0;
  // Measured 0: the file's level 1 is itself a 2×2 box average of level 0.
  EXPECT_LT(mean_abs, 1.0) << "mean absolute difference in 8-bit values";
  std::cout << "boxes.tiff: level 0 shrunk by 2 vs level 1, mean |diff| " << mean_abs
            << " of 255\n";
}

TEST(ResampledTileSource, ShrinkingLevelZeroApproximatesTheScannersLevelOneOfTcga) {
  // The scanner made level 1 with its own filter and JPEG-compressed it: close, not equal.
  // Measured 6.7 of 255, against 11.5–18.5 for the same comparison shifted by one pixel (so the
  // footprints are aligned) and 9.6 between neighbouring pixels of level 0 (busy tissue).
  const auto slide = std::make_shared<const Slide>(shared_slide("tcga-cr-7395-01a-01-ts1.svs"));
  const tessel::io::Level& level1 = slide->level(1);
  SlideTileSource shrunk(
      slide, ResolutionChoice{0, level1.downsample, std::nullopt, level1.width, level1.height});
  SlideTileSource direct(slide, 1);
  const Region r{{400, 1400}, {300, 1800}};
  const at::Tensor b = direct.read(r);
  ASSERT_GT(b.std().item<float>(), 0.05F);
  const double mean_abs = (shrunk.read(r) - b).abs().mean().item<double>() * 255.0;
  EXPECT_LT(mean_abs, 8.0) << "mean absolute difference in 8-bit values";
  std::cout << "tcga: level 0 shrunk by " << level1.downsample << " vs level 1, mean |diff| "
            << mean_abs << " of 255\n";
}

TEST(ResampledTileSource, ScaleOfOneIsTheLevelAsItIs) {
  const auto slide = std::make_shared<const Slide>(shared_slide("cmu-1-small-region.svs"));
  SlideTileSource direct(slide, 0);
  SlideTileSource chosen(slide, ResolutionChoice{0, 1.0, 0.499, 2220, 2967});
  const Region r{{100, 300}, {50, 400}};
  EXPECT_TRUE(at::equal(direct.read(r), chosen.read(r)));
  EXPECT_EQ(chosen.scale(), 1.0);
}

TEST(ResampledTileSource, RefusesReadsOutsideTheShrunkImage) {
  const auto slide = std::make_shared<const Slide>(shared_slide("boxes.tiff"));
  SlideTileSource shrunk(slide, ResolutionChoice{0, 2.0, std::nullopt, 150, 125});
  EXPECT_THROW(shrunk.read({{0, 126}, {0, 10}}), tessel::Error);
  EXPECT_THROW(SlideTileSource(slide, ResolutionChoice{0, 0.5, std::nullopt, 600, 500}),
               tessel::Error);
}

// Interleaved RGB of `r` of a height × width image that is flat 200 but for a 2×2 block of
// (0, 100, 255) at the top left: what shrink_rgb takes for a footprint `r`.
std::vector<uint8_t> block_image(const Region& r) {
  std::vector<uint8_t> rgb;
  for (int64_t y = r.y.begin; y < r.y.end; ++y) {
    for (int64_t x = r.x.begin; x < r.x.end; ++x) {
      const bool block = y < 2 && x < 2;
      for (int v : {block ? 0 : 200, block ? 100 : 200, block ? 255 : 200}) {
        rgb.push_back(static_cast<uint8_t>(v));
      }
    }
  }
  return rgb;
}

TEST(BoxShrink, KeepsAFlatColourExactAndAveragesIntegerBlocks) {
  const Region out{{0, 2}, {0, 3}};
  const Region footprint = tessel::io::shrink_footprint(out, 2.0, 5, 7);
  EXPECT_EQ(footprint, (Region{{0, 4}, {0, 6}}));
  std::vector<uint8_t> rgb(3 * 3 * 2);
  tessel::io::shrink_rgb(block_image(footprint).data(), out, 2.0, 5, 7, rgb.data());
  EXPECT_EQ(rgb[0], 0);
  EXPECT_EQ(rgb[1], 100);
  EXPECT_EQ(rgb[2], 255);
  for (size_t i = 3; i < rgb.size(); ++i) EXPECT_EQ(rgb[i], 200) << i;
}

TEST(BoxShrink, WeighsPixelsByTheirOverlapAtAFractionalScale) {
  // At 2.5, output pixel 0 covers rows and columns [0, 2.5): the block is 4 / 6.25 of it.
  const Region out{{0, 1}, {0, 1}};
  std::vector<uint8_t> one(3);
  tessel::io::shrink_rgb(block_image(tessel::io::shrink_footprint(out, 2.5, 5, 7)).data(), out, 2.5,
                         5, 7, one.data());
  EXPECT_NEAR(one[0], 200 * 2.25 / 6.25, 0.5);
  EXPECT_NEAR(one[1], (100 * 4 + 200 * 2.25) / 6.25, 0.5);
  EXPECT_NEAR(one[2], (255 * 4 + 200 * 2.25) / 6.25, 0.5);
}

TEST(BoxShrink, FootprintCoversExactlyTheAveragedArea) {
  using tessel::core::Window;
  EXPECT_EQ(tessel::io::shrink_footprint(Window{0, 3}, 2.5, 100), (Window{0, 8}));
  EXPECT_EQ(tessel::io::shrink_footprint(Window{1, 2}, 2.5, 100), (Window{2, 5}));
  EXPECT_EQ(tessel::io::shrink_footprint(Window{2, 4}, 2.0, 100), (Window{4, 8}));
  EXPECT_EQ(tessel::io::shrink_footprint(Window{39, 40}, 2.5, 99), (Window{97, 99}));
}

}  // namespace
