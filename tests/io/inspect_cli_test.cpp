// Runs `tessel inspect` as a user would, on real slides and on files it must refuse.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include "tests/run_cli.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>

#include "tests/io/shared_slides.h"

namespace {

using tessel::testing::CliRun;
using tessel::testing::run_cli;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

int64_t lines(const std::string& text) { return std::count(text.begin(), text.end(), '\n'); }

TEST(InspectCommand, PrintsVendorLevelsMppAndPropertiesOfAnAperioSlide) {
  const CliRun run = run_cli("inspect " + tessel::test::shared_slide("cmu-1-small-region.svs"));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const char* part :
       {"vendor      aperio\n", "levels      1 ", "  level 0   2220 × 2967, downsample 1\n",
        "mpp         0.499 × 0.499 µm", "objective   20×\n", "associated  label (", "macro (",
        "thumbnail (", "  aperio.AppMag = 20\n", "  openslide.mpp-x = 0.499\n"}) {
    EXPECT_TRUE(contains(run.output, part)) << "missing \"" << part << "\" in:\n" << run.output;
  }
}

TEST(InspectCommand, SaysWhenASlideHasNoMpp) {
  const CliRun run = run_cli("inspect " + tessel::test::shared_slide("boxes.tiff"));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "levels      4 ")) << run.output;
  EXPECT_TRUE(contains(run.output, "mpp         none")) << run.output;
}

TEST(InspectCommand, MissingFileIsAOneLineErrorWithExitCodeOne) {
  const CliRun run = run_cli("inspect /no/such/slide.svs");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(lines(run.output), 1) << run.output;
  EXPECT_TRUE(contains(run.output, "/no/such/slide.svs: no such file")) << run.output;
}

TEST(InspectCommand, BrokenSlideIsAOneLineErrorWithExitCodeOne) {
  const CliRun run = run_cli("inspect " + tessel::test::shared_slide("unopenable.tiff"));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(lines(run.output), 1) << run.output;
  EXPECT_TRUE(contains(run.output, "Unsupported TIFF compression")) << run.output;
}

TEST(InspectCommand, UnsupportedFileIsAOneLineErrorWithExitCodeOne) {
  const CliRun run = run_cli("inspect " + tessel::test::shared_slide("README.md"));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(lines(run.output), 1) << run.output;
  EXPECT_TRUE(contains(run.output, "not a slide format")) << run.output;
}

}  // namespace
