// Regions of interest: polygons drawn on a slide (a GeoJSON export of QuPath annotations) that
// restrict training to themselves: the image is cropped to their bounding box and what lies
// outside them within it is background (pipelines/slide_input.cpp); the level-0 rectangle to train
// on when a tissue mask, a region of interest, both or neither restrict it; and the polygons as a
// mask.
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
  std::vector<std::vector<Point>> holes;  // inside the exterior: no effect on the bbox
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

// The polygons as a mask of `width` × `height` cells over level 0, cell (x, y) covering level-0
// pixels [x·cell_x, (x+1)·cell_x) × [y·cell_y, (y+1)·cell_y). A cell is inside (1, else 0) when
// its centre is: inside some polygon's exterior and in none of that polygon's holes (each
// polygon by the even-odd rule over its rings, the polygons' union). Row-major.
std::vector<uint8_t> rasterise(const RegionOfInterest& roi, int64_t width, int64_t height,
                               double cell_x, double cell_y);

}  // namespace tessel::io
