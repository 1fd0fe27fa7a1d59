// Heatmap files: the TIFF is level-0 sized with each cell one colour, GeoJSON tiles carry every
// class's score and are coarsened past a tile limit, and coarsening averages cells.
#include "io/heatmap_writer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vips/vips8>

#include "core/error.h"
#include "io/thumbnail.h"
#include "io/vips.h"
#include "temp_folder.h"
#include "tests/run_cli.h"

namespace tessel::io {
namespace {

// A 5×7 map of cells of 10×12 level-0 pixels starting at (x 4, y 6) on a 100×80 slide.
Heatmap sample_map() {
  Heatmap h;
  h.rows = 5;
  h.cols = 7;
  h.origin_x = 4;
  h.origin_y = 6;
  h.cell_width = 12;
  h.cell_height = 10;
  h.slide_width = 100;
  h.slide_height = 80;
  h.classes = {"normal", "tumour"};
  std::vector<float> tumour;
  for (int64_t i = 0; i < h.rows * h.cols; ++i) tumour.push_back(static_cast<float>(i) / 34.0F);
  std::vector<float> normal;
  for (float t : tumour) normal.push_back(1.0F - t);
  h.scores = {normal, tumour};
  return h;
}

TEST(HeatmapWriter, TiffIsLevelZeroSizedWithOneColourPerCell) {
  const test::TempFolder folder;
  const Heatmap h = sample_map();
  write_heatmap_tiff(folder.path() / "h.tif", h, "tumour", 0.5);
  start_vips();
  vips::VImage image = vips::VImage::new_from_file((folder.path() / "h.tif").c_str());
  EXPECT_EQ(image.width(), 100);
  EXPECT_EQ(image.height(), 80);
  EXPECT_NEAR(image.xres(), 2000.0, 1e-6);  // pixels per mm at 0.5 µm per pixel
  // Cell (row 2, col 3) covers x [40, 52), y [26, 36); outside the cells is black.
  const auto colour = turbo(h.scores[1][2 * 7 + 3]);
  for (const auto& [x, y] : {std::pair{40, 26}, std::pair{51, 35}, std::pair{45, 30}}) {
    const std::vector<double> pixel = image.getpoint(x, y);
    for (size_t c = 0; c < 3; ++c) EXPECT_EQ(pixel[c], colour[c]) << x << "," << y;
  }
  EXPECT_EQ(image.getpoint(2, 2), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(image.getpoint(95, 75), (std::vector<double>{0, 0, 0}));
  EXPECT_THROW(write_heatmap_tiff(folder.path() / "x.tif", h, "fibrosis", {}), Error);
}

// QuPath and ASAP overlay the heatmap by its TIFF resolution: read back by tifffile (not libvips,
// which wrote it), level 0 says the slide's scale in centimetres.
TEST(HeatmapWriter, TiffCarriesTheSlidesMppAsTifffileReadsIt) {
  const test::TempFolder folder;
  write_heatmap_tiff(folder.path() / "h.tif", sample_map(), "tumour", 0.25);
  const std::string script =
      "import sys, tifffile\n"
      "page = tifffile.TiffFile(sys.argv[1]).pages[0]\n"
      "x, y = page.tags['XResolution'].value, page.tags['YResolution'].value\n"
      "print(page.shape[1], page.shape[0], int(page.tags['ResolutionUnit'].value),\n"
      "      1e4 * x[1] / x[0], 1e4 * y[1] / y[0])\n";
  std::ofstream(folder.path() / "resolution.py") << script;
  const testing::CliRun run = testing::run_command(std::string(TESSEL_PYTHON) + " " +
                                                   (folder.path() / "resolution.py").string() +
                                                   " " + (folder.path() / "h.tif").string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::istringstream values(run.output);
  int width = 0, height = 0, unit = 0;
  double mpp_x = 0, mpp_y = 0;
  ASSERT_TRUE(values >> width >> height >> unit >> mpp_x >> mpp_y) << run.output;
  EXPECT_EQ(width, 100);
  EXPECT_EQ(height, 80);
  EXPECT_EQ(unit, 3) << "ResolutionUnit: centimetre";
  EXPECT_NEAR(mpp_x, 0.25, 1e-6) << run.output;
  EXPECT_NEAR(mpp_y, 0.25, 1e-6) << run.output;
}

// Issue 51: onto a full disk, libvips' tiffsave crashed (SIGSEGV in TIFFClose) and left a 0-byte
// partial file. A partial file that is /dev/full is a disk that fills at the first byte.
TEST(HeatmapWriter, AFullDiskIsAnErrorNamingTheFileAndLeavesNothing) {
  const test::TempFolder folder;
  Heatmap h = sample_map();
  h.cell_width = h.cell_height = 400;  // 2804 × 2006 px: a pyramid of several levels
  h.slide_width = h.origin_x + 7 * 400;
  h.slide_height = h.origin_y + 5 * 400;
  const auto tif = folder.path() / "h.tif";
  write_heatmap_tiff(tif, h, "tumour", 0.5);
  start_vips();
  EXPECT_GT(vips::VImage::new_from_file(tif.c_str()).get_int("n-pages"), 1);  // a pyramid

  const auto png = folder.path() / "h.png";
  for (const auto& [file, write] :
       {std::pair<std::filesystem::path, std::function<void()>>{
            folder.path() / "full.tif",
            [&] { write_heatmap_tiff(folder.path() / "full.tif", h, "tumour", 0.5); }},
        {png, [&] {
           const std::vector<uint8_t> pixels(3 * 64 * 64, 128);
           save_png(pixels.data(), 64, 64, 3, png);
         }}}) {
    SCOPED_TRACE(file.string());
    std::filesystem::path partial = file;
    partial += ".partial";
    std::filesystem::create_symlink("/dev/full", partial);
    try {
      write();
      ADD_FAILURE() << "written onto a full disk";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(file.string()), std::string::npos) << message;
      EXPECT_NE(message.find("(the disk is full)"), std::string::npos) << message;
    }
    EXPECT_FALSE(std::filesystem::exists(file));
    EXPECT_FALSE(std::filesystem::is_symlink(partial));
  }
}

TEST(HeatmapWriter, CoarseningAveragesBlocksOfCells) {
  const Heatmap h = sample_map();
  const Heatmap c = coarsened(h, 2);
  EXPECT_EQ(c.rows, 3);
  EXPECT_EQ(c.cols, 4);
  EXPECT_DOUBLE_EQ(c.cell_width, 24);
  const auto t = [&](int64_t r, int64_t q) { return h.scores[1][static_cast<size_t>(r * 7 + q)]; };
  EXPECT_FLOAT_EQ(c.scores[1][0], (t(0, 0) + t(0, 1) + t(1, 0) + t(1, 1)) / 4);
  EXPECT_FLOAT_EQ(c.scores[1][2 * 4 + 3], t(4, 6));  // the corner block holds one cell
}

TEST(HeatmapWriter, GeoJsonHasATilePerCellWithEveryClassAndRespectsTheTileLimit) {
  const test::TempFolder folder;
  const Heatmap h = sample_map();
  write_heatmap_geojson(folder.path() / "h.geojson", h);
  nlohmann::json j = nlohmann::json::parse(std::ifstream(folder.path() / "h.geojson"));
  ASSERT_EQ(j["features"].size(), 35U);
  const nlohmann::json& f = j["features"][7 + 2];  // row 1, col 2
  EXPECT_EQ(f["properties"]["objectType"], "tile");
  EXPECT_FLOAT_EQ(f["properties"]["measurements"]["tumour"].get<float>(), h.scores[1][9]);
  EXPECT_FLOAT_EQ(f["properties"]["measurements"]["normal"].get<float>(), h.scores[0][9]);
  EXPECT_EQ(f["geometry"]["coordinates"][0][0], (std::vector<int64_t>{28, 16}));
  EXPECT_EQ(f["geometry"]["coordinates"][0][2], (std::vector<int64_t>{40, 26}));

  write_heatmap_geojson(folder.path() / "c.geojson", h, 10);  // 35 cells > 10: 2×2 blocks
  j = nlohmann::json::parse(std::ifstream(folder.path() / "c.geojson"));
  ASSERT_EQ(j["features"].size(), 12U);
  // The last tile stops at the map's edge (x 4 + 7·12 = 88, y 6 + 5·10 = 56).
  EXPECT_EQ(j["features"][11]["geometry"]["coordinates"][0][2], (std::vector<int64_t>{88, 56}));
}

TEST(HeatmapWriter, TurboRunsFromBlueToRed) {
  const auto blue = turbo(0.15F), red = turbo(0.9F);
  EXPECT_GT(blue[2], 2 * blue[0]);
  EXPECT_GT(red[0], 2 * red[2]);
  EXPECT_EQ(turbo(-1.0F), turbo(0.0F));  // clamped
  EXPECT_EQ(turbo(2.0F), turbo(1.0F));
}

}  // namespace
}  // namespace tessel::io
