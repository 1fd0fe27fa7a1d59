// Runs `tessel sample-data` as a user would: small slides into a temporary folder.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/run_cli.h"

namespace {

namespace fs = std::filesystem;
using tessel::testing::CliRun;
using tessel::testing::run_cli;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

fs::path temporary_folder(const std::string& name) {
  const fs::path folder =
      fs::temp_directory_path() / ("tessel_sample_cli_" + std::to_string(getpid()) + "_" + name);
  fs::remove_all(folder);
  return folder;
}

TEST(SampleDataCommand, WritesSlidesManifestAndLesionsWithOneLogLinePerSlide) {
  const fs::path folder = temporary_folder("run");
  const CliRun run =
      run_cli("sample-data --out " + folder.string() + " --slides 2 --size 512 --seed 3");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const char* part : {"slide 1/2 slide_001.tif (tumour", "slide 2/2 slide_002.tif (normal",
                           "wrote 2 slides, manifest.csv and lesions.json to "}) {
    EXPECT_TRUE(contains(run.output, part)) << "missing \"" << part << "\" in:\n" << run.output;
  }
  for (const char* file : {"slide_001.tif", "slide_002.tif", "manifest.csv", "lesions.json"}) {
    EXPECT_TRUE(fs::is_regular_file(folder / file)) << file;
  }
  const CliRun inspect = run_cli("inspect " + (folder / "slide_001.tif").string());
  EXPECT_TRUE(contains(inspect.output, "vendor      aperio\n")) << inspect.output;
  EXPECT_TRUE(contains(inspect.output, "mpp         0.5 × 0.5 µm")) << inspect.output;
  fs::remove_all(folder);
}

TEST(SampleDataCommand, RefusesAFolderWithOtherFilesInOneLineWithExitCodeOne) {
  const fs::path folder = temporary_folder("foreign");
  fs::create_directories(folder);
  std::ofstream(folder / "notes.txt") << "mine";
  const CliRun run = run_cli("sample-data --out " + folder.string() + " --slides 1 --size 512");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(contains(run.output, "notes.txt")) << run.output;
  EXPECT_TRUE(contains(run.output, "--force")) << run.output;
  EXPECT_FALSE(fs::exists(folder / "slide_001.tif"));
  fs::remove_all(folder);
}

TEST(SampleDataCommand, RejectsATooSmallSizeAsAUsageError) {
  const CliRun run = run_cli("sample-data --out /tmp/never --size 100");
  EXPECT_EQ(run.exit_code, 2) << run.output;
}

}  // namespace
