// Slides as hospitals and imaging labs store them, made at test time from ../shared/slides by
// third-party tools (tests/io/make_slides.py, the ctest fixture made_slides): DICOM WSI by
// wsidicomizer, pyramidal OME-TIFF by tifffile. Through io::Slide and through `tessel` as a user
// runs it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/ome_xml.h"
#include "io/slide.h"
#include "tests/io/shared_slides.h"
#include "tests/io/temp_folder.h"
#include "tests/run_cli.h"

namespace {

namespace fs = std::filesystem;
using tessel::Error;
using tessel::io::RgbImage;
using tessel::io::Slide;
using tessel::test::shared_slide;
using tessel::testing::CliRun;
using tessel::testing::run_cli;

fs::path made(const std::string& name) { return fs::path(TESSEL_MADE_SLIDES) / name; }

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no tessel::Error thrown)";
}

std::vector<fs::path> files_of(const fs::path& folder) {
  std::vector<fs::path> files(fs::directory_iterator(folder), fs::directory_iterator{});
  std::sort(files.begin(), files.end());
  return files;
}

TEST(DicomSlide, AFolderOfInstancesOpensWithTheSvssLevelsMppAndAssociatedImages) {
  const Slide svs(shared_slide("cmu-1-small-region.svs"));
  const Slide dicom(made("dicom/cmu-1"));
  EXPECT_EQ(dicom.vendor(), "dicom");
  EXPECT_EQ(dicom.path(), made("dicom/cmu-1"));
  ASSERT_EQ(dicom.level_count(), svs.level_count());
  for (int i = 0; i < svs.level_count(); ++i) {
    EXPECT_EQ(dicom.level(i).width, svs.level(i).width) << "level " << i;
    EXPECT_EQ(dicom.level(i).height, svs.level(i).height) << "level " << i;
  }
  ASSERT_TRUE(dicom.mpp_x() && dicom.mpp_y());
  EXPECT_NEAR(*dicom.mpp_x(), 0.499, 1e-9);
  EXPECT_NEAR(*dicom.mpp_y(), 0.499, 1e-9);
  EXPECT_EQ(dicom.associated_image_names(),
            (std::vector<std::string>{"label", "macro", "thumbnail"}));
  const RgbImage label = dicom.read_associated_image("label");
  EXPECT_GT(label.width * label.height, 0);
}

TEST(DicomSlide, AnyOneOfItsFilesOpensTheSameSlide) {
  for (const fs::path& file : files_of(made("dicom/cmu-1"))) {
    SCOPED_TRACE(file.string());
    const Slide slide(file);
    EXPECT_EQ(slide.vendor(), "dicom");
    ASSERT_EQ(slide.level_count(), 1);
    EXPECT_EQ(slide.level(0).width, 2220);
    EXPECT_EQ(slide.level(0).height, 2967);
  }
}

// wsidicomizer copies the SVS's JPEG tiles into the DICOM instances without decoding them, so the
// conversion is lossless and level 0 must decode to the SVS's pixels exactly, not within a
// tolerance.
TEST(DicomSlide, Level0PixelsEqualTheSvssPixelForPixel) {
  const Slide svs(shared_slide("cmu-1-small-region.svs"));
  const Slide dicom(made("dicom/cmu-1"));
  const auto& level = svs.level(0);
  const RgbImage a = svs.read_region(0, 0, 0, level.width, level.height);
  const RgbImage b = dicom.read_region(0, 0, 0, level.width, level.height);
  ASSERT_EQ(a.pixels.size(), b.pixels.size());
  size_t differing = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) differing += a.pixels[i] != b.pixels[i] ? 1 : 0;
  EXPECT_EQ(differing, 0U);
}

TEST(DicomSlide, AFolderOfTwoSlidesIsRefusedNamingTheFolderAndBothSeries) {
  const std::string message = error_of([] { Slide slide(made("dicom/mixed")); });
  EXPECT_TRUE(contains(message, made("dicom/mixed").string())) << message;
  EXPECT_TRUE(contains(message, "DICOM files of two slides")) << message;
  EXPECT_TRUE(contains(message, ".dcm is series ")) << message;
}

TEST(DicomSlide, AnInstanceThatIsNotASlideIsRefusedNamingIt) {
  const std::string message = error_of([] { Slide slide(made("dicom/not-a-slide.dcm")); });
  EXPECT_TRUE(contains(message, "not-a-slide.dcm")) << message;
  EXPECT_TRUE(contains(message, "a DICOM file, but not a whole-slide image")) << message;
}

TEST(DicomSlide, AFolderWithoutSlideInstancesIsRefused) {
  tessel::test::TempFolder folder;
  folder.write("notes.txt", "not DICOM\n");
  std::string message = error_of([&] { Slide slide(folder.path()); });
  EXPECT_TRUE(contains(message, folder.path().string())) << message;
  EXPECT_TRUE(contains(message, "a folder without DICOM files")) << message;
  fs::copy_file(made("dicom/not-a-slide.dcm"), folder.path() / "x.dcm");
  message = error_of([&] { Slide slide(folder.path()); });
  EXPECT_TRUE(contains(message, "none of its 1 DICOM files is a whole-slide image")) << message;
}

// The level-0 instance cut to a quarter of its bytes: its first tiles are there, the rest not.
TEST(DicomSlide, ATruncatedInstanceFailsNamingTheSlideNotWithBlankPixels) {
  const std::string message = error_of([] {
    const Slide slide(made("dicom/truncated"));
    slide.read_region(0, 0, 0, slide.level(0).width, slide.level(0).height);
  });
  EXPECT_TRUE(contains(message, made("dicom/truncated").string())) << message;
}

TEST(DicomCommands, InspectShowsTheLevelsAndMppOfAFolder) {
  const CliRun run = run_cli("inspect " + made("dicom/cmu-1").string());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const char* part : {"vendor      dicom\n", "levels      1 ", "  level 0   2220 × 2967",
                           "mpp         0.499", "label (", "dicom.SeriesInstanceUID = "}) {
    EXPECT_TRUE(contains(run.output, part)) << "missing \"" << part << "\" in:\n" << run.output;
  }
}

TEST(DicomCommands, BadDicomInputIsAOneLineErrorNamingTheFileWithExitCodeOne) {
  for (const std::string name : {"dicom/mixed", "dicom/not-a-slide.dcm"}) {
    const CliRun run = run_cli("inspect " + made(name).string());
    EXPECT_EQ(run.exit_code, 1) << run.output;
    EXPECT_TRUE(contains(run.output, made(name).string())) << run.output;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
  }
  const CliRun run = run_cli("thumbnail " + made("dicom/truncated").string() + " --out " +
                             (fs::path(::testing::TempDir()) / "truncated.png").string());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(contains(run.output, made("dicom/truncated").string())) << run.output;
}

TEST(DicomCommands, ManifestCheckOpensDicomFoldersAndSkipsTheBrokenOnes) {
  tessel::test::TempFolder folder;
  const fs::path csv = folder.write(
      "data.csv", "slide,label\n" + made("dicom/cmu-1").string() + ",tumor\n" +
                      made("dicom/small").string() + ",normal\n" + made("dicom/mixed").string() +
                      ",normal\n" + made("dicom/truncated").string() + ",tumor\n");
  const CliRun run = run_cli("manifest check " + csv.string() + " --open");
  for (const char* part : {"slides    2 ok, 2 skipped", "  line 4: skipped: ",
                           "DICOM files of two slides", "  line 5: skipped: "}) {
    EXPECT_TRUE(contains(run.output, part)) << "missing \"" << part << "\" in:\n" << run.output;
  }
}

// Two copies of the DICOM CMU-1 (a folder each) as two classes: a run on DICOM slides from the
// manifest to a checkpoint, as for any other format.
// A DICOM slide wherever a slide goes: train on a manifest of DICOM folders, evaluate, a heatmap
// of a folder named with a trailing slash (its files named after the folder, the slide's mpp in
// the TIFF), a thumbnail with its tissue mask.
TEST(DicomCommands, TrainEvalHeatmapAndThumbnailRunOnDicomSlides) {
  tessel::test::TempFolder folder;
  for (const char* name : {"a", "b"}) {
    fs::copy(made("dicom/cmu-1"), folder.path() / name);
  }
  const fs::path csv =
      folder.write("data.csv", "slide,label,split\na,tumor,train\nb,normal,train\n");
  const fs::path config =
      folder.write("run.yaml", "manifest: " + csv.string() +
                                   "\nmodel: tiny\nmpp: 16\nepochs: 1\nbudget: 64MiB\nseed: 1\n"
                                   "output: " +
                                   (folder.path() / "run").string() + "\n");
  const CliRun run = run_cli("train --config " + config.string());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const fs::path checkpoint = folder.path() / "run" / "checkpoints" / "last.h5";
  ASSERT_TRUE(fs::exists(checkpoint)) << run.output;

  const fs::path predictions = folder.path() / "predictions.csv";
  const CliRun eval = run_cli("eval --checkpoint " + checkpoint.string() + " --split train --out " +
                              predictions.string());
  EXPECT_EQ(eval.exit_code, 0) << eval.output;
  EXPECT_TRUE(fs::exists(predictions)) << eval.output;

  const fs::path heatmaps = folder.path() / "heatmaps";
  const CliRun heatmap = run_cli("heatmap --checkpoint " + checkpoint.string() + " --slide " +
                                 (folder.path() / "a").string() + "/ --out " + heatmaps.string());
  EXPECT_EQ(heatmap.exit_code, 0) << heatmap.output;
  const fs::path tiff = heatmaps / "a.heatmap.tif";
  ASSERT_TRUE(fs::exists(tiff)) << heatmap.output;
  EXPECT_TRUE(fs::exists(heatmaps / "a.heatmap.png"));
  EXPECT_FALSE(fs::exists(heatmaps / ".heatmap.tif"));
  const Slide written(tiff);  // the heatmap TIFF as a viewer opens it: at the slide's scale
  ASSERT_TRUE(written.mpp_x()) << "no resolution in " << tiff;
  EXPECT_NEAR(*written.mpp_x(), 0.499, 1e-3);

  const fs::path png = folder.path() / "thumb.png";
  const CliRun thumbnail =
      run_cli("thumbnail " + made("dicom/cmu-1").string() + " --out " + png.string() + " --mask");
  EXPECT_EQ(thumbnail.exit_code, 0) << thumbnail.output;
  EXPECT_TRUE(fs::exists(png));
  EXPECT_TRUE(fs::exists(folder.path() / "thumb.mask.png")) << thumbnail.output;
}

TEST(DicomSlide, ItsNameIsItsFoldersAlsoWithATrailingSlash) {
  EXPECT_EQ(tessel::io::slide_name(made("dicom/cmu-1")), "cmu-1");
  EXPECT_EQ(tessel::io::slide_name(made("dicom/cmu-1").string() + "/"), "cmu-1");
  EXPECT_EQ(tessel::io::slide_stem(made("dicom/cmu-1").string() + "/"), "cmu-1");
  EXPECT_EQ(tessel::io::slide_stem(shared_slide("cmu-1-small-region.svs")), "cmu-1-small-region");
  EXPECT_EQ(tessel::io::slide_name(shared_slide("small.svs")), "small.svs");
}

TEST(OmeTiff, ItsPhysicalPixelSizeComesFromTheOmeXml) {
  // make_slides.py writes no TIFF resolution tags: the size is in the XML only.
  const Slide slide(made("ome/pyramid.ome.tif"));
  EXPECT_EQ(slide.vendor(), "generic-tiff");
  EXPECT_EQ(slide.level(0).width, 1500);
  EXPECT_EQ(slide.level(0).height, 1000);
  ASSERT_TRUE(slide.mpp_x() && slide.mpp_y());
  EXPECT_DOUBLE_EQ(*slide.mpp_x(), 0.25);
  EXPECT_DOUBLE_EQ(*slide.mpp_y(), 0.25);
  const CliRun run = run_cli("inspect " + made("ome/pyramid.ome.tif").string());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "mpp         0.25 × 0.25 µm")) << run.output;
}

// tifffile wrote levels 1 and 2 as level 0's every 2nd and 4th pixel (deflate: lossless), in
// SubIFDs, which OpenSlide 4 does not list; Slide reads them with libvips.
TEST(OmeTiff, ItsSubIfdPyramidLevelsAreLevels) {
  const Slide slide(made("ome/pyramid.ome.tif"));
  ASSERT_EQ(slide.level_count(), 3);
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{1500, 1000}, {750, 500}, {375, 250}};
  for (int level = 0; level < 3; ++level) {
    EXPECT_EQ(slide.level(level).width, sizes[static_cast<size_t>(level)].first);
    EXPECT_EQ(slide.level(level).height, sizes[static_cast<size_t>(level)].second);
    EXPECT_DOUBLE_EQ(slide.level(level).downsample, 1 << level);
  }
  const RgbImage level0 = slide.read_region(0, 0, 0, 1500, 1000);
  for (int level = 1; level < 3; ++level) {
    SCOPED_TRACE("level " + std::to_string(level));
    const int step = 1 << level;
    // Reaching 7 px past the level's left and bottom edges: the background shows there.
    const int64_t x = -7, y = 200 / step, width = 300, height = slide.level(level).height - y + 7;
    const tessel::io::Rgb background{1, 2, 3};
    const RgbImage image = slide.read_region(level, x, y, width, height, background);
    int64_t wrong = 0;
    for (int64_t row = 0; row < height; ++row) {
      for (int64_t col = 0; col < width; ++col) {
        const uint8_t* got = image.pixels.data() + 3 * (row * width + col);
        const int64_t lx = x + col, ly = y + row;
        if (lx < 0 || ly >= slide.level(level).height) {
          wrong += got[0] != 1 || got[1] != 2 || got[2] != 3;
          continue;
        }
        const uint8_t* want = level0.pixels.data() + 3 * (ly * step * 1500 + lx * step);
        wrong += !std::equal(got, got + 3, want);
      }
    }
    EXPECT_EQ(wrong, 0);
  }
  const CliRun run = run_cli("inspect " + made("ome/pyramid.ome.tif").string() + " --mpp 1");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const char* part : {"levels      3 ", "  level 2   375 × 250, downsample 4"}) {
    EXPECT_TRUE(contains(run.output, part)) << "missing \"" << part << "\" in:\n" << run.output;
  }
}

TEST(OmeTiff, XmlThatLiesAboutTheSizeIsAOneLineErrorNamingTheFile) {
  const CliRun run = run_cli("inspect " + made("ome/lying.ome.tif").string());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
  for (const std::string& part : {made("ome/lying.ome.tif").string(),
                                  std::string("its OME-XML says the image is 150000 × 100000 "
                                              "pixels, but it is 1500 × 1000")}) {
    EXPECT_TRUE(contains(run.output, part)) << run.output;
  }
}

// `tessel thumbnail --mask` on an OME-TIFF pyramid: the thumbnail, the mask and the overlay.
TEST(OmeTiff, AThumbnailWithItsTissueMaskIsWritten) {
  tessel::test::TempFolder folder;
  const fs::path png = folder.path() / "ome.png";
  const CliRun run = run_cli("thumbnail " + made("ome/pyramid.ome.tif").string() + " --out " +
                             png.string() + " --mask");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(fs::exists(png)) << run.output;
  EXPECT_TRUE(fs::exists(folder.path() / "ome.mask.png")) << run.output;
}

TEST(OmeXml, ReadsTheFirstPixelsSizeAndPhysicalSizeInItsUnit) {
  using tessel::io::read_ome_pixels;
  EXPECT_FALSE(read_ome_pixels("Aperio Image Library v10.0.50"));
  const auto pixels = read_ome_pixels(
      R"(<?xml version="1.0"?><OME xmlns="http://www.openmicroscopy.org/Schemas/OME/2016-06">)"
      R"(<Image ID="Image:0"><ome:Pixels DimensionOrder="XYCZT" ID="Pixels:0" SizeC="3" )"
      R"(SizeX="640" SizeY='480' PhysicalSizeX="250" PhysicalSizeXUnit="nm" )"
      R"(PhysicalSizeY="0.25"/></Image><Image><Pixels SizeX="2" SizeY="2"/></Image></OME>)");
  ASSERT_TRUE(pixels);
  EXPECT_EQ(pixels->size_x, 640);
  EXPECT_EQ(pixels->size_y, 480);
  ASSERT_TRUE(pixels->mpp_x && pixels->mpp_y);
  EXPECT_NEAR(*pixels->mpp_x, 0.25, 1e-12);
  EXPECT_NEAR(*pixels->mpp_y, 0.25, 1e-12);  // µm when no unit is given
  const auto no_size =
      read_ome_pixels(R"(<OME><Image><Pixels SizeX="64" SizeY="64"/></Image></OME>)");
  ASSERT_TRUE(no_size);
  EXPECT_FALSE(no_size->mpp_x);
}

TEST(OmeXml, RefusesXmlItCannotUseSayingWhy) {
  using tessel::io::read_ome_pixels;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"<OME><Image/></OME>", "no Pixels element"},
      {R"(<OME><Pixels SizeX="-3" SizeY="4"/></OME>)", "no whole number of pixels for SizeX"},
      {R"(<OME><Pixels SizeX="3" SizeY="4" PhysicalSizeX="0"/></OME>)", "not a positive number"},
      {R"(<OME><Pixels SizeX="3" SizeY="4" PhysicalSizeX="1" PhysicalSizeXUnit="pixel"/></OME>)",
       "not a length"},
  };
  for (const auto& [xml, why] : cases) {
    const std::string message = error_of([&] { read_ome_pixels(xml); });
    EXPECT_TRUE(contains(message, why)) << xml << "\n" << message;
  }
}

}  // namespace
