// Regions of interest from GeoJSON as QuPath exports them, their errors, and the training region.
#include "io/roi.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace tessel::io {
namespace {

constexpr int64_t kWidth = 2220, kHeight = 2967;  // cmu-1-small-region.svs

// What QuPath 0.4's "Export objects as GeoJSON" writes for one rectangle annotation with a hole.
const char* kQuPathExport = R"({
  "type": "FeatureCollection",
  "features": [
    {
      "type": "Feature",
      "id": "c1a2b3",
      "geometry": {
        "type": "Polygon",
        "coordinates": [
          [[100.5, 200], [900, 200], [900, 1200.25], [100.5, 1200.25], [100.5, 200]],
          [[300, 400], [2000, 400], [2000, 2900], [300, 400]]
        ]
      },
      "properties": {"objectType": "annotation", "classification": {"name": "Tumor"}}
    },
    {
      "type": "Feature",
      "geometry": {"type": "Point", "coordinates": [5, 5]},
      "properties": {"objectType": "annotation"}
    }
  ]
})";

std::string error_of(const std::string& geojson, int64_t width = kWidth, int64_t height = kHeight) {
  try {
    parse_roi(geojson, "roi.geojson", width, height);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(RegionOfInterest, ReadsAQuPathFeatureCollectionAndIgnoresHolesAndPoints) {
  const RegionOfInterest roi = parse_roi(kQuPathExport, "roi.geojson", kWidth, kHeight);
  ASSERT_EQ(roi.polygons.size(), 1U);
  EXPECT_EQ(roi.polygons[0].exterior.size(), 5U);
  EXPECT_EQ(roi.polygons[0].holes.size(), 1U);
  // Outward to whole pixels; the hole (which even pokes outside) does not widen the box.
  EXPECT_EQ(roi.bbox, (core::Region{{200, 1201}, {100, 900}}));
}

TEST(RegionOfInterest, ReadsASingleFeature) {
  const RegionOfInterest roi = parse_roi(
      R"({"type": "Feature", "properties": {}, "geometry": {"type": "Polygon",
          "coordinates": [[[10, 20], [30, 20], [30, 40], [10, 20]]]}})",
      "f.geojson", kWidth, kHeight);
  EXPECT_EQ(roi.bbox, (core::Region{{20, 40}, {10, 30}}));
}

TEST(RegionOfInterest, ReadsABarePolygon) {
  const RegionOfInterest roi =
      parse_roi(R"({"type": "Polygon", "coordinates": [[[1, 2], [3, 2], [3, 4], [1, 2]]]})",
                "p.geojson", kWidth, kHeight);
  EXPECT_EQ(roi.bbox, (core::Region{{2, 4}, {1, 3}}));
}

TEST(RegionOfInterest, ReadsAMultiPolygonAsTheBoxOfAllItsParts) {
  const RegionOfInterest roi = parse_roi(
      R"({"type": "MultiPolygon", "coordinates": [
            [[[10, 10], [20, 10], [20, 20], [10, 10]]],
            [[[500, 600], [700, 600], [700, 800], [500, 600]], [[550, 650], [560, 650], [560, 660]]]
          ]})",
      "m.geojson", kWidth, kHeight);
  ASSERT_EQ(roi.polygons.size(), 2U);
  EXPECT_EQ(roi.polygons[1].holes.size(), 1U);
  EXPECT_EQ(roi.bbox, (core::Region{{10, 800}, {10, 700}}));
}

TEST(RegionOfInterest, ClipsItsBoxToTheSlide) {
  const RegionOfInterest roi = parse_roi(
      R"({"type": "Polygon", "coordinates": [[[-50, 2000], [3000, 2000], [3000, 4000], [-50, 2000]]]})",
      "c.geojson", kWidth, kHeight);
  EXPECT_EQ(roi.bbox, (core::Region{{2000, kHeight}, {0, kWidth}}));
}

TEST(RegionOfInterest, ReadsAFileAndNamesItInErrors) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("tessel_roi_test_" + std::to_string(getpid()) + ".geojson");
  std::ofstream(path) << kQuPathExport;
  EXPECT_EQ(read_roi(path, kWidth, kHeight).bbox, (core::Region{{200, 1201}, {100, 900}}));
  std::ofstream(path) << "{\"type\": \"FeatureCollection\", \"features\": []}";
  try {
    read_roi(path, kWidth, kHeight);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), path.string())) << e.what();
    EXPECT_TRUE(contains(e.what(), "no Polygon or MultiPolygon")) << e.what();
  }
  std::filesystem::remove(path);
  try {
    read_roi(path, kWidth, kHeight);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), path.string() + ": no such file")) << e.what();
  }
}

TEST(RegionOfInterest, RefusesTextThatIsNotJson) {
  const std::string error = error_of("Name\tClass\nTumor\t1\n");
  EXPECT_TRUE(contains(error, "region of interest roi.geojson: not JSON")) << error;
  // A number beyond a double's range: nlohmann's out_of_range, not a parse_error (found by
  // tests/fuzz).
  const std::string overflow =
      error_of(R"({"type": "Polygon", "coordinates": [[[1e400, 0], [1, 0], [1, 1]]]})");
  EXPECT_TRUE(contains(overflow, "not JSON")) << overflow;
}

TEST(RegionOfInterest, RefusesJsonWithoutAPolygon) {
  EXPECT_TRUE(contains(error_of(R"({"type": "Point", "coordinates": [1, 2]})"),
                       "no Polygon or MultiPolygon"));
  EXPECT_TRUE(contains(error_of(R"([1, 2, 3])"), "the document is not a JSON object"));
  EXPECT_TRUE(contains(error_of(R"({"features": []})"), "the document has no \"type\""));
}

TEST(RegionOfInterest, RefusesCoordinatesThatAreNotNumbersAndSaysWhere) {
  const std::string error = error_of(
      R"({"type": "FeatureCollection", "features": [{"type": "Feature", "geometry":
          {"type": "Polygon", "coordinates": [[[1, 2], ["3", 2], [3, 4], [1, 2]]]}}]})");
  EXPECT_TRUE(contains(error,
                       "the document.features[0].geometry.coordinates[0][1] has "
                       "coordinates that are not numbers: [\"3\",2]"))
      << error;
}

TEST(RegionOfInterest, RefusesRingsTooShortToEncloseAnything) {
  const std::string error = error_of(R"({"type": "Polygon", "coordinates": [[[1, 2], [3, 4]]]})");
  EXPECT_TRUE(contains(error, "is not a ring of at least 3 [x, y] points")) << error;
}

TEST(RegionOfInterest, RefusesABoxOutsideTheSlide) {
  const std::string error = error_of(
      R"({"type": "Polygon", "coordinates": [[[5000, 5000], [6000, 5000], [6000, 6000], [5000, 5000]]]})");
  EXPECT_TRUE(contains(error, "lies outside the slide (2220 × 2967 level-0 pixels)")) << error;
}

// Found by fuzzing (issue 18): 30000 nested GeometryCollections overflowed the stack after
// building gigabytes of path strings.
TEST(RegionOfInterest, RefusesObjectsNestedDeeperThanAnyExportWithoutCrashing) {
  const std::string polygon =
      R"({"type": "Polygon", "coordinates": [[[10, 10], [20, 10], [20, 20], [10, 10]]]})";
  std::string deep;
  for (int i = 0; i < 30000; ++i) deep += R"({"type": "GeometryCollection", "geometries": [)";
  deep += polygon;
  for (int i = 0; i < 30000; ++i) deep += "]}";
  EXPECT_TRUE(contains(error_of(deep), "nest more than 64 levels")) << error_of(deep);
  std::string shallow;  // 10 levels are odd but fine
  for (int i = 0; i < 10; ++i) shallow += R"({"type": "GeometryCollection", "geometries": [)";
  shallow += polygon;
  for (int i = 0; i < 10; ++i) shallow += "]}";
  EXPECT_EQ(error_of(shallow), "no error");
}

TEST(RegionOfInterest, SaysAPolygonWithoutAreaHasNoAreaAndClampsHugeCoordinates) {
  const std::string flat =
      R"({"type": "Polygon", "coordinates": [[[10, 10], [20, 10], [30, 10], [10, 10]]]})";
  EXPECT_TRUE(contains(error_of(flat), "have no area")) << error_of(flat);
  const std::string huge =
      R"({"type": "Polygon", "coordinates": [[[1e300, 1e19], [2e300, 1e19], [2e300, 3e300], [1e300, 1e19]]]})";
  EXPECT_TRUE(contains(error_of(huge), "lies outside the slide")) << error_of(huge);
}

TEST(TrainingRegion, IsTheWholeSlideWhenNothingNarrowsIt) {
  EXPECT_EQ(training_region("s.svs", 100, 50, std::nullopt, std::nullopt),
            (core::Region{{0, 50}, {0, 100}}));
}

TEST(TrainingRegion, IsTheTissueBoxOrTheRegionOfInterestBox) {
  const core::Region tissue{{10, 40}, {20, 90}}, roi{{0, 30}, {50, 100}};
  EXPECT_EQ(training_region("s.svs", 100, 50, tissue, std::nullopt), tissue);
  EXPECT_EQ(training_region("s.svs", 100, 50, std::nullopt, roi), roi);
}

TEST(TrainingRegion, IsTheIntersectionWhenBothAreGiven) {
  const core::Region tissue{{10, 40}, {20, 90}}, roi{{0, 30}, {50, 100}};
  EXPECT_EQ(training_region("s.svs", 100, 50, tissue, roi), (core::Region{{10, 30}, {50, 90}}));
}

TEST(TrainingRegion, RefusesASlideWithoutTissueAndBoxesThatDoNotOverlap) {
  try {
    training_region("s.svs", 100, 50, core::Region{}, std::nullopt);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "slide s.svs: no tissue found")) << e.what();
  }
  try {
    training_region("s.svs", 100, 50, core::Region{{0, 10}, {0, 10}},
                    core::Region{{20, 30}, {20, 30}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "does not overlap the tissue")) << e.what();
  }
}

// ---- The polygons as a mask ----

Polygon rectangle(double x0, double y0, double x1, double y1) {
  return {{{x0, y0}, {x1, y0}, {x1, y1}, {x0, y1}, {x0, y0}}, {}};
}

int64_t inside(const std::vector<uint8_t>& mask) {
  return std::count(mask.begin(), mask.end(), uint8_t{1});
}

TEST(Rasterise, ACellIsInsideWhenItsCentreIs) {
  RegionOfInterest roi;
  roi.polygons = {rectangle(10, 20, 30, 25)};
  const std::vector<uint8_t> mask = rasterise(roi, 40, 40, 1, 1);
  EXPECT_EQ(inside(mask), 20 * 5);
  EXPECT_EQ(mask[20 * 40 + 10], 1);  // centre (10.5, 20.5)
  EXPECT_EQ(mask[20 * 40 + 9], 0);
  EXPECT_EQ(mask[24 * 40 + 29], 1);
  EXPECT_EQ(mask[24 * 40 + 30], 0);
  EXPECT_EQ(mask[25 * 40 + 29], 0);
  // Half-pixel edges: a cell whose centre lies exactly on the left edge is in, on the right out.
  roi.polygons = {rectangle(10.5, 0, 12.5, 1)};
  const std::vector<uint8_t> half = rasterise(roi, 20, 1, 1, 1);
  EXPECT_EQ(std::vector<uint8_t>(half.begin() + 9, half.begin() + 14),
            (std::vector<uint8_t>{0, 1, 1, 0, 0}));
}

TEST(Rasterise, HolesAreCutOutAndPolygonsUnite) {
  RegionOfInterest roi;
  Polygon framed = rectangle(0, 0, 100, 100);
  framed.holes.push_back(rectangle(25, 25, 75, 75).exterior);
  roi.polygons = {framed};
  EXPECT_EQ(inside(rasterise(roi, 100, 100, 1, 1)), 100 * 100 - 50 * 50);
  // A second polygon overlapping the first and filling its hole: the union, not an even-odd
  // over all polygons.
  roi.polygons.push_back(rectangle(20, 20, 80, 80));
  EXPECT_EQ(inside(rasterise(roi, 100, 100, 1, 1)), 100 * 100);
}

TEST(Rasterise, CoarseCellsAndPolygonsPastTheMaskEdge) {
  RegionOfInterest roi;
  roi.polygons = {rectangle(-50, -50, 95, 1e9)};  // off the mask to the left, top and bottom
  // Cells of 10 × 20 level-0 pixels: columns 0–8 have their centres (5 … 85) inside.
  const std::vector<uint8_t> mask = rasterise(roi, 12, 7, 10, 20);
  EXPECT_EQ(inside(mask), 9 * 7);
  EXPECT_EQ(mask[8], 1);
  EXPECT_EQ(mask[9], 0);
}

TEST(Rasterise, ATriangleCoversHalfItsBoxAndAnUnclosedRingCloses) {
  RegionOfInterest roi;
  roi.polygons = {Polygon{{{0, 0}, {200, 0}, {0, 200}}, {}}};  // no closing repeat
  const double area = static_cast<double>(inside(rasterise(roi, 200, 200, 1, 1)));
  EXPECT_NEAR(area, 200.0 * 200.0 / 2, 200.0);  // within a pixel along the diagonal
  EXPECT_THROW(rasterise(roi, 10, 10, 0, 1), Error);
}

}  // namespace
}  // namespace tessel::io
