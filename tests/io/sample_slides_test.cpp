// The synthetic demo dataset: 4 small slides made once at test time, then opened with OpenSlide
// (through io::Slide) and read back as a user of the dataset would.
#include "io/sample_slides.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/slide.h"
#include "io/tissue.h"

namespace {

namespace fs = std::filesystem;
using tessel::Error;
using tessel::io::Lesion;
using tessel::io::RgbImage;
using tessel::io::SampleDataOptions;
using tessel::io::SampleSlide;
using tessel::io::Slide;

constexpr uint64_t kSeed = 7;
constexpr int64_t kSize = 1024;

fs::path temporary_folder(const std::string& name) {
  const fs::path folder =
      fs::temp_directory_path() / ("tessel_sample_" + std::to_string(getpid()) + "_" + name);
  fs::remove_all(folder);
  return folder;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::vector<std::string>> read_csv(const fs::path& path) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream text(read_text(path));
  for (std::string line; std::getline(text, line);) {
    std::vector<std::string> cells;
    std::istringstream cells_text(line);
    for (std::string cell; std::getline(cells_text, cell, ',');) cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}

struct MeanColour {
  std::array<double, 3> rgb{};
  int64_t count = 0;
  double brightness() const { return (rgb[0] + rgb[1] + rgb[2]) / 3; }
};

// Mean colour of the pixels of `image` (placed at x0, y0 in level 0) that `keep(x, y, r, g, b)`.
template <typename Keep>
MeanColour mean_colour(const RgbImage& image, int64_t x0, int64_t y0, Keep keep) {
  MeanColour mean;
  for (int64_t y = 0; y < image.height; ++y) {
    for (int64_t x = 0; x < image.width; ++x) {
      const uint8_t* p = &image.pixels[static_cast<size_t>(3 * (y * image.width + x))];
      if (!keep(x0 + x, y0 + y, p[0], p[1], p[2])) continue;
      for (int c = 0; c < 3; ++c) mean.rgb[c] += p[c];
      ++mean.count;
    }
  }
  for (double& c : mean.rgb) c /= static_cast<double>(std::max<int64_t>(1, mean.count));
  return mean;
}

bool is_glass(uint8_t r, uint8_t g, uint8_t b) { return std::min({r, g, b}) >= 225; }

class SampleSlides : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    folder_ = temporary_folder("suite");
    SampleDataOptions options;
    options.slides = 4;
    options.size = kSize;
    options.seed = kSeed;
    options.workers = 2;
    const auto start = std::chrono::steady_clock::now();
    slides_ = tessel::io::write_sample_data(folder_, options);
    // Logged, never asserted: a time is bench/'s to measure, not a unit test's to pass or fail.
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "4 slides of " << kSize << "² px, seed " << kSeed << ", in " << seconds << " s\n";
  }
  static void TearDownTestSuite() { fs::remove_all(folder_); }

  static fs::path folder_;
  static std::vector<SampleSlide> slides_;
};

fs::path SampleSlides::folder_;
std::vector<SampleSlide> SampleSlides::slides_;

TEST_F(SampleSlides, OpenInOpenSlideAsAperioPyramidsWithTheirMpp) {
  ASSERT_EQ(slides_.size(), 4u);
  for (const SampleSlide& sample : slides_) {
    const Slide slide(folder_ / sample.file);
    EXPECT_EQ(slide.vendor(), "aperio") << sample.file;
    EXPECT_GT(slide.level_count(), 1) << sample.file;
    EXPECT_EQ(slide.level(0).width, kSize);
    EXPECT_EQ(slide.level(0).height, kSize);
    ASSERT_TRUE(slide.mpp_x() && slide.mpp_y()) << sample.file;
    EXPECT_DOUBLE_EQ(*slide.mpp_x(), 0.5);
    EXPECT_DOUBLE_EQ(*slide.mpp_y(), 0.5);
    EXPECT_DOUBLE_EQ(slide.objective_power().value_or(0), 20.0);
  }
}

TEST_F(SampleSlides, ManifestListsEverySlideWithLabelSplitAndPatient) {
  const auto rows = read_csv(folder_ / "manifest.csv");
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"slide", "label", "split", "patient"}));
  std::map<std::string, int> labels;
  for (size_t i = 1; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), 4u);
    EXPECT_TRUE(fs::path(rows[i][0]).is_relative()) << rows[i][0];
    EXPECT_TRUE(fs::is_regular_file(folder_ / rows[i][0])) << rows[i][0];
    EXPECT_EQ(rows[i][0], slides_[i - 1].file);
    EXPECT_TRUE(rows[i][2] == "train" || rows[i][2] == "val" || rows[i][2] == "test");
    EXPECT_FALSE(rows[i][3].empty());
    ++labels[rows[i][1]];
  }
  EXPECT_EQ(labels, (std::map<std::string, int>{{"normal", 2}, {"tumour", 2}}));
}

TEST_F(SampleSlides, LeaveNoTemporaryFilesBehind) {
  for (const auto& entry : fs::directory_iterator(folder_)) {
    EXPECT_EQ(entry.path().string().find(".part"), std::string::npos) << entry.path();
  }
}

TEST_F(SampleSlides, TumourSlidesAloneCarryLesionsListedInLesionsJson) {
  const std::string json = read_text(folder_ / "lesions.json");
  for (const SampleSlide& slide : slides_) {
    if (slide.label == "tumour") {
      EXPECT_GE(slide.lesions.size(), 1u) << slide.file;
      EXPECT_LE(slide.lesions.size(), 4u) << slide.file;
    } else {
      EXPECT_TRUE(slide.lesions.empty()) << slide.file;
      EXPECT_NE(json.find("\"" + slide.file + "\": []"), std::string::npos) << json;
    }
    for (const Lesion& lesion : slide.lesions) {
      std::ostringstream entry;
      entry << "{\"x\": " << lesion.x << ", \"y\": " << lesion.y
            << ", \"radius\": " << lesion.radius << "}";
      EXPECT_NE(json.find(entry.str()), std::string::npos) << lesion << " in " << json;
      EXPECT_GE(lesion.x - lesion.radius, 0);
      EXPECT_LE(lesion.x + lesion.radius, kSize);
    }
  }
}

TEST_F(SampleSlides, LesionsAreDarkerAndMorePurpleThanTissueElsewhere) {
  MeanColour tissue;  // all tissue of the normal slides
  for (const SampleSlide& sample : slides_) {
    if (sample.label != "normal") continue;
    const Slide slide(folder_ / sample.file);
    const MeanColour mean = mean_colour(
        slide.read_region(0, 0, 0, kSize, kSize), 0, 0,
        [](int64_t, int64_t, uint8_t r, uint8_t g, uint8_t b) { return !is_glass(r, g, b); });
    for (int c = 0; c < 3; ++c) tissue.rgb[c] += mean.rgb[c] / 2;
  }
  for (const SampleSlide& sample : slides_) {
    const Slide slide(folder_ / sample.file);
    for (const Lesion& lesion : sample.lesions) {
      // The inner 70% of the disc: the rim blends into the tissue around it.
      const double inner = 0.7 * static_cast<double>(lesion.radius);
      const MeanColour inside =
          mean_colour(slide.read_region(0, lesion.x - lesion.radius, lesion.y - lesion.radius,
                                        2 * lesion.radius, 2 * lesion.radius),
                      lesion.x - lesion.radius, lesion.y - lesion.radius,
                      [&](int64_t x, int64_t y, uint8_t, uint8_t, uint8_t) {
                        return std::hypot(x - lesion.x, y - lesion.y) < inner;
                      });
      SCOPED_TRACE(sample.file);
      EXPECT_LT(inside.brightness(), tissue.brightness() - 40) << lesion;
      // Purple: blue over red more than in the pink tissue.
      EXPECT_GT(inside.rgb[2] / inside.rgb[0], tissue.rgb[2] / tissue.rgb[0] + 0.1) << lesion;
    }
  }
}

TEST_F(SampleSlides, ShowTissueOnNearWhiteGlassOverThirtyToSixtyPercentOfTheSlide) {
  for (const SampleSlide& sample : slides_) {
    const Slide slide(folder_ / sample.file);
    const RgbImage image = slide.read_region(0, 0, 0, kSize, kSize);
    const MeanColour glass = mean_colour(
        image, 0, 0,
        [](int64_t, int64_t, uint8_t r, uint8_t g, uint8_t b) { return is_glass(r, g, b); });
    const double tissue_fraction =
        1.0 - static_cast<double>(glass.count) / static_cast<double>(kSize * kSize);
    SCOPED_TRACE(sample.file);
    EXPECT_GT(tissue_fraction, 0.3);
    EXPECT_LT(tissue_fraction, 0.6);
    for (double c : glass.rgb) EXPECT_GT(c, 235.0);
    // A corner is glass.
    const MeanColour corner =
        mean_colour(slide.read_region(0, 0, 0, 48, 48), 0, 0,
                    [](int64_t, int64_t, uint8_t, uint8_t, uint8_t) { return true; });
    EXPECT_GT(corner.brightness(), 235.0);
  }
}

TEST_F(SampleSlides, AreTheSameBytesForTheSameSeedAndDifferForAnother) {
  SampleDataOptions options;
  options.slides = 2;  // a slide depends on the seed and its index only
  options.size = kSize;
  options.seed = kSeed;
  const fs::path again = temporary_folder("again");
  tessel::io::write_sample_data(again, options);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(read_text(again / slides_[i].file), read_text(folder_ / slides_[i].file))
        << slides_[i].file;
  }
  options.seed = kSeed + 1;
  options.slides = 1;
  tessel::io::write_sample_data(again, options);
  EXPECT_NE(read_text(again / slides_[0].file), read_text(folder_ / slides_[0].file));
  fs::remove_all(again);
}

// Brightness of `image` averaged over boxes of `box` × `box` pixels whose pixels `keep(x, y)`
// (level-0 coordinates, the image placed at x0, y0) all are, none glass or pen ink: their mean
// and variance.
struct BoxStats {
  double mean = 0, variance = 0;
  int64_t boxes = 0;
};

template <typename Keep>
BoxStats box_stats(const RgbImage& image, int64_t x0, int64_t y0, int64_t box, Keep keep) {
  std::vector<double> values;
  for (int64_t by = 0; by + box <= image.height; by += box) {
    for (int64_t bx = 0; bx + box <= image.width; bx += box) {
      double sum = 0;
      bool all = true;
      for (int64_t y = by; y < by + box && all; ++y) {
        for (int64_t x = bx; x < bx + box; ++x) {
          const uint8_t* p = &image.pixels[static_cast<size_t>(3 * (y * image.width + x))];
          if (!keep(x0 + x, y0 + y) || is_glass(p[0], p[1], p[2]) ||
              tessel::io::is_ink(p[0], p[1], p[2], 20)) {
            all = false;
            break;
          }
          sum += (p[0] + p[1] + p[2]) / 3.0;
        }
      }
      if (all) values.push_back(sum / static_cast<double>(box * box));
    }
  }
  BoxStats s;
  s.boxes = static_cast<int64_t>(values.size());
  for (double v : values) s.mean += v / static_cast<double>(std::max<int64_t>(1, s.boxes));
  for (double v : values) {
    s.variance += (v - s.mean) * (v - s.mean) / static_cast<double>(std::max<int64_t>(1, s.boxes));
  }
  return s;
}

// `slides` slides of the cells task, `size`² pixels, made two at a time.
SampleDataOptions cells_options(int slides, int64_t size) {
  SampleDataOptions options;
  options.slides = slides;
  options.size = size;
  options.seed = kSeed;
  options.workers = 2;
  options.task = tessel::io::SampleTask::kCells;
  return options;
}

// --task cells: a focus has the tissue's brightness once a pixel is 8 µm (16 level-0 pixels at
// 0.5 mpp), where the dense task's lesions are 40 darker, and differs in its nuclei: enlarged,
// vesicular, with coarse chromatin and nucleoli (their brightness spreads more than the tissue's
// nuclei's). A focus is 100–200 µm in radius on a 2 mm slide. Every slide, normal ones too,
// carries benign clusters; lesions.json lists them and says the task.
TEST(SampleSlidesCells, FociHaveTheTissuesColourAtEightMicronsAndLargerNuclei) {
  const fs::path folder = temporary_folder("cells");
  const SampleDataOptions options = cells_options(2, 4096);
  const std::vector<SampleSlide> slides = tessel::io::write_sample_data(folder, options);
  const std::string json = read_text(folder / "lesions.json");
  EXPECT_NE(json.find("\"task\": \"cells\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"generator\": 3"), std::string::npos) << json;  // as the Makefile reads it
  for (const SampleSlide& sample : slides) {
    EXPECT_GE(sample.clusters.size(), 1u) << sample.file;
    EXPECT_EQ(sample.lesions.empty(), sample.label == "normal") << sample.file;
    const Slide slide(folder / sample.file);
    for (const Lesion& lesion : sample.lesions) {
      SCOPED_TRACE(sample.file);
      EXPECT_GE(lesion.radius, 200) << lesion;  // 100 µm at 0.5 mpp
      EXPECT_LE(lesion.radius, 400) << lesion;
      // The focus's inner 70%, and a ring of tissue from 1.5 to 3 radii around it.
      const int64_t r = lesion.radius, outer = 3 * r;
      const int64_t x0 = std::max<int64_t>(0, lesion.x - outer);
      const int64_t y0 = std::max<int64_t>(0, lesion.y - outer);
      const RgbImage around =
          slide.read_region(0, x0, y0, std::min<int64_t>(2 * outer, options.size - x0),
                            std::min<int64_t>(2 * outer, options.size - y0));
      const auto distance = [&](int64_t x, int64_t y) {
        return std::hypot(static_cast<double>(x - lesion.x), static_cast<double>(y - lesion.y));
      };
      const auto in_focus = [&](int64_t x, int64_t y) { return distance(x, y) < 0.7 * r; };
      const auto in_ring = [&](int64_t x, int64_t y) {
        const double d = distance(x, y);
        return d > 1.5 * r && d < outer;
      };
      const BoxStats focus8 = box_stats(around, x0, y0, 16, in_focus);
      const BoxStats ring8 = box_stats(around, x0, y0, 16, in_ring);
      ASSERT_GT(focus8.boxes, 20) << lesion;
      ASSERT_GT(ring8.boxes, 20) << lesion;
      EXPECT_NEAR(focus8.mean, ring8.mean, 10.0) << lesion;
      // Nuclei (level-0 pixels darker than 130, not ink): the focus's have coarse chromatin.
      const auto nuclei_spread = [&](const auto& keep) {
        double sum = 0, squares = 0;
        int64_t n = 0;
        for (int64_t y = 0; y < around.height; ++y) {
          for (int64_t x = 0; x < around.width; ++x) {
            const uint8_t* p = &around.pixels[static_cast<size_t>(3 * (y * around.width + x))];
            const double b = (p[0] + p[1] + p[2]) / 3.0;
            if (b >= 130 || !keep(x0 + x, y0 + y) || tessel::io::is_ink(p[0], p[1], p[2], 20)) {
              continue;
            }
            sum += b;
            squares += b * b;
            ++n;
          }
        }
        const double mean = sum / static_cast<double>(std::max<int64_t>(1, n));
        return std::sqrt(
            std::max(0.0, squares / static_cast<double>(std::max<int64_t>(1, n)) - mean * mean));
      };
      const double focus_spread = nuclei_spread(in_focus), ring_spread = nuclei_spread(in_ring);
      EXPECT_GT(focus_spread, 1.5 * ring_spread) << lesion << ": the nuclei's brightness spreads "
                                                 << focus_spread << " against " << ring_spread;
    }
  }
  fs::remove_all(folder);
}

// --task cells: about half the slides, of either class, carry a pen ring round a benign cluster
// (blue or green marker, over tissue and glass). The tissue mask takes the ink out (io/tissue.h),
// so training with tissue_fill reads it as glass; a slide without a ring has no ink.
TEST(SampleSlidesCells, PenRingsAreInkThatTheTissueMaskTakesOut) {
  const fs::path folder = temporary_folder("pen");
  const SampleDataOptions options = cells_options(6, 2048);
  const std::vector<SampleSlide> slides = tessel::io::write_sample_data(folder, options);
  EXPECT_NE(read_text(folder / "lesions.json").find("\"pen\": {"), std::string::npos);
  std::map<std::string, int> rings;  // by label
  for (const SampleSlide& sample : slides) {
    SCOPED_TRACE(sample.file);
    const Slide slide(folder / sample.file);
    const tessel::io::TissueMask mask = tessel::io::tissue_mask(slide);
    if (sample.pen.empty()) {
      EXPECT_EQ(mask.ink_fraction, 0.0);
      continue;
    }
    rings[sample.label] += static_cast<int>(sample.pen.size());
    EXPECT_GT(mask.ink_fraction, 0.0);
    const double scale_y =
        static_cast<double>(mask.slide_height) / static_cast<double>(mask.height);
    for (const tessel::io::PenStroke& stroke : sample.pen) {
      for (double degrees = stroke.from + 5; degrees < stroke.to - 5; degrees += 10) {
        const double angle = degrees * M_PI / 180.0;
        const auto x = static_cast<int64_t>(static_cast<double>(stroke.x) +
                                            static_cast<double>(stroke.radius) * std::cos(angle));
        const auto y = static_cast<int64_t>(static_cast<double>(stroke.y) +
                                            static_cast<double>(stroke.radius) * std::sin(angle));
        const RgbImage pixel = slide.read_region(0, x, y, 1, 1);
        EXPECT_TRUE(tessel::io::is_ink(pixel.pixels[0], pixel.pixels[1], pixel.pixels[2], 20))
            << x << "," << y << ": " << int(pixel.pixels[0]) << " " << int(pixel.pixels[1]) << " "
            << int(pixel.pixels[2]);
        EXPECT_FALSE(mask.at(static_cast<int64_t>(static_cast<double>(x) / mask.downsample),
                             static_cast<int64_t>(static_cast<double>(y) / scale_y)))
            << x << "," << y;
      }
    }
  }
  EXPECT_GE(rings["tumour"], 1);
  EXPECT_GE(rings["normal"], 1);
  fs::remove_all(folder);
}

TEST(SampleSlidesPlan, Splits24SlidesSixteenFourFourWithBalancedClassesInEachSplit) {
  const std::vector<SampleSlide> slides = tessel::io::plan_sample_slides(24);
  std::map<std::string, std::map<std::string, int>> counts;  // split → label → slides
  for (const SampleSlide& slide : slides) ++counts[slide.split][slide.label];
  EXPECT_EQ(counts["train"], (std::map<std::string, int>{{"normal", 8}, {"tumour", 8}}));
  EXPECT_EQ(counts["val"], (std::map<std::string, int>{{"normal", 2}, {"tumour", 2}}));
  EXPECT_EQ(counts["test"], (std::map<std::string, int>{{"normal", 2}, {"tumour", 2}}));
  EXPECT_EQ(slides.front().file, "slide_001.tif");
  EXPECT_EQ(slides.back().file, "slide_024.tif");
}

TEST(SampleSlidesPlan, RefusesZeroSlides) {
  EXPECT_THROW(tessel::io::plan_sample_slides(0), Error);
}

TEST(SampleSlidesFolder, RefusesAFolderWithOtherFilesUnlessForced) {
  const fs::path folder = temporary_folder("foreign");
  fs::create_directories(folder);
  std::ofstream(folder / "notes.txt") << "mine";
  SampleDataOptions options;
  options.slides = 1;
  options.size = 512;
  try {
    tessel::io::write_sample_data(folder, options);
    ADD_FAILURE() << "wrote into a folder with notes.txt";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("notes.txt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--force"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(folder / "manifest.csv"));
  options.force = true;
  tessel::io::write_sample_data(folder, options);
  EXPECT_TRUE(fs::exists(folder / "slide_001.tif"));
  EXPECT_EQ(read_text(folder / "notes.txt"), "mine");
  fs::remove_all(folder);
}

TEST(SampleSlidesFolder, ReplacesItsOwnFilesAndKeepsTheReadme) {
  const fs::path folder = temporary_folder("own");
  fs::create_directories(folder);
  std::ofstream(folder / "README.md") << "readme";
  std::ofstream(folder / "slide_009.tif") << "an earlier, larger run";
  std::ofstream(folder / ".slide_001.tif.part") << "a killed run";
  std::ofstream(folder / "manifest.csv") << "old";
  SampleDataOptions options;
  options.slides = 1;
  options.size = 512;
  tessel::io::write_sample_data(folder, options);
  EXPECT_EQ(read_text(folder / "README.md"), "readme");
  EXPECT_FALSE(fs::exists(folder / "slide_009.tif"));
  EXPECT_FALSE(fs::exists(folder / ".slide_001.tif.part"));
  EXPECT_EQ(read_csv(folder / "manifest.csv").size(), 2u);
  EXPECT_EQ(Slide(folder / "slide_001.tif").vendor(), "aperio");
  fs::remove_all(folder);
}

}  // namespace
