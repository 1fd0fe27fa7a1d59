// Runs `tessel inspect SLIDE --mpp / --magnification / --level / --base-mpp` as a user would.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "tests/io/shared_slides.h"
#include "tests/run_cli.h"

namespace {

using tessel::testing::CliRun;
using tessel::testing::run_cli;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

int64_t lines(const std::string& text) { return std::count(text.begin(), text.end(), '\n'); }

std::string slide(const std::string& name) { return tessel::test::shared_slide(name); }

void expect_parts(const CliRun& run, std::initializer_list<const char*> parts) {
  for (const char* part : parts) {
    EXPECT_TRUE(contains(run.output, part)) << "missing \"" << part << "\" in:\n" << run.output;
  }
}

TEST(InspectResolution, PrintsTheShrinkOfLevelZeroForTenXOnCmu1) {
  const CliRun run = run_cli("inspect " + slide("cmu-1-small-region.svs") + " --magnification 10x");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  expect_parts(run,
               {"vendor      aperio\n", "resolution  --magnification 10x\n",
                "  read      level 0, shrunk by 2 (", "  mpp       0.998 µm per output pixel\n",
                "  size      1110 × 1483 px (width × height)\n"});
}

TEST(InspectResolution, PrintsALevelReadAsItIsForMppWithBaseMppOnTcga) {
  const CliRun run =
      run_cli("inspect " + slide("tcga-cr-7395-01a-01-ts1.svs") + " --mpp 0.5mpp --base-mpp 0.25");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  expect_parts(run, {"resolution  --mpp 0.5 --base-mpp 0.25\n", "  read      level 1 as it is\n",
                     "  size      2221 × 1783 px"});
}

TEST(InspectResolution, PrintsALevelWithoutMppOnBoxes) {
  const CliRun run = run_cli("inspect " + slide("boxes.tiff") + " --level 2");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  expect_parts(run, {"  read      level 2 as it is\n", "  mpp       unknown (none in the file",
                     "  size      75 × 62 px"});
}

TEST(InspectResolution, MppOnASlideWithoutMppIsAOneLineErrorNamingTheFileAndBaseMpp) {
  const CliRun run = run_cli("inspect " + slide("tcga-cr-7395-01a-01-ts1.svs") + " --mpp 1");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(lines(run.output), 1) << run.output;
  expect_parts(run, {"tcga-cr-7395-01a-01-ts1.svs", "--base-mpp"});
}

TEST(InspectResolution, FinerThanLevelZeroIsAOneLineError) {
  const CliRun run = run_cli("inspect " + slide("cmu-1-small-region.svs") + " --mpp 0.25");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(lines(run.output), 1) << run.output;
  expect_parts(run, {"finer than level 0"});
}

TEST(InspectResolution, MalformedOrConflictingOptionsAreUsageErrors) {
  for (const char* args : {" --mpp abc", " --magnification tenx", " --level -1", " --base-mpp 0",
                           " --mpp 1 --level 0", " --magnification 10x --mpp 1"}) {
    const CliRun run = run_cli("inspect " + slide("cmu-1-small-region.svs") + args);
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.output;
  }
}

TEST(InspectResolution, LevelOutOfRangeIsAOneLineError) {
  const CliRun run = run_cli("inspect " + slide("boxes.tiff") + " --level 4");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  expect_parts(run, {"no level 4", "levels 0 to 3"});
}

}  // namespace
