// Heatmaps over a slide, in the three forms users open: a pyramidal TIFF the size of the slide's
// level 0 (viewers open it beside the slide, pixel for pixel), a PNG of the slide's thumbnail
// with the heatmap blended over it and a colour legend, and GeoJSON tiles with a score per class
// that QuPath imports as detection objects and colours as a measurement map.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/graph/window.h"
#include "io/slide.h"
#include "io/tissue.h"

namespace tessel::io {

// Scores on a grid of cells over a slide: cell (row, col) covers level-0 pixels
// [origin_y + row·cell_height, +cell_height) × [origin_x + col·cell_width, +cell_width).
// Each map has a name: a class (its score), or an attention map ("attention", or
// "attention:<class>" for a network with one attention branch per class).
struct Heatmap {
  int64_t rows = 0, cols = 0;
  double origin_x = 0, origin_y = 0;          // level-0 pixels
  double cell_width = 1, cell_height = 1;     // level-0 pixels per cell
  std::vector<std::string> classes;           // the maps' names: one score map per class, ...
  std::vector<std::vector<float>> scores;     // [map][row · cols + col], in [0, 1]
  int64_t slide_width = 0, slide_height = 0;  // level 0
  // Per cell, whether it lies on tissue (the slide's tissue mask): glass cells are left out of
  // the overlay and the GeoJSON, and black in the TIFF. Empty: every cell is tissue.
  std::vector<uint8_t> tissue;

  const std::vector<float>& of(const std::string& class_name) const;  // throws if unknown
  core::Region cell(int64_t row, int64_t col) const;                  // level-0 pixels
  bool on_tissue(int64_t row, int64_t col) const {
    return tissue.empty() || tissue[static_cast<size_t>(row * cols + col)] != 0;
  }
};

// Marks the cells of `heatmap` that meet tissue in `mask` (any mask pixel of the cell). A mask
// without tissue marks every cell (nothing found is not a reason to show nothing).
void mark_tissue(Heatmap& heatmap, const TissueMask& mask);

// The "turbo" colour map (Mikhailov 2019, polynomial fit): 0 dark blue → 1 dark red.
std::array<uint8_t, 3> turbo(float value);

// A pyramidal, tiled, deflate-compressed RGB TIFF of level-0 size: each cell filled with the
// colour of `class_name`'s score, black outside the cells and on glass; the slide's mpp as
// resolution.
void write_heatmap_tiff(const std::filesystem::path& path, const Heatmap& heatmap,
                        const std::string& class_name, std::optional<double> mpp);

// The thumbnail (`max_side` px) with the score map blended over it (opacity ∝ score, at most
// `opacity`; nothing over glass), and a colour bar labelled 0 … 1 with the class name (or
// "attention / max" for an attention map).
void write_heatmap_overlay(const std::filesystem::path& path, const Slide& slide,
                           const Heatmap& heatmap, const std::string& class_name,
                           int64_t max_side = 1024, double opacity = 0.6);

// A GeoJSON FeatureCollection: one Polygon feature per tile on tissue with properties
// {"objectType": "tile", "measurements": {"<map>": score, ...}}. A tile is one cell, or the
// mean of k×k cells when the map has more than `max_tiles` cells (QuPath slows down with
// hundreds of thousands of objects; a stride-4 network on a small slide makes that many).
void write_heatmap_geojson(const std::filesystem::path& path, const Heatmap& heatmap,
                           int64_t max_tiles = 40'000);

// The map with k×k cells averaged into one (the last row and column of tiles may average fewer);
// a coarse cell is on tissue when one of its cells is.
Heatmap coarsened(const Heatmap& heatmap, int64_t k);

}  // namespace tessel::io
