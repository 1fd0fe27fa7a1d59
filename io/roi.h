// Regions of interest: polygons drawn on a slide (a GeoJSON export of QuPath annotations) that
// restrict training to their bounding box, and the level-0 rectangle to train on when a tissue
// mask, a region of interest, both or neither restrict it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/graph/window.h"

namespace tessel::io {

struct Point {
  double x = 0.0, y = 0.0;  // level-0 pixels
};

struct Polygon {
  std::vector<Point> exterior;
  std::vector<std::vector<Point>> holes;  // kept, but inside the exterior: no effect on a bbox
};

struct RegionOfInterest {
  std::vector<Polygon> polygons;
  core::Region bbox;  // of all exteriors, level-0 pixels, clipped to the slide; never empty
};

// Reads a GeoJSON FeatureCollection, Feature or bare geometry whose Polygon and MultiPolygon
// geometries (GeometryCollections searched too; points and lines ignored) are in level-0 pixels,
// as QuPath exports them. Throws tessel::Error naming the file when it is not JSON, holds no
// polygon, has coordinates that are not numbers, or lies wholly outside the slide.
RegionOfInterest read_roi(const std::filesystem::path& path, int64_t slide_width,
                          int64_t slide_height);
// The same from GeoJSON text; `source` names it in errors.
RegionOfInterest parse_roi(const std::string& geojson, const std::string& source,
                           int64_t slide_width, int64_t slide_height);

// The level-0 rectangle to train on: the whole slide, narrowed to the tissue bounding box and to
// the region of interest's bounding box when given (their intersection when both). Throws
// tessel::Error naming `slide` when no tissue was found or the two boxes do not overlap.
core::Region training_region(const std::string& slide, int64_t slide_width, int64_t slide_height,
                             const std::optional<core::Region>& tissue_bbox,
                             const std::optional<core::Region>& roi_bbox);

}  // namespace tessel::io
