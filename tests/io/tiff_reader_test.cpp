// The libvips read path gives the pixels OpenSlide gives, on generic TIFF and on Tessel's sample
// slides at every level, and the tile source picks it only where that holds.
#include "io/tiff_reader.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "core/error.h"
#include "io/sample_slides.h"
#include "io/slide_tile_source.h"
#include "tests/io/shared_slides.h"
#include "tests/io/temp_folder.h"

namespace {

using tessel::core::Region;
using tessel::io::PixelReader;
using tessel::io::Slide;
using tessel::io::SlideTileSource;
using tessel::io::SlideTileSourceOptions;
using tessel::test::shared_slide;

SlideTileSourceOptions reading_with(PixelReader reader, int64_t tile_size = 64) {
  SlideTileSourceOptions options;
  options.reader = reader;
  options.tile_size = tile_size;
  return options;
}

// Reads whole levels through both paths and requires identical bytes.
void expect_same_pixels_at_level(const std::shared_ptr<const Slide>& slide, int level) {
  SCOPED_TRACE(slide->path().string() + " level " + std::to_string(level));
  const std::optional<int> page = tessel::io::libvips_page_of(*slide, level, false);
  ASSERT_TRUE(page.has_value());
  const auto& info = slide->level(level);
  tessel::io::TiffLevelReader reader(slide->path(), *page, info.width, info.height);
  std::vector<uint8_t> vips(static_cast<size_t>(3 * info.width * info.height));
  reader.read_into(0, 0, info.width, info.height, vips.data());
  const auto openslide = slide->read_region(level, 0, 0, info.width, info.height);
  int max_difference = 0;
  for (size_t i = 0; i < vips.size(); ++i) {
    max_difference = std::max(max_difference, std::abs(vips[i] - openslide.pixels[i]));
  }
  EXPECT_EQ(max_difference, 0);
}

TEST(TiffReader, ReadsTheSamePixelsAsOpenSlideOnAGenericTiff) {
  const auto slide = std::make_shared<const Slide>(shared_slide("boxes.tiff"));
  // OpenSlide 3.4.1 reads levels 2 and 3 of boxes.tiff unreliably (tests/io/slide_test.cpp).
  for (int level = 0; level < 2; ++level) expect_same_pixels_at_level(slide, level);
}

TEST(TiffReader, ReadsTheSamePixelsAsOpenSlideOnASampleSlideAtEveryLevel) {
  tessel::test::TempFolder folder;
  const auto path = folder.path() / "sample.tif";
  tessel::io::SampleSlide plan = tessel::io::plan_sample_slides(1).front();
  tessel::io::write_sample_slide(path, plan, 1536, 0.5, 7);
  const auto slide = std::make_shared<const Slide>(path);
  ASSERT_EQ(slide->vendor(), "aperio");
  ASSERT_GT(slide->level_count(), 1);
  for (int level = 0; level < slide->level_count(); ++level) {
    expect_same_pixels_at_level(slide, level);
    SlideTileSource vips(slide, level, reading_with(PixelReader::kAuto, 100));
    EXPECT_EQ(vips.reader(), PixelReader::kLibvips);
    SlideTileSource openslide(slide, level, reading_with(PixelReader::kOpenSlide, 100));
    EXPECT_EQ(openslide.reader(), PixelReader::kOpenSlide);
    const unsigned seed = std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (int trial = 0; trial < 5; ++trial) {
      const int64_t h = std::uniform_int_distribution<int64_t>(1, vips.height())(rng);
      const int64_t w = std::uniform_int_distribution<int64_t>(1, vips.width())(rng);
      const int64_t y = std::uniform_int_distribution<int64_t>(0, vips.height() - h)(rng);
      const int64_t x = std::uniform_int_distribution<int64_t>(0, vips.width() - w)(rng);
      const Region r{{y, y + h}, {x, x + w}};
      EXPECT_TRUE(at::equal(vips.read(r), openslide.read(r))) << r;
    }
  }
}

TEST(TiffReader, GivesEachOfManyThreadsReadingAtOnceTheSamePixelsAsOpenSlide) {
  tessel::test::TempFolder folder;
  const auto path = folder.path() / "sample.tif";
  tessel::io::SampleSlide plan = tessel::io::plan_sample_slides(1).front();
  tessel::io::write_sample_slide(path, plan, 1024, 0.5, 11);
  const auto slide = std::make_shared<const Slide>(path);
  SlideTileSource vips(slide, 0, reading_with(PixelReader::kLibvips, 96));
  SlideTileSource openslide(slide, 0, reading_with(PixelReader::kOpenSlide, 96));
  std::vector<std::thread> readers;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      for (int i = 0; i < 8; ++i) {
        const int64_t y = (t * 131 + i * 97) % 700, x = (t * 53 + i * 151) % 700;
        const Region r{{y, y + 300}, {x, x + 300}};
        if (!at::equal(vips.read(r), openslide.read(r))) ++mismatches;
      }
    });
  }
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(vips.cache_stats().reads, 32);
}

TEST(TiffReader, ReadsTheLevelsOpenSlideGarblesTheSameWayEachTime) {
  const Slide slide(shared_slide("boxes.tiff"));
  for (int level = 2; level < slide.level_count(); ++level) {
    const auto& info = slide.level(level);
    const int page = *tessel::io::libvips_page_of(slide, level, false);
    std::vector<uint8_t> first(static_cast<size_t>(3 * info.width * info.height));
    std::vector<uint8_t> second(first.size());
    tessel::io::TiffLevelReader(slide.path(), page, info.width, info.height)
        .read_into(0, 0, info.width, info.height, first.data());
    tessel::io::TiffLevelReader(slide.path(), page, info.width, info.height)
        .read_into(0, 0, info.width, info.height, second.data());
    EXPECT_EQ(first, second) << "level " << level;
  }
}

TEST(TiffReader, KeepsRealAperioSlidesOnOpenSlide) {
  const auto slide = std::make_shared<const Slide>(shared_slide("cmu-1-small-region.svs"));
  std::string why;
  EXPECT_FALSE(tessel::io::libvips_page_of(*slide, 0, false, &why).has_value());
  EXPECT_NE(why.find("Aperio"), std::string::npos) << why;
  EXPECT_EQ(SlideTileSource(slide, 0).reader(), PixelReader::kOpenSlide);
}

TEST(TiffReader, PicksLibvipsForAGenericTiffUnlessOpenSlideIsForced) {
  const auto slide = std::make_shared<const Slide>(shared_slide("boxes.tiff"));
  EXPECT_EQ(SlideTileSource(slide, 0).reader(), PixelReader::kLibvips);
  EXPECT_EQ(SlideTileSource(slide, 0, reading_with(PixelReader::kOpenSlide)).reader(),
            PixelReader::kOpenSlide);
}

TEST(TiffReader, ParsesReaderNamesAndRejectsOthers) {
  EXPECT_EQ(tessel::io::parse_pixel_reader("libvips"), PixelReader::kLibvips);
  EXPECT_EQ(tessel::io::parse_pixel_reader("openslide"), PixelReader::kOpenSlide);
  EXPECT_EQ(tessel::io::to_string(PixelReader::kAuto), "auto");
  EXPECT_THROW(tessel::io::parse_pixel_reader("vips"), tessel::Error);
}

TEST(SlideTileSourceWaitTime, CountsEveryReadAndTheTimeSpentGettingTiles) {
  const auto slide = std::make_shared<const Slide>(shared_slide("cmu-1-small-region.svs"));
  SlideTileSource source(slide, 0, reading_with(PixelReader::kAuto, 128));
  EXPECT_EQ(source.cache_stats().reads, 0);
  EXPECT_EQ(source.cache_stats().wait_ns, 0);
  source.read(Region{{0, 512}, {0, 512}});  // cold: 16 tiles decoded while read() waits
  const auto cold = source.cache_stats();
  EXPECT_EQ(cold.reads, 1);
  EXPECT_GT(cold.wait_ns, 0);
  source.read(Region{{0, 512}, {0, 512}});  // all cached
  const auto warm = source.cache_stats();
  EXPECT_EQ(warm.reads, 2);
  EXPECT_GE(warm.wait_ns, cold.wait_ns);
  EXPECT_LT(warm.wait_ns - cold.wait_ns, cold.wait_ns);
}

}  // namespace
