#include "io/roi.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "io/user_file.h"

namespace tessel::io {
namespace {

using nlohmann::json;

class Parser {
 public:
  explicit Parser(std::string source) : source_(std::move(source)) {}

  // Any GeoJSON object: FeatureCollection, Feature or geometry. `where` is its JSON path, `depth`
  // how many collections and features hold it: bounded, so that a hostile file cannot overflow
  // the stack (30000 nested GeometryCollections did) or build paths quadratic in its depth.
  void object(const json& value, const std::string& where, int depth = 0) {
    if (depth > kMaxDepth) {
      fail("objects nest more than " + std::to_string(kMaxDepth) +
           " levels deep (QuPath's exports nest 3); is this a region of interest?");
    }
    if (!value.is_object()) fail(where + " is not a JSON object");
    const auto type = value.find("type");
    if (type == value.end() || !type->is_string()) fail(where + " has no \"type\"");
    const std::string name = type->get<std::string>();
    if (name == "FeatureCollection") {
      const auto features = value.find("features");
      if (features == value.end() || !features->is_array()) {
        fail(where + " is a FeatureCollection without a \"features\" array");
      }
      for (size_t i = 0; i < features->size(); ++i) {
        object((*features)[i], where + ".features[" + std::to_string(i) + "]", depth + 1);
      }
    } else if (name == "Feature") {
      const auto geometry = value.find("geometry");
      // A Feature without geometry is legal GeoJSON (an unlocated annotation): nothing to add.
      if (geometry != value.end() && !geometry->is_null()) {
        object(*geometry, where + ".geometry", depth + 1);
      }
    } else if (name == "GeometryCollection") {
      const auto geometries = value.find("geometries");
      if (geometries == value.end() || !geometries->is_array()) {
        fail(where + " is a GeometryCollection without a \"geometries\" array");
      }
      for (size_t i = 0; i < geometries->size(); ++i) {
        object((*geometries)[i], where + ".geometries[" + std::to_string(i) + "]", depth + 1);
      }
    } else if (name == "Polygon") {
      polygons_.push_back(polygon(coordinates(value, where), where + ".coordinates"));
    } else if (name == "MultiPolygon") {
      const json& all = coordinates(value, where);
      for (size_t i = 0; i < all.size(); ++i) {
        polygons_.push_back(polygon(all[i], where + ".coordinates[" + std::to_string(i) + "]"));
      }
    }
    // Points, lines and unknown types carry no area to train on: ignored.
  }

  std::vector<Polygon> take() { return std::move(polygons_); }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("region of interest " + source_ + ": " + what);
  }

 private:
  const json& coordinates(const json& geometry, const std::string& where) const {
    const auto found = geometry.find("coordinates");
    if (found == geometry.end() || !found->is_array()) {
      fail(where + " has no \"coordinates\" array");
    }
    return *found;
  }

  Polygon polygon(const json& rings, const std::string& where) const {
    if (!rings.is_array() || rings.empty()) fail(where + " is not a non-empty array of rings");
    Polygon out;
    for (size_t i = 0; i < rings.size(); ++i) {
      std::vector<Point> points = ring(rings[i], where + "[" + std::to_string(i) + "]");
      if (i == 0) {
        out.exterior = std::move(points);
      } else {
        out.holes.push_back(std::move(points));
      }
    }
    return out;
  }

  std::vector<Point> ring(const json& value, const std::string& where) const {
    if (!value.is_array() || value.size() < 3) {
      fail(where + " is not a ring of at least 3 [x, y] points");
    }
    std::vector<Point> points;
    for (size_t i = 0; i < value.size(); ++i) {
      const json& p = value[i];
      const std::string at = where + "[" + std::to_string(i) + "]";
      if (!p.is_array() || p.size() < 2) fail(at + " is not an [x, y] point");
      if (!p[0].is_number() || !p[1].is_number()) {
        fail(at + " has coordinates that are not numbers: " + p.dump());
      }
      const Point point{p[0].get<double>(), p[1].get<double>()};
      if (!std::isfinite(point.x) || !std::isfinite(point.y)) fail(at + " is not finite");
      points.push_back(point);
    }
    return points;
  }

  static constexpr int kMaxDepth = 64;
  std::string source_;
  std::vector<Polygon> polygons_;
};

// A coordinate as a whole pixel, clamped far outside any slide (2^52 px) so that 1e300 is not
// cast to int64 (undefined behaviour) but still lies outside.
int64_t pixel(double v) {
  constexpr double kFar = 4503599627370496.0;
  return static_cast<int64_t>(std::clamp(v, -kFar, kFar));
}

std::string describe(const core::Region& r) {
  std::ostringstream out;
  out << "x " << r.x.begin << "–" << r.x.end << ", y " << r.y.begin << "–" << r.y.end;
  return out.str();
}

}  // namespace

RegionOfInterest parse_roi(const std::string& geojson, const std::string& source,
                           int64_t slide_width, int64_t slide_height) {
  Parser parser(source);
  json document;
  try {
    document = json::parse(geojson);
  } catch (const json::exception& e) {  // parse_error; out_of_range for a number like 1e400
    parser.fail(std::string("not JSON (") + e.what() + ")");
  }
  parser.object(document, "the document");
  RegionOfInterest roi;
  roi.polygons = parser.take();
  if (roi.polygons.empty()) {
    parser.fail("holds no Polygon or MultiPolygon geometry; export the annotations as GeoJSON");
  }
  double x0 = std::numeric_limits<double>::infinity(), y0 = x0, x1 = -x0, y1 = -x0;
  for (const Polygon& polygon : roi.polygons) {
    for (const Point& p : polygon.exterior) {
      x0 = std::min(x0, p.x), x1 = std::max(x1, p.x);
      y0 = std::min(y0, p.y), y1 = std::max(y1, p.y);
    }
  }
  if (!(x1 > x0) || !(y1 > y0)) {
    parser.fail("its polygons have no area (all within x " + std::to_string(x0) + "–" +
                std::to_string(x1) + ", y " + std::to_string(y0) + "–" + std::to_string(y1) +
                "); draw a region, not a line or a point");
  }
  // Outward to whole pixels, so every pixel the polygons touch is inside.
  const core::Region unclipped{{pixel(std::floor(y0)), pixel(std::ceil(y1))},
                               {pixel(std::floor(x0)), pixel(std::ceil(x1))}};
  const core::Region slide{{0, slide_height}, {0, slide_width}};
  roi.bbox = core::intersect(unclipped, slide);
  if (roi.bbox.empty()) {
    parser.fail("its bounding box (" + describe(unclipped) + ") lies outside the slide (" +
                std::to_string(slide_width) + " × " + std::to_string(slide_height) +
                " level-0 pixels); was it drawn on another slide?");
  }
  return roi;
}

RegionOfInterest read_roi(const std::filesystem::path& path, int64_t slide_width,
                          int64_t slide_height) {
  const std::string text =
      read_user_file(path, "region of interest " + path.string() + ": ", kMaxTextFileBytes);
  return parse_roi(text, path.string(), slide_width, slide_height);
}

core::Region training_region(const std::string& slide, int64_t slide_width, int64_t slide_height,
                             const std::optional<core::Region>& tissue_bbox,
                             const std::optional<core::Region>& roi_bbox) {
  core::Region region{{0, slide_height}, {0, slide_width}};
  if (tissue_bbox) {
    if (tissue_bbox->empty()) {
      throw Error("slide " + slide + ": no tissue found; check its thumbnail (tessel thumbnail " +
                  "--mask) or train on the whole slide");
    }
    region = core::intersect(region, *tissue_bbox);
  }
  if (roi_bbox) {
    const core::Region narrowed = core::intersect(region, *roi_bbox);
    if (narrowed.empty()) {
      throw Error("slide " + slide + ": the region of interest (" + describe(*roi_bbox) +
                  ") does not overlap the " + (tissue_bbox ? "tissue (" : "slide (") +
                  describe(region) + ")");
    }
    region = narrowed;
  }
  return region;
}

namespace {

// Where the rings of `polygon` cross the horizontal line at `y`, sorted: between the first and
// second crossing, the third and fourth … the line is inside (even-odd: the holes cut out).
std::vector<double> crossings(const Polygon& polygon, double y) {
  std::vector<double> xs;
  const auto ring = [&](const std::vector<Point>& points) {
    const size_t n = points.size();
    for (size_t i = 0; i < n; ++i) {
      const Point& p = points[i];
      const Point& q = points[(i + 1) % n];
      if ((p.y <= y) == (q.y <= y)) continue;  // a closing repeat of the first point too
      xs.push_back(p.x + (y - p.y) * (q.x - p.x) / (q.y - p.y));
    }
  };
  ring(polygon.exterior);
  for (const auto& hole : polygon.holes) ring(hole);
  std::sort(xs.begin(), xs.end());
  return xs;
}

}  // namespace

std::vector<uint8_t> rasterise(const RegionOfInterest& roi, int64_t width, int64_t height,
                               double cell_x, double cell_y) {
  if (width < 0 || height < 0 || !(cell_x > 0) || !(cell_y > 0)) {
    throw Error("rasterise: a mask of " + std::to_string(width) + "x" + std::to_string(height) +
                " cells needs cells of positive size");
  }
  std::vector<uint8_t> mask(static_cast<size_t>(width * height), 0);
  // Cell x's centre is at (x + 0.5)·cell_x: the cells whose centres lie in [a, b).
  const auto first_cell = [&](double v) {
    return std::clamp<double>(std::ceil(v / cell_x - 0.5), 0, static_cast<double>(width));
  };
  for (int64_t row = 0; row < height; ++row) {
    const double y = (static_cast<double>(row) + 0.5) * cell_y;
    uint8_t* line = mask.data() + row * width;
    for (const Polygon& polygon : roi.polygons) {
      const std::vector<double> xs = crossings(polygon, y);
      for (size_t i = 0; i + 1 < xs.size(); i += 2) {
        const auto from = static_cast<int64_t>(first_cell(xs[i]));
        const auto to = static_cast<int64_t>(first_cell(xs[i + 1]));
        std::fill(line + from, line + std::max(from, to), uint8_t{1});
      }
    }
  }
  return mask;
}

}  // namespace tessel::io
