// Runs `tessel manifest check` as a user would, on manifests written at test time.
#include <gtest/gtest.h>

#include <string>

#include "tests/io/shared_slides.h"
#include "tests/io/temp_folder.h"
#include "tests/run_cli.h"

namespace {

using tessel::test::shared_slide;
using tessel::testing::CliRun;
using tessel::testing::run_cli;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class ManifestCommand : public ::testing::Test {
 protected:
  CliRun check(const std::string& csv, const std::string& flags = "") {
    return run_cli("manifest check " + folder_.write("data.csv", csv).string() + flags);
  }
  tessel::test::TempFolder folder_;
};

TEST_F(ManifestCommand, PrintsClassesAndSlidesPerSplitAndExitsZeroForAUsableManifest) {
  const CliRun run =
      check("slide,label,split,patient,site\n" + shared_slide("cmu-1-small-region.svs") +
            ",tumor,train,p1,A\n" + shared_slide("small.svs") + ",normal,train,p2,B\n" +
            shared_slide("boxes.tiff") + ",normal,val,p3,C\n" +
            shared_slide("tcga-cr-7395-01a-01-ts1.svs") + ",tumor,test,p4,D\n");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const char* part :
       {"slides    4 ok, 0 skipped\n", "classes   2 ", "  0  normal  1 / 1 / 0\n",
        "  1  tumor   1 / 0 / 1\n", "splits    train 2, val 1, test 1\n", "metadata  site\n",
        "problems  0\n", "usable    yes\n"}) {
    EXPECT_TRUE(contains(run.output, part)) << "missing \"" << part << "\" in:\n" << run.output;
  }
}

TEST_F(ManifestCommand, ListsEveryProblemWithItsLineAndExitsOne) {
  const CliRun run =
      check("slide,label,split,patient\n" + shared_slide("small.svs") + ",a,train,p1\n" +
            shared_slide("boxes.tiff") + ",,train,p2\n" + shared_slide("cmu-1-small-region.svs") +
            ",b,holdout,p3\n" + shared_slide("small.svs") + ",b,train,p4\n" +
            shared_slide("tcga-cr-7395-01a-01-ts1.svs") + ",b,val,p1\n" + "gone.svs,b,train,p5\n");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  for (const char* part :
       {"problems  5\n", "  line 3: error: the label is empty\n",
        "  line 4: error: unknown split \"holdout\"", "  line 5: error: duplicate slide",
        "  line 6: error: patient \"p1\" is in val here but in train on line 2",
        "  line 7: skipped: slide file not found: ", "usable    no\n", "tessel: error: manifest ",
        "data.csv cannot be used: 4 errors in the manifest"}) {
    EXPECT_TRUE(contains(run.output, part)) << "missing \"" << part << "\" in:\n" << run.output;
  }
}

TEST_F(ManifestCommand, OpenSkipsSlidesOpenSlideCannotOpenOrRead) {
  const std::string csv =
      "slide,label\n" + shared_slide("small.svs") + ",a\n" + shared_slide("unopenable.tiff") +
      ",a\n" + shared_slide("unreadable.svs") + ",b\n" + shared_slide("boxes.tiff") + ",b\n";
  const CliRun without = check(csv);
  EXPECT_EQ(without.exit_code, 0) << without.output;
  EXPECT_TRUE(contains(without.output, "slides    4 ok, 0 skipped\n")) << without.output;

  const CliRun run = check(csv, " --open");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const char* part :
       {"slides    2 ok, 2 skipped\n", "  line 3: skipped: cannot open slide ",
        "Unsupported TIFF compression", "  line 4: skipped: slide ", "OpenSlide failed reading",
        "usable    yes (every usable slide opened"}) {
    EXPECT_TRUE(contains(run.output, part)) << "missing \"" << part << "\" in:\n" << run.output;
  }
}

TEST_F(ManifestCommand, OpenSaysHowToGiveAScaleToSlidesWithoutMpp) {
  // boxes.tiff and the TCGA slide carry no mpp; the TCGA row gives one in the manifest.
  const CliRun run =
      check("slide,label,mpp\n" + shared_slide("small.svs") + ",a,\n" + shared_slide("boxes.tiff") +
                ",a,\n" + shared_slide("tcga-cr-7395-01a-01-ts1.svs") + ",b,0.5\n",
            " --open");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const char* part : {"no mpp    1 slide says nothing of its scale", "  line 3: ",
                           "an `mpp` column in the manifest", "`base_mpp: 0.25` in the training",
                           "--base-mpp 0.25 for tessel heatmap"}) {
    EXPECT_TRUE(contains(run.output, part)) << "missing \"" << part << "\" in:\n" << run.output;
  }
  EXPECT_FALSE(contains(run.output, "  line 4: ")) << run.output;
}

TEST_F(ManifestCommand, OpenFailsWhenASplitLosesEverySlide) {
  const CliRun run = check("slide,label,split\n" + shared_slide("small.svs") + ",a,train\n" +
                               shared_slide("unreadable.svs") + ",b,val\n",
                           " --open");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(contains(run.output, "cannot be used: every slide of the val split was skipped"))
      << run.output;
}

TEST_F(ManifestCommand, ClassesOptionFixesTheOrderAndRejectsOtherLabels) {
  const std::string csv = "slide,label\n" + shared_slide("small.svs") + ",normal\n" +
                          shared_slide("boxes.tiff") + ",tumor\n";
  const CliRun run = check(csv, " --classes tumor,normal");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "  0  tumor   1 / 0 / 0\n  1  normal  1 / 0 / 0\n"))
      << run.output;
  const CliRun strict = check(csv, " --classes tumor");
  EXPECT_EQ(strict.exit_code, 1) << strict.output;
  EXPECT_TRUE(contains(strict.output, "line 2: error: label \"normal\" is not one of the classes"))
      << strict.output;
}

TEST(ManifestCommandFile, MissingManifestIsAOneLineErrorWithExitCodeOne) {
  const CliRun run = run_cli("manifest check /no/such/data.csv");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(run.output, "tessel: error: cannot read manifest /no/such/data.csv: no such file\n");
}

TEST(ManifestCommandFile, ManifestWithoutASubcommandIsAUsageError) {
  EXPECT_EQ(run_cli("manifest").exit_code, 2);
}

}  // namespace
