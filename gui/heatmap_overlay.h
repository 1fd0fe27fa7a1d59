// A checkpoint's heatmap over a slide as the viewer draws it: pipelines::make_heatmap (which also
// writes the TIFF, PNG and GeoJSON into a folder the user chose), its score map as a turbo-coloured
// image of one pixel per cell, the scores themselves for the readout under the cursor, and where
// that image lies in level-0 pixels. Or a heatmap TIFF written earlier (`tessel heatmap`, or the
// GUI), read back. Slow: call off the UI thread.
#pragma once

#include <QImage>
#include <QPointF>
#include <QPolygonF>
#include <QRectF>
#include <QString>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "pipelines/train.h"

namespace tessel::gui {

struct HeatmapOverlay {
  QImage image;   // cols × rows, ARGB32, io::turbo of the drawn map; transparent on glass
  QRectF level0;  // the cells' extent over the slide
  QString class_name;
  std::filesystem::path png;  // the overlay PNG make_heatmap wrote; empty for a loaded TIFF
  // Per image pixel (row-major, image.width() per row), the drawn map's score in [0, 1]; NaN on
  // glass and outside the cells. A loaded TIFF's are its colours read back through the turbo map
  // (to within 1/255: `approximate`).
  std::vector<float> scores;
  bool approximate = false;

  // The score of the cell under a level-0 point; none off the cells or on glass.
  std::optional<float> score_at(QPointF level0_point) const;
};

struct HeatmapOrder {
  std::filesystem::path checkpoint, slide, out_dir;
  // µm per level-0 pixel entered for a slide whose file has none (SlideView::set_mpp).
  std::optional<double> base_mpp;
  pipelines::TrainObserver* observer = nullptr;  // tiles as they run; may throw to cancel
};

// Writes <slide stem>.heatmap.tif, .png and .geojson into `out_dir`, replacing those there.
// Throws tessel::Error naming the checkpoint or slide that cannot be used; for a slide without
// mpp under a checkpoint trained at an mpp or magnification, the message says to Set mpp….
HeatmapOverlay compute_heatmap_overlay(const HeatmapOrder& order);

// A heatmap TIFF (io::write_heatmap_tiff: level-0 size, black off the cells and on glass) read
// back at a level of at most ~`max_side` px a side, over a slide of level-0 size
// `slide_width` × `slide_height`. Throws tessel::Error naming the file when it cannot be read or
// is not the slide's size (a heatmap of another slide).
HeatmapOverlay load_heatmap_tiff(const std::filesystem::path& tiff, int64_t slide_width,
                                 int64_t slide_height, int max_side = 2048);

// The turbo colour map inverted: the score whose io::turbo colour is nearest `rgb`; none for
// black (glass in a heatmap TIFF) or a colour far from the map.
std::optional<float> score_of_turbo(QRgb rgb);

// The outlines of the cells whose score is at least `threshold` (glass and cells without a
// score left out), in level-0 pixels: each region's outer boundary along its cells' edges, its
// corners only, regions that touch only at a corner apart (4-connected). Holes inside a region
// are not outlined (an annotation is one outline). Largest first.
std::vector<QPolygonF> threshold_outlines(const HeatmapOverlay& overlay, float threshold);

// The legend's colour bar: io::turbo from 0 (left) to 1 (right), `width` × `height` pixels.
QImage turbo_bar(int width, int height);

}  // namespace tessel::gui
