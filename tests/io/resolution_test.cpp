// choose_resolution over made-up pyramids (every branch) and the real slides of ../shared/slides;
// the CLI strings' parser.
#include "io/resolution.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "tests/io/shared_slides.h"

namespace {

using tessel::Error;
using tessel::io::choose_resolution;
using tessel::io::Level;
using tessel::io::Pyramid;
using tessel::io::Resolution;
using tessel::io::ResolutionChoice;
using tessel::test::shared_slide;

// A 40× scan at 0.25 mpp with levels 1, 4 and 16 (and a TCGA-like inexact 4.0016).
Pyramid scanner_pyramid() {
  return {"scan.svs", {{40000, 30000, 1.0}, {10000, 7500, 4.0016}, {2500, 1875, 16.0}}, 0.25, 40.0};
}

// The message of the tessel::Error `f` throws ("" if it does not throw).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ChooseResolution, ReadsLevelZeroAsItIsAtItsOwnMpp) {
  const ResolutionChoice c = choose_resolution(scanner_pyramid(), Resolution::at_mpp(0.25));
  EXPECT_EQ(c, (ResolutionChoice{0, 1.0, 0.25, 40000, 30000}));
}

TEST(ChooseResolution, ReadsAnInexactLevelAsItIsWithinTheTolerance) {
  const ResolutionChoice c = choose_resolution(scanner_pyramid(), Resolution::at_mpp(1.0));
  EXPECT_EQ(c.level, 1);
  EXPECT_EQ(c.scale, 1.0);
  EXPECT_DOUBLE_EQ(*c.mpp, 0.25 * 4.0016);  // the level's true mpp, not the asked one
  EXPECT_EQ(c.width, 10000);
  EXPECT_EQ(c.height, 7500);
}

TEST(ChooseResolution, CountsOnePointNinePercentAsAMatchButNotTwoPointOne) {
  const Pyramid p = {"p.tiff", {{1000, 1000, 1.0}}, 1.0, std::nullopt};
  EXPECT_EQ(choose_resolution(p, Resolution::at_mpp(1.019)).scale, 1.0);
  EXPECT_EQ(choose_resolution(p, Resolution::at_mpp(0.981)).scale, 1.0);
  EXPECT_NEAR(choose_resolution(p, Resolution::at_mpp(1.021)).scale, 1.021, 1e-12);
  EXPECT_THROW(choose_resolution(p, Resolution::at_mpp(0.979)), Error);
}

TEST(ChooseResolution, ShrinksTheNextFinerLevelBetweenLevels) {
  // 2 mpp: level 1 (≈1.0004 mpp) is the coarsest finer level; level 2 (4 mpp) is too coarse.
  const ResolutionChoice c = choose_resolution(scanner_pyramid(), Resolution::at_mpp(2.0));
  EXPECT_EQ(c.level, 1);
  EXPECT_DOUBLE_EQ(c.scale, 2.0 / (0.25 * 4.0016));
  EXPECT_DOUBLE_EQ(*c.mpp, 2.0);
  EXPECT_EQ(c.width, 5002);  // floor(10000 / 1.9992)
  EXPECT_EQ(c.height, 3751);
}

TEST(ChooseResolution, ShrinksTheCoarsestLevelBeyondIt) {
  const ResolutionChoice c = choose_resolution(scanner_pyramid(), Resolution::at_mpp(10.0));
  EXPECT_EQ(c.level, 2);
  EXPECT_DOUBLE_EQ(c.scale, 2.5);
  EXPECT_EQ(c.width, 1000);
  EXPECT_EQ(c.height, 750);
}

TEST(ChooseResolution, RoundsTheOutputSizeDownSoEveryPixelLiesInsideTheLevel) {
  const Pyramid p = {"p.tiff", {{1001, 999, 1.0}}, 1.0, std::nullopt};
  const ResolutionChoice c = choose_resolution(p, Resolution::at_mpp(2.0));
  EXPECT_EQ(c.width, 500);
  EXPECT_EQ(c.height, 499);
  // And an exact division stays exact despite the rounding of the scale.
  const Pyramid q = {"q.tiff", {{1000, 1000, 1.0}}, 0.1, std::nullopt};
  EXPECT_EQ(choose_resolution(q, Resolution::at_mpp(0.3)).width, 333);
  EXPECT_EQ(choose_resolution(q, Resolution::at_mpp(0.5)).width, 200);
}

TEST(ChooseResolution, RefusesToUpsampleBeyondLevelZero) {
  const std::string message =
      error_of([] { choose_resolution(scanner_pyramid(), Resolution::at_mpp(0.2)); });
  EXPECT_TRUE(contains(message, "scan.svs")) << message;
  EXPECT_TRUE(contains(message, "finer than level 0")) << message;
  EXPECT_TRUE(contains(message, "does not upsample")) << message;
  EXPECT_THROW(choose_resolution(scanner_pyramid(), Resolution::at_magnification(60)), Error);
}

TEST(ChooseResolution, RefusesMppWithoutMppInTheFileNamingTheFileAndTheWayOut) {
  const Pyramid p = {"/slides/nompp.svs", {{100, 100, 1.0}}, std::nullopt, 20.0};
  for (const Resolution& r : {Resolution::at_mpp(1.0), Resolution::at_magnification(10)}) {
    const std::string message = error_of([&] { choose_resolution(p, r); });
    EXPECT_TRUE(contains(message, "/slides/nompp.svs")) << message;
    EXPECT_TRUE(contains(message, "no microns per pixel")) << message;
    EXPECT_TRUE(contains(message, "--base-mpp")) << message;
  }
}

TEST(ChooseResolution, BaseMppMakesMppWorkWithoutMppInTheFileAndOverridesTheFile) {
  const Pyramid p = {"p.tiff", {{800, 600, 1.0}, {400, 300, 2.0}}, std::nullopt, std::nullopt};
  EXPECT_EQ(choose_resolution(p, Resolution::at_mpp(1.0).with_base_mpp(0.5)),
            (ResolutionChoice{1, 1.0, 1.0, 400, 300}));
  const ResolutionChoice c =
      choose_resolution(scanner_pyramid(), Resolution::at_mpp(1.0).with_base_mpp(0.5));
  EXPECT_EQ(c.level, 0);
  EXPECT_DOUBLE_EQ(c.scale, 2.0);
  EXPECT_THROW(choose_resolution(p, Resolution::at_mpp(1.0).with_base_mpp(0)), Error);
  EXPECT_THROW(choose_resolution(p, Resolution::at_mpp(1.0).with_base_mpp(-1)), Error);
}

TEST(ChooseResolution, TurnsMagnificationIntoMppThroughTheObjectivePower) {
  // 40× at 0.25 mpp: 10× is 1 mpp (level 1), 20× is 0.5 mpp (level 0 shrunk by 2), 40× level 0.
  EXPECT_EQ(choose_resolution(scanner_pyramid(), Resolution::at_magnification(10)).level, 1);
  const ResolutionChoice c = choose_resolution(scanner_pyramid(), Resolution::at_magnification(20));
  EXPECT_EQ(c.level, 0);
  EXPECT_DOUBLE_EQ(c.scale, 2.0);
  EXPECT_DOUBLE_EQ(*c.mpp, 0.5);
  EXPECT_EQ(choose_resolution(scanner_pyramid(), Resolution::at_magnification(40)),
            (ResolutionChoice{0, 1.0, 0.25, 40000, 30000}));
}

TEST(ChooseResolution, RefusesMagnificationWithoutObjectivePowerEvenWithBaseMpp) {
  const Pyramid p = {"/slides/noobjective.tiff", {{100, 100, 1.0}}, 0.5, std::nullopt};
  const std::string message =
      error_of([&] { choose_resolution(p, Resolution::at_magnification(10).with_base_mpp(0.5)); });
  EXPECT_TRUE(contains(message, "/slides/noobjective.tiff")) << message;
  EXPECT_TRUE(contains(message, "no objective power")) << message;
}

TEST(ChooseResolution, ReadsALevelAsItIsWithOrWithoutMpp) {
  EXPECT_EQ(choose_resolution(scanner_pyramid(), Resolution::at_level(2)),
            (ResolutionChoice{2, 1.0, 4.0, 2500, 1875}));
  const Pyramid p = {"p.tiff", {{800, 600, 1.0}, {400, 300, 2.0}}, std::nullopt, std::nullopt};
  EXPECT_EQ(choose_resolution(p, Resolution::at_level(1)),
            (ResolutionChoice{1, 1.0, std::nullopt, 400, 300}));
}

TEST(ChooseResolution, RefusesALevelOutOfRangeSayingWhichLevelsThereAre) {
  for (int level : {-1, 3}) {
    const std::string message =
        error_of([&] { choose_resolution(scanner_pyramid(), Resolution::at_level(level)); });
    EXPECT_TRUE(contains(message, "scan.svs: no level " + std::to_string(level))) << message;
    EXPECT_TRUE(contains(message, "levels 0 to 2")) << message;
  }
}

TEST(ChooseResolution, RefusesANonPositiveMppOrMagnification) {
  EXPECT_THROW(choose_resolution(scanner_pyramid(), Resolution::at_mpp(0)), Error);
  EXPECT_THROW(choose_resolution(scanner_pyramid(), Resolution::at_magnification(-10)), Error);
}

TEST(ChooseResolution, OnCmu1ShrinksLevelZeroAtTwentyXToTenX) {
  const tessel::io::Slide slide(shared_slide("cmu-1-small-region.svs"));
  const ResolutionChoice c =
      choose_resolution(tessel::io::pyramid_of(slide), Resolution::at_magnification(10));
  EXPECT_EQ(c.level, 0);
  EXPECT_DOUBLE_EQ(c.scale, 2.0);
  EXPECT_DOUBLE_EQ(*c.mpp, 0.998);
  EXPECT_EQ(c.width, 1110);
  EXPECT_EQ(c.height, 1483);
  const ResolutionChoice one =
      choose_resolution(tessel::io::pyramid_of(slide), Resolution::at_mpp(1.0));
  EXPECT_EQ(one.level, 0);  // no level near 1 mpp: level 0 shrunk by 1 / 0.499
  EXPECT_NEAR(one.scale, 1.0 / 0.499, 1e-12);
}

TEST(ChooseResolution, OnTcgaWithoutMppNeedsBaseMppAndThenReadsLevelOneAsItIs) {
  const std::string path = shared_slide("tcga-cr-7395-01a-01-ts1.svs");
  const tessel::io::Slide slide(path);
  const Pyramid p = tessel::io::pyramid_of(slide);
  const std::string message = error_of([&] { choose_resolution(p, Resolution::at_mpp(0.5)); });
  EXPECT_TRUE(contains(message, path)) << message;
  EXPECT_EQ(choose_resolution(p, Resolution::at_level(1)).width, 2221);
  // Level 1's downsample is 2.0005: --mpp 0.5 with level 0 at 0.25 is level 1 as it is.
  const ResolutionChoice c = choose_resolution(p, Resolution::at_mpp(0.5).with_base_mpp(0.25));
  EXPECT_EQ(c.level, 1);
  EXPECT_EQ(c.scale, 1.0);
  EXPECT_EQ(c.width, 2221);
  EXPECT_EQ(c.height, 1783);
}

TEST(ChooseResolution, OnBoxesPicksAmongFourLevelsWithBaseMpp) {
  const tessel::io::Slide slide(shared_slide("boxes.tiff"));
  const Pyramid p = tessel::io::pyramid_of(slide);
  EXPECT_EQ(choose_resolution(p, Resolution::at_mpp(2).with_base_mpp(1)).level, 1);
  const ResolutionChoice c = choose_resolution(p, Resolution::at_mpp(3).with_base_mpp(1));
  EXPECT_EQ(c.level, 1);
  EXPECT_DOUBLE_EQ(c.scale, 1.5);
  EXPECT_EQ(c.width, 100);
  EXPECT_EQ(c.height, 83);
  EXPECT_THROW(choose_resolution(p, Resolution::at_level(4)), Error);
}

TEST(ParseResolution, ReadsMppWithOrWithoutItsUnit) {
  EXPECT_EQ(tessel::io::parse_mpp("1.0"), 1.0);
  EXPECT_EQ(tessel::io::parse_mpp("0.5mpp"), 0.5);
  EXPECT_EQ(tessel::io::parse_mpp("2"), 2.0);
  for (const char* bad : {"", "mpp", "abc", "0", "-1", "1.0x", "1.0 mpp", "nan", "inf"}) {
    EXPECT_THROW(tessel::io::parse_mpp(bad), Error) << bad;
  }
  EXPECT_TRUE(contains(error_of([] { tessel::io::parse_mpp("abc"); }), "--mpp abc")) << "";
}

TEST(ParseResolution, ReadsMagnificationWithLowerOrUpperCaseX) {
  EXPECT_EQ(tessel::io::parse_magnification("10x"), 10.0);
  EXPECT_EQ(tessel::io::parse_magnification("20X"), 20.0);
  EXPECT_EQ(tessel::io::parse_magnification("2.5x"), 2.5);
  EXPECT_EQ(tessel::io::parse_magnification("40"), 40.0);
  for (const char* bad : {"", "x", "10xx", "ten", "0x", "-10x"}) {
    EXPECT_THROW(tessel::io::parse_magnification(bad), Error) << bad;
  }
}

TEST(ParseResolution, PrintsAResolutionAsItsCommandLine) {
  EXPECT_EQ(tessel::io::to_string(Resolution::at_mpp(1.0)), "--mpp 1");
  EXPECT_EQ(tessel::io::to_string(Resolution::at_magnification(10).with_base_mpp(0.25)),
            "--magnification 10x --base-mpp 0.25");
  EXPECT_EQ(tessel::io::to_string(Resolution::at_level(2)), "--level 2");
}

}  // namespace
