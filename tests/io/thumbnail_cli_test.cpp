// Runs `tessel thumbnail` as a user would: files written, what it prints, exit codes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
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

std::filesystem::path scratch() {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tessel_thumbnail_cli_" + std::to_string(static_cast<int64_t>(getpid())));
  std::filesystem::create_directories(dir);
  return dir;
}

// Names in `dir` other than `expected`: leftovers such as temporary files.
std::vector<std::string> leftovers(const std::filesystem::path& dir,
                                   const std::vector<std::string>& expected) {
  std::vector<std::string> extra;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (std::find(expected.begin(), expected.end(), name) == expected.end()) extra.push_back(name);
  }
  return extra;
}

TEST(ThumbnailCommand, WritesAThumbnailOfTheAskedSize) {
  const auto dir = scratch() / "plain";
  std::filesystem::create_directories(dir);
  const CliRun run = run_cli("thumbnail " + tessel::test::shared_slide("cmu-1-small-region.svs") +
                             " --out " + (dir / "t.png").string() + " --size 512");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "(383 × 512, from level 0)")) << run.output;
  EXPECT_TRUE(std::filesystem::file_size(dir / "t.png") > 1000);
  EXPECT_TRUE(leftovers(dir, {"t.png"}).empty());
}

TEST(ThumbnailCommand, WithMaskWritesMaskAndOverlayAndPrintsFractionAndBox) {
  const auto dir = scratch() / "mask";
  std::filesystem::create_directories(dir);
  const CliRun run = run_cli("thumbnail " + tessel::test::shared_slide("cmu-1-small-region.svs") +
                             " --out " + (dir / "t.png").string() + " --mask");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const char* part : {"thumbnail  ", "mask       ", "t.mask.png", "overlay    ",
                           "t.overlay.png", "tissue     ", "% of the slide", "bbox       x "}) {
    EXPECT_TRUE(contains(run.output, part)) << "missing \"" << part << "\" in:\n" << run.output;
  }
  EXPECT_TRUE(leftovers(dir, {"t.png", "t.mask.png", "t.overlay.png"}).empty());
}

TEST(ThumbnailCommand, WritesTheMaskWhereMaskOutSays) {
  const auto dir = scratch() / "mask_out";
  std::filesystem::create_directories(dir);
  const CliRun run = run_cli("thumbnail " + tessel::test::shared_slide("boxes.tiff") + " --out " +
                             (dir / "t.png").string() + " --size 300 --mask --mask-out " +
                             (dir / "m.png").string());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "m.png")) << run.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "t.mask.png")) << run.output;
}

TEST(ThumbnailCommand, BrokenSlideIsAOneLineErrorWithExitCodeOne) {
  const auto dir = scratch() / "broken";
  std::filesystem::create_directories(dir);
  const CliRun run = run_cli("thumbnail " + tessel::test::shared_slide("unopenable.tiff") +
                             " --out " + (dir / "t.png").string());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(lines(run.output), 1) << run.output;
  EXPECT_TRUE(contains(run.output, "Unsupported TIFF compression")) << run.output;
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "nothing is written for a broken slide";
}

TEST(ThumbnailCommand, NotASlideIsAOneLineErrorWithExitCodeOne) {
  const CliRun run = run_cli("thumbnail " + tessel::test::shared_slide("README.md") + " --out " +
                             (scratch() / "x.png").string());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(lines(run.output), 1) << run.output;
  EXPECT_TRUE(contains(run.output, "not a slide format")) << run.output;
}

TEST(ThumbnailCommand, UnwritableOutputNamesTheFileWithExitCodeOne) {
  const CliRun run = run_cli("thumbnail " + tessel::test::shared_slide("small.svs") +
                             " --out /no/such/folder/t.png");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(lines(run.output), 1) << run.output;
  EXPECT_TRUE(contains(run.output,
                       "cannot write the PNG /no/such/folder/t.png: the folder "
                       "/no/such/folder does not exist"))
      << run.output;
}

TEST(ThumbnailCommand, MissingOutOrBadSizeIsAUsageErrorWithExitCodeTwo) {
  const std::string slide = tessel::test::shared_slide("small.svs");
  EXPECT_EQ(run_cli("thumbnail " + slide).exit_code, 2);
  EXPECT_EQ(run_cli("thumbnail " + slide + " --out x.png --size 0").exit_code, 2);
}

}  // namespace
