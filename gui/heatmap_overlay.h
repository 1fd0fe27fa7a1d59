// A checkpoint's heatmap over a slide as the viewer draws it: pipelines::make_heatmap (which also
// writes the TIFF, PNG and GeoJSON into a folder the user chose), its score map as a turbo-coloured
// image of one pixel per cell, and where that image lies in level-0 pixels. Slow: call off the UI
// thread.
#pragma once

#include <QImage>
#include <QRectF>
#include <QString>

#include <filesystem>

namespace tessel::gui {

struct HeatmapOverlay {
  QImage image;   // cols × rows, ARGB32, io::turbo of the drawn map; transparent on glass
  QRectF level0;  // the cells' extent over the slide
  QString class_name;
  std::filesystem::path png;  // the overlay PNG make_heatmap wrote
};

// Writes <slide stem>.heatmap.tif, .png and .geojson into `out_dir`, replacing those there.
// Throws tessel::Error naming the checkpoint or slide that cannot be used.
HeatmapOverlay compute_heatmap_overlay(const std::filesystem::path& checkpoint,
                                       const std::filesystem::path& slide,
                                       const std::filesystem::path& out_dir);

// The legend's colour bar: io::turbo from 0 (left) to 1 (right), `width` × `height` pixels.
QImage turbo_bar(int width, int height);

}  // namespace tessel::gui
