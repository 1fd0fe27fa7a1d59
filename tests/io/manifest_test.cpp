// Manifests written at test time, pointing at the real slides of ../shared/slides by absolute
// path and, through symlinks in the test's folder, by relative path.
#include "io/manifest.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/io/shared_slides.h"
#include "tests/io/temp_folder.h"

namespace {

namespace fs = std::filesystem;
using tessel::Error;
using tessel::io::assign_splits;
using tessel::io::check_slides;
using tessel::io::load_manifest;
using tessel::io::Manifest;
using tessel::io::ManifestEntry;
using tessel::io::ManifestOptions;
using tessel::io::ManifestProblem;
using tessel::io::Split;
using tessel::test::shared_slide;
using tessel::test::TempFolder;
using Severity = ManifestProblem::Severity;

const std::string kCmu = shared_slide("cmu-1-small-region.svs");
const std::string kSmall = shared_slide("small.svs");
const std::string kBoxes = shared_slide("boxes.tiff");
const std::string kTcga = shared_slide("tcga-cr-7395-01a-01-ts1.svs");

std::string problems_of(const Manifest& manifest) {
  std::ostringstream out;
  for (const ManifestProblem& problem : manifest.problems) out << problem << "\n";
  return out.str();
}

// True when some problem of `severity` is on `line` and its reason contains `part`.
bool has_problem(const Manifest& manifest, int line, const std::string& part,
                 Severity severity = Severity::kError) {
  return std::any_of(manifest.problems.begin(), manifest.problems.end(), [&](const auto& p) {
    return p.line == line && p.severity == severity && p.reason.find(part) != std::string::npos;
  });
}

class ManifestTest : public ::testing::Test {
 protected:
  Manifest load(const std::string& csv, const ManifestOptions& options = {}) {
    return load_manifest(folder_.write("manifest.csv", csv), options);
  }
  TempFolder folder_;
};

// --- reading the CSV ----------------------------------------------------------------------------

TEST_F(ManifestTest, ReadsSlideLabelSplitPatientAndKeepsOtherColumnsAsMetadata) {
  const Manifest m = load("slide,label,split,patient,site,stain\n" + kCmu +
                          ",tumor,train,p1,Pittsburgh,HE\n" + kSmall + ",normal,val,p2,Boston,\n");
  ASSERT_TRUE(m.usable()) << problems_of(m);
  ASSERT_EQ(m.entries.size(), 2u);
  const ManifestEntry& first = m.entries[0];
  EXPECT_EQ(first.slide, fs::path(kCmu).lexically_normal());
  EXPECT_EQ(first.label, "tumor");
  EXPECT_EQ(first.class_index, 1);
  EXPECT_EQ(first.split, Split::kTrain);
  EXPECT_EQ(first.patient, "p1");
  EXPECT_EQ(first.line, 2);
  EXPECT_EQ(first.metadata,
            (std::map<std::string, std::string>{{"site", "Pittsburgh"}, {"stain", "HE"}}));
  EXPECT_EQ(m.entries[1].split, Split::kVal);
  EXPECT_EQ(m.entries[1].metadata.at("stain"), "");
  EXPECT_EQ(m.metadata_columns, (std::vector<std::string>{"site", "stain"}));
  EXPECT_TRUE(m.has_split_column);
}

TEST_F(ManifestTest, ResolvesRelativePathsAgainstTheCsvFolderNotTheWorkingDirectory) {
  fs::create_directories(folder_.path() / "slides");
  fs::create_symlink(kSmall, folder_.path() / "slides" / "small.svs");
  fs::copy_file(kBoxes, folder_.path() / "boxes.tiff");
  const Manifest m =
      load("slide,label\nslides/small.svs,a\n./slides/../boxes.tiff,b\n" + kCmu + ",c\n");
  ASSERT_TRUE(m.usable()) << problems_of(m);
  ASSERT_EQ(m.entries.size(), 3u);
  EXPECT_EQ(m.entries[0].slide, fs::absolute(folder_.path() / "slides" / "small.svs"));
  EXPECT_EQ(m.entries[1].slide, fs::absolute(folder_.path() / "boxes.tiff"));
  EXPECT_EQ(m.entries[2].slide, fs::path(kCmu).lexically_normal());
}

TEST_F(ManifestTest, ParsesQuotedFieldsWithCommasDoubledQuotesAndLineBreaks) {
  const Manifest m =
      load("slide,label,note\n\"" + kCmu + "\",\"tumor, grade 2\",\"said \"\"maybe\"\"\"\n" +
           kSmall + ",normal,\"two\nlines\"\n" + kBoxes + ",  normal  ,  \"kept \"  \n");
  ASSERT_TRUE(m.usable()) << problems_of(m);
  ASSERT_EQ(m.entries.size(), 3u);
  EXPECT_EQ(m.entries[0].label, "tumor, grade 2");
  EXPECT_EQ(m.entries[0].metadata.at("note"), "said \"maybe\"");
  EXPECT_EQ(m.entries[1].metadata.at("note"), "two\nlines");
  EXPECT_EQ(m.entries[2].label, "normal");
  EXPECT_EQ(m.entries[2].metadata.at("note"), "kept ");
  // The row after a two-line field starts on line 5.
  EXPECT_EQ(m.entries[2].line, 5);
}

TEST_F(ManifestTest, AcceptsAByteOrderMarkCrlfLineEndsAndBlankLines) {
  const Manifest m = load("\xEF\xBB\xBFslide,label\r\n\r\n" + kCmu + ",tumor\r\n,\r\n   \r\n" +
                          kSmall + ",normal\r\n\r\n");
  ASSERT_TRUE(m.usable()) << problems_of(m);
  ASSERT_EQ(m.entries.size(), 2u);
  EXPECT_EQ(m.entries[0].line, 3);
  EXPECT_EQ(m.entries[1].line, 6);
  EXPECT_EQ(m.entries[1].label, "normal");
}

TEST_F(ManifestTest, MatchesHeaderNamesWhateverTheirCaseAndSurroundingSpaces) {
  const Manifest m = load(" Slide ,LABEL,  Split,Patient \n" + kCmu + ",tumor,TEST,p1\n");
  ASSERT_TRUE(m.usable()) << problems_of(m);
  ASSERT_EQ(m.entries.size(), 1u);
  EXPECT_EQ(m.entries[0].split, Split::kTest);
  EXPECT_EQ(m.entries[0].patient, "p1");
  EXPECT_TRUE(m.metadata_columns.empty());
}

TEST_F(ManifestTest, WithoutASplitColumnEverySlideIsInTrain) {
  const Manifest m = load("slide,label\n" + kCmu + ",a\n" + kSmall + ",b\n");
  ASSERT_TRUE(m.usable()) << problems_of(m);
  EXPECT_FALSE(m.has_split_column);
  for (const ManifestEntry& e : m.entries) EXPECT_EQ(e.split, Split::kTrain);
}

TEST(ManifestFile, MissingFileThrowsNamingIt) {
  try {
    load_manifest("/no/such/manifest.csv");
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "cannot read manifest /no/such/manifest.csv: no such file");
  }
}

// --- classes ------------------------------------------------------------------------------------

TEST_F(ManifestTest, NamesClassesInByteOrderWhateverTheRowOrder) {
  const Manifest m =
      load("slide,label\n" + kCmu + ",tumor\n" + kSmall + ",Normal\n" + kBoxes + ",normal\n");
  ASSERT_TRUE(m.usable()) << problems_of(m);
  EXPECT_EQ(m.classes, (std::vector<std::string>{"Normal", "normal", "tumor"}));
  EXPECT_EQ(m.entries[0].class_index, 2);
  EXPECT_EQ(m.entries[1].class_index, 0);
  EXPECT_EQ(m.entries[2].class_index, 1);
}

TEST_F(ManifestTest, IntegerLabelsAreTheirOwnClassIndices) {
  const Manifest m = load("slide,label\n" + kCmu + ",2\n" + kSmall + ",0\n" + kBoxes + ",1\n" +
                          kTcga + ",10\n" + kCmu + "x,3\n" + kCmu + "y,4\n" + kCmu + "z,5\n" +
                          kCmu + "w,6\n" + kCmu + "v,7\n" + kCmu + "u,8\n" + kCmu + "t,9\n");
  EXPECT_EQ(m.classes.size(), 11u);
  EXPECT_EQ(m.classes[10], "10");  // by number, not "10" < "2" as text
  EXPECT_EQ(m.entries[0].class_index, 2);
  EXPECT_EQ(m.entries[3].class_index, 10);
  EXPECT_TRUE(std::none_of(m.problems.begin(), m.problems.end(), [](const auto& p) {
    return p.severity == Severity::kError;
  })) << problems_of(m);
}

TEST_F(ManifestTest, IntegerLabelsWithAGapAreAnError) {
  const Manifest m = load("slide,label\n" + kCmu + ",0\n" + kSmall + ",2\n");
  EXPECT_FALSE(m.usable());
  EXPECT_TRUE(has_problem(m, 0, "no slide has label 1 (")) << problems_of(m);
  EXPECT_EQ(m.classes, (std::vector<std::string>{"0", "2"}));
  const Manifest huge = load("slide,label\n" + kCmu + ",0\n" + kSmall + ",999999999\n");
  EXPECT_TRUE(
      has_problem(huge, 0, "must cover 0..999999999, but no slide has label 1, 2, 3, 4, 5, ..."))
      << problems_of(huge);
  EXPECT_EQ(huge.classes.size(), 2u);
}

TEST_F(ManifestTest, MixedIntegerAndNameLabelsAreAllNames) {
  const Manifest m = load("slide,label\n" + kCmu + ",1\n" + kSmall + ",tumor\n");
  ASSERT_TRUE(m.usable()) << problems_of(m);
  EXPECT_EQ(m.classes, (std::vector<std::string>{"1", "tumor"}));
}

TEST_F(ManifestTest, AnExplicitClassListFixesTheOrderAndRejectsOtherLabels) {
  const Manifest m =
      load("slide,label\n" + kCmu + ",tumor\n" + kSmall + ",normal\n" + kBoxes + ",stroma\n",
           ManifestOptions{{"tumor", "normal"}});
  EXPECT_EQ(m.classes, (std::vector<std::string>{"tumor", "normal"}));
  EXPECT_EQ(m.entries.size(), 2u);
  EXPECT_EQ(m.entries[0].class_index, 0);
  EXPECT_EQ(m.entries[1].class_index, 1);
  EXPECT_FALSE(m.usable());
  EXPECT_TRUE(has_problem(m, 4, "label \"stroma\" is not one of the classes (tumor, normal)"))
      << problems_of(m);
}

TEST_F(ManifestTest, AnExplicitClassListAcceptsIndicesIntoIt) {
  const Manifest m = load("slide,label\n" + kCmu + ",1\n" + kSmall + ",0\n" + kBoxes + ",2\n",
                          ManifestOptions{{"normal", "tumor"}});
  ASSERT_EQ(m.entries.size(), 2u);
  EXPECT_EQ(m.entries[0].class_index, 1);
  EXPECT_EQ(m.entries[1].class_index, 0);
  EXPECT_TRUE(has_problem(m, 4, "label \"2\" is not one of the classes")) << problems_of(m);
}

TEST_F(ManifestTest, AClassListNamingAClassTwiceThrows) {
  EXPECT_THROW(load("slide,label\n" + kCmu + ",a\n", ManifestOptions{{"a", "b", "a"}}), Error);
}

// --- validation: every problem, with its line ---------------------------------------------------

TEST_F(ManifestTest, AHeaderWithoutSlideOrLabelColumnsIsRejected) {
  const Manifest m = load("path,class\n" + kCmu + ",tumor\n");
  EXPECT_FALSE(m.usable());
  EXPECT_TRUE(has_problem(m, 1, "no \"slide\" column")) << problems_of(m);
  EXPECT_TRUE(has_problem(m, 1, "no \"label\" column")) << problems_of(m);
  EXPECT_TRUE(m.entries.empty());
}

TEST_F(ManifestTest, AHeaderNamingAColumnTwiceIsRejected) {
  const Manifest m = load("slide,label,Label\n" + kCmu + ",a,b\n");
  EXPECT_TRUE(has_problem(m, 1, "names column \"Label\" twice")) << problems_of(m);
  EXPECT_FALSE(m.usable());
}

TEST_F(ManifestTest, IgnoresColumnsWithoutAName) {
  const Manifest m = load("slide,label,,\n" + kCmu + ",a,,\n" + kSmall + ",b,x,\n");
  ASSERT_TRUE(m.usable()) << problems_of(m);
  EXPECT_TRUE(m.metadata_columns.empty());
  EXPECT_TRUE(m.entries[1].metadata.empty());
}

TEST_F(ManifestTest, TextAfterAClosingQuoteIsRejected) {
  const Manifest m = load("slide,label\n" + kCmu + ",\"tumor\" grade 2\n");
  EXPECT_TRUE(has_problem(m, 2, "text after the closing quote")) << problems_of(m);
  EXPECT_EQ(m.problems.size(), 1u) << problems_of(m);
}

TEST_F(ManifestTest, AnEmptyFileIsRejected) {
  const Manifest m = load("\xEF\xBB\xBF\n\n");
  EXPECT_TRUE(has_problem(m, 0, "the file is empty")) << problems_of(m);
  EXPECT_FALSE(m.usable());
}

TEST_F(ManifestTest, ARowWithTheWrongNumberOfFieldsIsRejected) {
  const Manifest m = load("slide,label,split\n" + kCmu + ",tumor\n" + kSmall +
                          ",tumor, grade 2,val\n" + kBoxes + ",normal,train\n");
  EXPECT_TRUE(has_problem(m, 2, "the row has 2 fields, the header has 3")) << problems_of(m);
  EXPECT_TRUE(has_problem(m, 3, "the row has 4 fields, the header has 3")) << problems_of(m);
  EXPECT_FALSE(m.usable());
}

TEST_F(ManifestTest, AnUnclosedQuoteIsRejected) {
  const Manifest m = load("slide,label\n" + kCmu + ",tumor\n\"" + kSmall + ",normal\n");
  EXPECT_TRUE(has_problem(m, 3, "quoted field is never closed")) << problems_of(m);
  EXPECT_EQ(m.problems.size(), 1u) << problems_of(m);
}

TEST_F(ManifestTest, EmptyLabelsAndSlidePathsAreRejected) {
  const Manifest m = load("slide,label\n" + kCmu + ",\n,tumor\n" + kSmall + ",  \n");
  EXPECT_TRUE(has_problem(m, 2, "the label is empty")) << problems_of(m);
  EXPECT_TRUE(has_problem(m, 3, "the slide path is empty")) << problems_of(m);
  EXPECT_TRUE(has_problem(m, 4, "the label is empty")) << problems_of(m);
  EXPECT_FALSE(m.usable());
}

TEST_F(ManifestTest, UnknownAndEmptySplitsAreRejected) {
  const Manifest m =
      load("slide,label,split\n" + kCmu + ",a,training\n" + kSmall + ",a,\n" + kBoxes + ",a,Val\n");
  EXPECT_TRUE(has_problem(m, 2, "unknown split \"training\" (use train, val or test)"))
      << problems_of(m);
  EXPECT_TRUE(has_problem(m, 3, "the split is empty")) << problems_of(m);
  EXPECT_EQ(m.problems.size(), 2u) << problems_of(m);
}

TEST_F(ManifestTest, TheSameSlideTwiceIsRejectedEvenUnderAnotherPath) {
  fs::create_symlink(kSmall, folder_.path() / "alias.svs");
  const Manifest m = load("slide,label\n" + kSmall + ",a\n" + kCmu + ",b\nalias.svs,b\n" +
                          shared_slide("../slides/small.svs") + ",a\n");
  EXPECT_TRUE(has_problem(m, 4, "duplicate slide")) << problems_of(m);
  EXPECT_TRUE(has_problem(m, 4, "already listed on line 2")) << problems_of(m);
  EXPECT_TRUE(has_problem(m, 5, "already listed on line 2")) << problems_of(m);
  EXPECT_FALSE(m.usable());
}

TEST_F(ManifestTest, APatientInTwoSplitsIsRejected) {
  const Manifest m = load("slide,label,split,patient\n" + kCmu + ",a,train,p1\n" + kSmall +
                          ",a,train,p1\n" + kBoxes + ",b,val,p2\n" + kTcga + ",b,test,p1\n");
  EXPECT_TRUE(has_problem(m, 5, "patient \"p1\" is in test here but in train on line 2"))
      << problems_of(m);
  EXPECT_EQ(m.problems.size(), 1u) << problems_of(m);
  EXPECT_FALSE(m.usable());
}

TEST_F(ManifestTest, ReportsEveryProblemInLineOrderNotJustTheFirst) {
  const Manifest m = load("slide,label,split,patient\n" + kCmu + ",a,train,p1\n" + kSmall +
                          ",,train,p2\n" + kBoxes + ",b,nope,p3\n" + kCmu + ",a,train,p4\n" +
                          kTcga + ",b,val,p1\nmissing.svs,b,train,p5\n" + kBoxes + ",b\n");
  std::vector<int> lines;
  for (const ManifestProblem& p : m.problems) lines.push_back(p.line);
  EXPECT_EQ(lines, (std::vector<int>{3, 4, 5, 6, 7, 8})) << problems_of(m);
  EXPECT_TRUE(has_problem(m, 7, "slide file not found", Severity::kSkip)) << problems_of(m);
  EXPECT_FALSE(m.usable());
}

// --- missing and broken slides are skipped, not fatal -------------------------------------------

TEST_F(ManifestTest, AMissingSlideFileIsSkippedAndTheRestIsUsable) {
  const Manifest m = load("slide,label\n" + kCmu + ",a\nnot-here.svs,b\n" + kSmall + ",b\n");
  EXPECT_TRUE(m.usable()) << m.unusable_reason() << "\n" << problems_of(m);
  ASSERT_EQ(m.entries.size(), 2u);
  ASSERT_EQ(m.skipped.size(), 1u);
  EXPECT_EQ(m.skipped[0].line, 3);
  EXPECT_TRUE(has_problem(
      m, 3, "slide file not found: " + (folder_.path() / "not-here.svs").string(), Severity::kSkip))
      << problems_of(m);
  ASSERT_EQ(m.problems.size(), 1u);
  EXPECT_EQ(m.problems[0].slide, (folder_.path() / "not-here.svs").string());
}

// Issue 51: `manifest check` called these usable, and training then skipped them mid-run.
TEST_F(ManifestTest, AnMppOrRoiTrainingCannotUseSkipsTheSlideWithItsLine) {
  folder_.write("good.geojson",
                R"({"type": "Polygon", "coordinates": [[[0,0],[9,0],[9,9],[0,0]]]})");
  std::string csv = "slide,label,MPP,roi\n";
  const std::vector<std::string> mpps = {"-1", "NaN", "inf", "0", "0.5x", "0.25", "", " 0.5 "};
  for (size_t i = 0; i < mpps.size(); ++i) {
    csv += (folder_.path() / ("s" + std::to_string(i) + ".svs")).string() + "," +
           (i % 2 ? "a" : "b") + "," + mpps[i] + ",\n";
    folder_.write("s" + std::to_string(i) + ".svs", "");
  }
  csv += kCmu + ",a,,missing.geojson\n" + kSmall + ",b,,good.geojson\n";
  const Manifest m = load(csv);
  for (int line = 2; line <= 6; ++line) {
    EXPECT_TRUE(
        has_problem(m, line, "is not a positive number of microns per pixel", Severity::kSkip))
        << line << "\n"
        << problems_of(m);
  }
  EXPECT_TRUE(has_problem(
      m, 10,
      "region of interest " + (folder_.path() / "missing.geojson").string() + ": no such file",
      Severity::kSkip))
      << problems_of(m);
  ASSERT_EQ(m.skipped.size(), 6u) << problems_of(m);
  ASSERT_EQ(m.entries.size(), 4u) << problems_of(m);
  EXPECT_EQ(tessel::io::manifest_mpp(m.entries[0].metadata), 0.25);
  EXPECT_EQ(tessel::io::manifest_mpp(m.entries[2].metadata), 0.5);
}

TEST_F(ManifestTest, TextThatIsNotUtf8IsRefusedWithItsLineAndColumn) {
  const Manifest m = load("slide,label\n" + kCmu + ",caf\xE9\n" + kSmall + ",b\n");
  EXPECT_FALSE(m.usable());
  EXPECT_TRUE(has_problem(m, 2, "the label column is not UTF-8 text (byte 4 (0xE9) is not UTF-8)"))
      << problems_of(m);
  EXPECT_FALSE(load("slide,l\xE9\n" + kCmu + ",a\n").usable());
}

TEST_F(ManifestTest, CheckSlidesSkipsASlideWhoseRoiIsBrokenOrFromAnotherSlide) {
  folder_.write("broken.geojson", "{\"type\": \"Polygon\", \"coordinates\": [[[0,0],[9");
  folder_.write(
      "beyond.geojson",
      R"({"type": "Polygon", "coordinates": [[[80000,80000],[90000,80000],[90000,90000],[80000,80000]]]})");
  folder_.write("good.geojson",
                R"({"type": "Polygon", "coordinates": [[[0,0],[99,0],[99,99],[0,0]]]})");
  Manifest m = load("slide,label,roi\n" + kCmu + ",a,broken.geojson\n" + kSmall +
                    ",b,beyond.geojson\n" + kBoxes + ",b,good.geojson\n");
  ASSERT_EQ(m.entries.size(), 3u) << problems_of(m);
  check_slides(m);
  ASSERT_EQ(m.entries.size(), 1u) << problems_of(m);
  EXPECT_EQ(m.entries[0].line, 4);
  EXPECT_TRUE(has_problem(m, 2, "broken.geojson", Severity::kSkip)) << problems_of(m);
  EXPECT_TRUE(has_problem(m, 3, "beyond.geojson", Severity::kSkip)) << problems_of(m);
}

TEST_F(ManifestTest, AMissingSlideDoesNotShiftTheClassIndices) {
  const Manifest m = load("slide,label\nnot-here.svs,a\n" + kCmu + ",b\n" + kSmall + ",c\n");
  EXPECT_EQ(m.classes, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(m.entries[0].class_index, 1);
}

TEST_F(ManifestTest, IsUnusableWhenEverySlideOfASplitWasSkipped) {
  const Manifest m =
      load("slide,label,split\n" + kCmu + ",a,train\nnot-here.svs,a,val\n" + kSmall + ",b,train\n");
  EXPECT_EQ(m.unusable_reason(), "every slide of the val split was skipped");
}

TEST_F(ManifestTest, IsUnusableWhenNoSlideRemains) {
  EXPECT_EQ(load("slide,label\nnot-here.svs,a\n").unusable_reason(), "every slide was skipped");
  EXPECT_EQ(load("slide,label\n").unusable_reason(), "it lists no slides");
}

TEST_F(ManifestTest, CheckSlidesSkipsSlidesOpenSlideCannotOpenOrRead) {
  Manifest m = load("slide,label,split\n" + kCmu + ",a,train\n" + shared_slide("unopenable.tiff") +
                    ",a,train\n" + kBoxes + ",b,val\n" + shared_slide("unreadable.svs") +
                    ",b,train\n" + shared_slide("README.md") + ",b,train\n");
  ASSERT_TRUE(m.usable()) << problems_of(m);
  check_slides(m);
  EXPECT_TRUE(m.usable()) << m.unusable_reason();
  ASSERT_EQ(m.entries.size(), 2u);
  EXPECT_EQ(m.entries[0].line, 2);
  EXPECT_EQ(m.entries[1].line, 4);
  ASSERT_EQ(m.skipped.size(), 3u);
  EXPECT_TRUE(has_problem(m, 3, "Unsupported TIFF compression", Severity::kSkip)) << problems_of(m);
  EXPECT_TRUE(has_problem(m, 5, "OpenSlide failed reading", Severity::kSkip)) << problems_of(m);
  EXPECT_TRUE(has_problem(m, 6, "not a slide format", Severity::kSkip)) << problems_of(m);
}

TEST_F(ManifestTest, CheckSlidesMakesTheManifestUnusableWhenASplitLosesEverySlide) {
  Manifest m = load("slide,label,split\n" + kCmu + ",a,train\n" + shared_slide("unreadable.svs") +
                    ",b,test\n");
  check_slides(m);
  EXPECT_EQ(m.unusable_reason(), "every slide of the test split was skipped");
}

// --- seeded, patient-safe splits ----------------------------------------------------------------

// `patients` patients with 1..3 slides each (by patient number), class by patient number mod
// `classes`; every fifth patient leaves the patient cell empty (each slide its own patient).
Manifest synthetic(int patients, int classes) {
  Manifest m;
  for (int c = 0; c < classes; ++c) m.classes.push_back("class" + std::to_string(c));
  int line = 2;
  for (int p = 0; p < patients; ++p) {
    for (int s = 0; s < 1 + p % 3; ++s) {
      ManifestEntry e;
      e.slide = "/slides/p" + std::to_string(p) + "-" + std::to_string(s) + ".svs";
      e.class_index = p % classes;
      e.label = m.classes[e.class_index];
      e.patient = p % 5 == 4 ? "" : "patient" + std::to_string(p);
      e.line = line++;
      m.entries.push_back(e);
    }
  }
  return m;
}

std::vector<Split> splits_of(const Manifest& m) {
  std::vector<Split> splits;
  for (const ManifestEntry& e : m.entries) splits.push_back(e.split);
  return splits;
}

TEST(AssignSplits, NeverPutsAPatientInTwoSplits) {
  for (uint64_t seed : {1, 2, 3, 42}) {
    Manifest m = synthetic(120, 3);
    assign_splits(m, 0.2, 0.1, seed);
    std::map<std::string, std::set<Split>> splits;
    for (const ManifestEntry& e : m.entries) {
      if (!e.patient.empty()) splits[e.patient].insert(e.split);
    }
    for (const auto& [patient, set] : splits) {
      EXPECT_EQ(set.size(), 1u) << patient << " seed " << seed;
    }
  }
}

TEST(AssignSplits, IsTheSameForASeedWhateverTheRowOrder) {
  Manifest a = synthetic(60, 2), b = synthetic(60, 2), c = synthetic(60, 2);
  assign_splits(a, 0.2, 0.2, 7);
  std::reverse(b.entries.begin(), b.entries.end());
  assign_splits(b, 0.2, 0.2, 7);
  std::reverse(b.entries.begin(), b.entries.end());
  assign_splits(c, 0.2, 0.2, 8);
  EXPECT_EQ(splits_of(a), splits_of(b));
  EXPECT_NE(splits_of(a), splits_of(c));
}

TEST(AssignSplits, RoughlyHonoursTheFractionsInEveryClass) {
  for (uint64_t seed : {1, 5, 9}) {
    Manifest m = synthetic(300, 3);  // 100, 200 and 300 slides in patients of 1, 2 and 3
    assign_splits(m, 0.2, 0.1, seed);
    std::map<int, std::array<int, 3>> counts;
    for (const ManifestEntry& e : m.entries) ++counts[e.class_index][static_cast<int>(e.split)];
    for (const auto& [c, n] : counts) {
      const double total = n[0] + n[1] + n[2];
      SCOPED_TRACE("class " + std::to_string(c) + " seed " + std::to_string(seed));
      EXPECT_NEAR(n[1] / total, 0.2, 0.02);
      EXPECT_NEAR(n[2] / total, 0.1, 0.02);
    }
  }
}

TEST(AssignSplits, KeepsEveryClassInTrainEvenWhenItHasOnePatient) {
  Manifest m = synthetic(1, 1);
  assign_splits(m, 0.3, 0.3, 1);
  EXPECT_EQ(splits_of(m), std::vector<Split>(m.entries.size(), Split::kTrain));
}

TEST(AssignSplits, RefusesFractionsThatLeaveNothingForTraining) {
  Manifest m = synthetic(10, 2);
  EXPECT_THROW(assign_splits(m, 0.5, 0.5, 1), Error);
  EXPECT_THROW(assign_splits(m, -0.1, 0.2, 1), Error);
}

}  // namespace
