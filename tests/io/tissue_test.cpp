// Tissue masks on a real H&E slide and on tiny slides generated here with libvips (bare glass,
// tissue everywhere, tissue on one side), Otsu on known histograms, and the PNGs written.
#include "io/tissue.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <vips/vips8>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <sstream>

#include "core/error.h"
#include "io/thumbnail.h"
#include "io/vips.h"
#include "tests/io/shared_slides.h"

namespace tessel::io {
namespace {

using tessel::test::shared_slide;

std::filesystem::path scratch(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tessel_tissue_test_" + std::to_string(static_cast<int64_t>(getpid())));
  std::filesystem::create_directories(dir);
  return dir / name;
}

// A tiled TIFF (OpenSlide's generic-tiff) of `image`, which must be 3-band uchar. One level only:
// OpenSlide 3.4.1 misreads small pyramid levels (see slide_test.cpp on boxes.tiff).
std::string write_slide(const vips::VImage& image, const std::string& name) {
  const std::string path = scratch(name).string();
  image.tiffsave(
      path.c_str(),
      vips::VImage::option()->set("tile", true)->set("tile_width", 64)->set("tile_height", 64));
  return path;
}

// A colour with independent gaussian noise of `sigma` per channel, as a scanner adds it.
vips::VImage noisy(int width, int height, const std::vector<double>& rgb, double sigma, int seed) {
  start_vips();
  const auto noise = [&](int channel_seed) {
    return vips::VImage::gaussnoise(
        width, height,
        vips::VImage::option()->set("mean", 0.0)->set("sigma", sigma)->set("seed", channel_seed));
  };
  const vips::VImage colour = (vips::VImage::black(width, height) + 1.0) * rgb;
  return (colour + vips::VImage::bandjoin({noise(seed), noise(seed + 1000), noise(seed + 2000)}))
      .cast(VIPS_FORMAT_UCHAR);
}

std::array<int64_t, 256> histogram_of(const std::vector<int>& values) {
  std::array<int64_t, 256> h{};
  for (int v : values) ++h[v];
  return h;
}

TEST(Otsu, SplitsTwoSpikesInTheMiddleOfTheGapBetweenThem) {
  const OtsuSplit split = otsu(histogram_of({10, 10, 10, 200, 200, 200}));
  EXPECT_EQ(split.threshold, (10 + 199) / 2);
  EXPECT_DOUBLE_EQ(split.mean_below, 10.0);
  EXPECT_DOUBLE_EQ(split.mean_above, 200.0);
}

TEST(Otsu, SplitsTwoEqualGaussiansHalfwayBetweenTheirMeans) {
  std::array<int64_t, 256> h{};
  for (int i = 0; i < 256; ++i) {
    h[i] = std::llround(1000.0 * (std::exp(-std::pow((i - 60) / 8.0, 2) / 2) +
                                  std::exp(-std::pow((i - 160) / 8.0, 2) / 2)));
  }
  const OtsuSplit split = otsu(h);
  EXPECT_NEAR(split.threshold, 110, 1);
  EXPECT_NEAR(split.mean_below, 60.0, 0.5);
  EXPECT_NEAR(split.mean_above, 160.0, 0.5);
}

TEST(Otsu, MovesTowardsTheSmallerClassWhenOneDominates) {
  // Unequal weights: the classic case where Otsu is not the midpoint of the means.
  std::array<int64_t, 256> h{};
  for (int i = 0; i < 256; ++i) {
    h[i] = std::llround(10000.0 * std::exp(-std::pow((i - 5) / 3.0, 2) / 2) +
                        500.0 * std::exp(-std::pow((i - 80) / 20.0, 2) / 2));
  }
  const OtsuSplit split = otsu(h);
  EXPECT_GT(split.threshold, 10);
  EXPECT_LT(split.threshold, 50);
}

TEST(Otsu, OfASingleValueOrNothingHasEqualMeans) {
  const OtsuSplit one = otsu(histogram_of({42, 42, 42}));
  EXPECT_EQ(one.threshold, 42);
  EXPECT_EQ(one.mean_below, one.mean_above);
  const OtsuSplit none = otsu({});
  EXPECT_EQ(none.threshold, 0);
}

TEST(Saturation, IsMaxMinusMinOfTheChannels) {
  const RgbImage image{3, 1, {255, 255, 255, 200, 100, 160, 0, 0, 255}};
  EXPECT_EQ(saturation(image), (std::vector<uint8_t>{0, 100, 255}));
}

TEST(TissueMask, OfBareGlassIsEmpty) {
  const std::string path = write_slide(noisy(600, 400, {235, 235, 238}, 3.0, 1), "glass.tiff");
  const TissueMask mask = tissue_mask(Slide(path), TissueMaskOptions{});
  EXPECT_TRUE(mask.empty()) << to_string(mask);
  EXPECT_EQ(mask.tissue_fraction, 0.0) << to_string(mask);
  EXPECT_GE(mask.threshold, TissueMaskOptions{}.min_saturation);
}

TEST(TissueMask, OfTissueEverywhereCoversTheWholeSlide) {
  // Eosin pink and haematoxylin purple in stripes: Otsu alone would call one of them background.
  start_vips();
  const vips::VImage pink = noisy(600, 400, {230, 140, 190}, 6.0, 2);
  const vips::VImage purple = noisy(600, 400, {120, 70, 160}, 6.0, 3);
  const vips::VImage stripes = (vips::VImage::xyz(600, 400)[0] / 40).cast(VIPS_FORMAT_INT) % 2;
  const std::string path = write_slide(stripes.ifthenelse(pink, purple), "all_tissue.tiff");
  const TissueMask mask = tissue_mask(Slide(path), TissueMaskOptions{});
  EXPECT_DOUBLE_EQ(mask.tissue_fraction, 1.0) << to_string(mask);
  EXPECT_EQ(mask.bbox, (core::Region{{0, 400}, {0, 600}})) << to_string(mask);
}

TEST(TissueMask, OfTissueOnTheLeftHalfBoxesTheLeftHalf) {
  start_vips();
  const vips::VImage glass = noisy(600, 400, {235, 235, 238}, 3.0, 4);
  const vips::VImage pink = noisy(600, 400, {230, 140, 190}, 6.0, 5);
  const vips::VImage left = vips::VImage::xyz(600, 400)[0] < 300;
  const std::string path = write_slide(left.ifthenelse(pink, glass), "left_tissue.tiff");
  TissueMaskOptions options;
  options.max_side_px = 150;  // downsample 4: mask pixels map to 4×4 level-0 pixels
  const TissueMask mask = tissue_mask(Slide(path), options);
  EXPECT_EQ(mask.width, 150);
  EXPECT_EQ(mask.height, 100);
  EXPECT_DOUBLE_EQ(mask.downsample, 4.0);
  EXPECT_NEAR(mask.tissue_fraction, 0.5, 0.01) << to_string(mask);
  EXPECT_EQ(mask.bbox.y, (core::Window{0, 400})) << to_string(mask);
  EXPECT_EQ(mask.bbox.x.begin, 0) << to_string(mask);
  EXPECT_NEAR(static_cast<double>(mask.bbox.x.end), 300.0, 8.0) << to_string(mask);
}

TEST(TissueMask, TakesItsResolutionFromAGivenDownsample) {
  const std::string path = write_slide(noisy(600, 400, {230, 140, 190}, 6.0, 8), "ds.tiff");
  TissueMaskOptions options;
  options.downsample = 4.0;
  const TissueMask mask = tissue_mask(Slide(path), options);
  EXPECT_EQ(mask.width, 150);
  EXPECT_EQ(mask.height, 100);
  options.downsample = 0.5;
  EXPECT_THROW(tissue_mask(Slide(path), options), Error);
}

TEST(TissueMask, DropsSpecksSmallerThanTheMinimumArea) {
  start_vips();
  // Glass with one 12×12 px speck of stain and one 100×100 px piece of tissue.
  const vips::VImage glass = noisy(600, 400, {235, 235, 238}, 3.0, 6);
  const vips::VImage pink = noisy(600, 400, {230, 140, 190}, 6.0, 7);
  const vips::VImage x = vips::VImage::xyz(600, 400)[0], y = vips::VImage::xyz(600, 400)[1];
  const vips::VImage speck = (x >= 50) & (x < 62) & (y >= 50) & (y < 62);
  const vips::VImage piece = (x >= 400) & (x < 500) & (y >= 200) & (y < 300);
  const std::string path = write_slide((speck | piece).ifthenelse(pink, glass), "speck.tiff");
  TissueMaskOptions options;
  options.min_area_level0_px = 1000;  // generic TIFF: no mpp, so the level-0 pixel area applies
  const TissueMask mask = tissue_mask(Slide(path), options);
  EXPECT_EQ(mask.bbox, (core::Region{{200, 300}, {400, 500}})) << to_string(mask);
  options.min_area_level0_px = 100;
  const TissueMask kept = tissue_mask(Slide(path), options);
  EXPECT_EQ(kept.bbox, (core::Region{{50, 300}, {50, 500}})) << to_string(kept);
}

TEST(TissueMask, ClosingFillsAOnePixelGapInsideTissue) {
  RgbImage image{40, 40, std::vector<uint8_t>(40 * 40 * 3, 240)};
  for (int64_t y = 10; y < 30; ++y) {
    for (int64_t x = 10; x < 30; ++x) {
      if (x == 20) continue;  // a one-pixel crack of glass through the tissue
      uint8_t* p = &image.pixels[3 * (y * 40 + x)];
      p[0] = 220, p[1] = 120, p[2] = 180;
    }
  }
  TissueMaskOptions options;
  options.min_area_level0_px = 0;
  const TissueMask mask = tissue_mask(image, 40, 40, std::nullopt, options);
  EXPECT_TRUE(mask.at(20, 20));
  EXPECT_FALSE(mask.at(5, 5));
  EXPECT_EQ(mask.bbox, (core::Region{{10, 30}, {10, 30}})) << to_string(mask);
}

// cmu-1-small-region.svs: a strip of H&E skin running from the top to the bottom edge, right of
// centre, with glass left and right of it and a thin detached strand reaching left. Looked at
// (thumbnail and overlay from `tessel thumbnail --mask`): tissue covers about a third of the field;
// this mask measured 33.4% (35.1% at 512 px). The range allows for tuning, not for a wrong mask.
TEST(TissueMask, OfARealHAndESlideFindsTissueAndGlass) {
  const Slide slide(shared_slide("cmu-1-small-region.svs"));  // 2220 × 2967, 0.499 µm/px
  const TissueMask mask = tissue_mask(slide, TissueMaskOptions{});
  EXPECT_EQ(mask.width, 1532);
  EXPECT_EQ(mask.height, 2048);
  EXPECT_GT(mask.tissue_fraction, 0.25) << to_string(mask);
  EXPECT_LT(mask.tissue_fraction, 0.45) << to_string(mask);
  EXPECT_LT(mask.bbox.y.begin, 300) << to_string(mask);  // tissue starts near the top
  EXPECT_EQ(mask.bbox.y.end, 2967) << to_string(mask);   // and runs off the bottom edge
  EXPECT_GT(mask.bbox.x.end, 1800) << to_string(mask);
  EXPECT_LT(mask.bbox.x.end, 2150) << to_string(mask);  // glass on the right
  mask.save_png(scratch("cmu1.mask.png"));
}

// The TCGA slide: one large piece of tissue filling most of the field, on a tiled grey background
// (no mpp, so the minimum area is in level-0 pixels). Looked at: about 60% tissue; measured 61.4%.
TEST(TissueMask, OfASlideWithoutMppFillsMostOfTheField) {
  const Slide slide(shared_slide("tcga-cr-7395-01a-01-ts1.svs"));
  TissueMaskOptions options;
  options.max_side_px = 1024;
  const TissueMask mask = tissue_mask(slide, options);
  EXPECT_GT(mask.tissue_fraction, 0.5) << to_string(mask);
  EXPECT_LT(mask.tissue_fraction, 0.75) << to_string(mask);
}

TEST(TissueMask, PngIsWrittenAndReadsBackAsTheMask) {
  const RgbImage image{4, 2, {240, 240, 240, 220, 120, 180, 220, 120, 180, 240, 240, 240,
                              240, 240, 240, 220, 120, 180, 220, 120, 180, 240, 240, 240}};
  TissueMaskOptions options;
  options.threshold = 30;
  options.close_radius_px = options.open_radius_px = 0;
  options.min_area_level0_px = 0;
  const TissueMask mask = tissue_mask(image, 4, 2, std::nullopt, options);
  const auto path = scratch("small.mask.png");
  mask.save_png(path);
  const vips::VImage read = vips::VImage::new_from_file(path.c_str());
  ASSERT_EQ(read.width(), 4);
  ASSERT_EQ(read.height(), 2);
  ASSERT_EQ(read.bands(), 1);
  size_t bytes = 0;
  void* data = read.write_to_memory(&bytes);
  const std::vector<uint8_t> pixels(static_cast<uint8_t*>(data),
                                    static_cast<uint8_t*>(data) + bytes);
  g_free(data);
  EXPECT_EQ(pixels, (std::vector<uint8_t>{0, 255, 255, 0, 0, 255, 255, 0}));
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp-" + std::to_string(getpid())));
}

TEST(TissueMask, PngToAMissingFolderNamesTheFile) {
  const TissueMask mask = tissue_mask(RgbImage{2, 2, std::vector<uint8_t>(12, 250)}, 2, 2,
                                      std::nullopt, TissueMaskOptions{});
  try {
    mask.save_png("/no/such/folder/m.png");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/no/such/folder/m.png"), std::string::npos) << e.what();
  }
}

TEST(TissueMask, FillsBackgroundOutsideTheMaskInARegionOfAnotherLevel) {
  // A 10×10 mask of a 100×100 slide: tissue in mask columns 0–4, i.e. level-0 x < 50.
  RgbImage thumb{10, 10, std::vector<uint8_t>(300, 240)};
  for (int64_t y = 0; y < 10; ++y) {
    for (int64_t x = 0; x < 5; ++x) {
      uint8_t* p = &thumb.pixels[3 * (y * 10 + x)];
      p[0] = 220, p[1] = 120, p[2] = 180;
    }
  }
  TissueMaskOptions options;
  options.threshold = 30;
  options.close_radius_px = options.open_radius_px = 0;
  options.min_area_level0_px = 0;
  const TissueMask mask = tissue_mask(thumb, 100, 100, std::nullopt, options);
  // Level downsample 2: level pixels 20–29 of row 3 cover level-0 x 40–59.
  RgbImage region{10, 1, std::vector<uint8_t>(30, 7)};
  fill_background(mask, 2.0, 20, 3, region, Rgb{1, 2, 3});
  for (int64_t i = 0; i < 10; ++i) {
    const uint8_t* p = &region.pixels[3 * i];
    if (i < 5) {
      EXPECT_EQ(p[0], 7) << "level x " << 20 + i << " is tissue";
    } else {
      EXPECT_EQ((Rgb{p[0], p[1], p[2]}), (Rgb{1, 2, 3})) << "level x " << 20 + i << " is glass";
    }
  }
}

TEST(Thumbnail, ReadsTheSmallestLevelAtLeastTheSizeAndKeepsTheAspect) {
  const Slide slide(shared_slide("tcga-cr-7395-01a-01-ts1.svs"));  // 4443 × 3567, 2221 × 1783
  EXPECT_EQ(thumbnail_level(slide, 2000), 1);
  EXPECT_EQ(thumbnail_level(slide, 3000), 0);
  const RgbImage image = thumbnail(slide, 1024);
  EXPECT_EQ(image.width, 1024);
  EXPECT_EQ(image.height, std::llround(1783.0 * 1024.0 / 2221.0));
  const RgbImage small = thumbnail(Slide(shared_slide("small.svs")), 1024);
  EXPECT_EQ(small.width, 16);  // never enlarged
}

// cmu-1 at 512 px: a block mean by 5 read in two strips (4 Mpx each), then libvips; against a
// block mean of the whole level read at once, in double, then the same resize. (Against a plain
// Lanczos resize of the whole level the mean difference is 3.7 grey levels: a box filter is
// softer, which a tissue mask does not mind.)
TEST(Thumbnail, ReadInStripsMatchesABlockMeanOfTheWholeLevel) {
  const Slide slide(shared_slide("cmu-1-small-region.svs"));
  const RgbImage strips = thumbnail(slide, 512);
  const RgbImage level = slide.read_region(0, 0, 0, 2220, 2967);
  constexpr int64_t kFactor = 5;
  RgbImage block{444, 594, std::vector<uint8_t>(444 * 594 * 3)};  // the last row of blocks: 2 rows
  for (int64_t by = 0; by < block.height; ++by) {
    for (int64_t bx = 0; bx < block.width; ++bx) {
      for (int64_t c = 0; c < 3; ++c) {
        double sum = 0.0, count = 0.0;
        for (int64_t y = by * kFactor; y < std::min<int64_t>((by + 1) * kFactor, 2967); ++y) {
          for (int64_t x = bx * kFactor; x < (bx + 1) * kFactor; ++x) {
            sum += level.pixels[3 * (y * 2220 + x) + c];
            count += 1.0;
          }
        }
        block.pixels[3 * (by * block.width + bx) + c] =
            static_cast<uint8_t>(std::lround(sum / count));
      }
    }
  }
  const RgbImage whole = resized(block, 383, 512);
  ASSERT_EQ(strips.width, whole.width);
  ASSERT_EQ(strips.height, whole.height);
  double total = 0.0;
  for (size_t i = 0; i < whole.pixels.size(); ++i) {
    total += std::abs(static_cast<double>(strips.pixels[i]) - static_cast<double>(whole.pixels[i]));
  }
  const double mean_abs = total / static_cast<double>(whole.pixels.size());
  EXPECT_LT(mean_abs, 0.01) << "mean |strips − whole| in grey levels";
}

}  // namespace
}  // namespace tessel::io

namespace tessel::io {
namespace {

// A damaged slide made libvips print a warning per tile (~80 raw "VIPS-WARNING **" lines): each
// kind of warning now reaches the log once, as one line.
TEST(Vips, RepeatedWarningsReachTheLogOnceAsOneLine) {
  start_vips();
  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  for (int tile = 0; tile < 80; ++tile) {
    g_log("VIPS", G_LOG_LEVEL_WARNING, "read error on tile %d of page %d", tile, 2);
  }
  g_log("VIPS", G_LOG_LEVEL_WARNING, "another kind of trouble");
  spdlog::set_default_logger(previous);
  const std::string log = captured.str();
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 2) << log;
  EXPECT_NE(log.find("VIPS: read error on tile 0 of page 2"), std::string::npos) << log;
  EXPECT_NE(log.find("another kind of trouble"), std::string::npos) << log;
}

// Marker ink and tissue-marking dye are not tissue; H&E's colours, the darkest and bluest
// haematoxylin included, are.
TEST(TissueInk, PensAndDyesHaveInksHueAndHAndENever) {
  EXPECT_TRUE(is_ink(30, 80, 160, 20));     // blue pen
  EXPECT_TRUE(is_ink(30, 130, 90, 20));     // green pen
  EXPECT_TRUE(is_ink(40, 140, 150, 20));    // tissue-marking dye, teal
  EXPECT_FALSE(is_ink(236, 164, 198, 20));  // eosin
  EXPECT_FALSE(is_ink(206, 152, 204, 20));  // cellular purple
  EXPECT_FALSE(is_ink(92, 58, 148, 20));    // haematoxylin
  EXPECT_FALSE(is_ink(58, 28, 104, 20));    // dark nuclei
  EXPECT_FALSE(is_ink(80, 70, 150, 20));    // bluish haematoxylin, 247°
  EXPECT_FALSE(is_ink(226, 232, 240, 20));  // bluish glass: too grey
  EXPECT_FALSE(is_ink(30, 80, 160, 200));   // less saturated than asked
}

// A thumbnail of glass with tissue in its left half, a blue stroke across both, and a one-pixel
// speck of ink's hue inside the tissue (a bluish nucleus): the stroke is taken out of the tissue
// and off the glass, the speck is not; with remove_ink off the stroke is tissue again.
TEST(TissueInk, AStrokeIsTakenOutOfTheMaskAndASpeckIsNot) {
  RgbImage thumbnail{200, 100, std::vector<uint8_t>(200 * 100 * 3)};
  const auto paint = [&](int64_t x, int64_t y, std::array<uint8_t, 3> rgb) {
    std::copy(rgb.begin(), rgb.end(), thumbnail.pixels.begin() + 3 * (y * 200 + x));
  };
  for (int64_t y = 0; y < 100; ++y) {
    for (int64_t x = 0; x < 200; ++x) {
      paint(x, y,
            x >= 20 && x < 120 ? std::array<uint8_t, 3>{236, 164, 198}
                               : std::array<uint8_t, 3>{242, 240, 244});
      if (y >= 45 && y < 56) paint(x, y, {30, 80, 160});
    }
  }
  paint(70, 20, {30, 80, 160});
  TissueMaskOptions options;
  options.threshold = 20;
  const TissueMask mask = tissue_mask(thumbnail, 1600, 800, 0.5, options);
  EXPECT_TRUE(mask.at(70, 30));
  EXPECT_TRUE(mask.at(70, 20)) << "a speck of ink's hue is kept";
  EXPECT_FALSE(mask.at(70, 50)) << "the stroke over tissue";
  EXPECT_FALSE(mask.at(70, 44)) << "the stroke's rim";
  EXPECT_FALSE(mask.at(160, 50)) << "the stroke over glass";
  EXPECT_NEAR(mask.ink_fraction, 200.0 * 15 / 20000, 0.02);  // 11 rows, grown by 2
  EXPECT_NE(to_string(mask).find("pen ink"), std::string::npos) << to_string(mask);

  options.remove_ink = false;
  const TissueMask kept = tissue_mask(thumbnail, 1600, 800, 0.5, options);
  EXPECT_TRUE(kept.at(70, 50));
  EXPECT_TRUE(kept.at(160, 50));
  EXPECT_EQ(kept.ink_fraction, 0.0);
}

}  // namespace
}  // namespace tessel::io
