// LibTorch (through pipelines/evaluate.h) before Qt: Qt defines `slots` as a macro.
#include "pipelines/evaluate.h"
// clang-format off
#include "gui/heatmap_overlay.h"
// clang-format on

#include <algorithm>

#include "io/heatmap_writer.h"

namespace tessel::gui {

HeatmapOverlay compute_heatmap_overlay(const std::filesystem::path& checkpoint,
                                       const std::filesystem::path& slide,
                                       const std::filesystem::path& out_dir) {
  pipelines::HeatmapRequest request;
  request.checkpoint = checkpoint;
  request.slide = slide;
  request.out_dir = out_dir;
  const pipelines::HeatmapResult result = pipelines::make_heatmap(request);
  const io::Heatmap& map = result.heatmap;
  HeatmapOverlay overlay;
  // The map the PNG shows: the last class's score, or its attention (an attention head).
  overlay.class_name = QString::fromStdString(result.drawn);
  overlay.png = result.png;
  const std::vector<float>& scores = map.of(result.drawn);
  overlay.image =
      QImage(static_cast<int>(map.cols), static_cast<int>(map.rows), QImage::Format_ARGB32);
  for (int64_t r = 0; r < map.rows; ++r) {
    auto* line = reinterpret_cast<QRgb*>(overlay.image.scanLine(static_cast<int>(r)));
    for (int64_t c = 0; c < map.cols; ++c) {
      // Glass is left clear: a score there says nothing about tissue.
      if (!map.on_tissue(r, c)) {
        line[c] = qRgba(0, 0, 0, 0);
        continue;
      }
      const auto rgb = io::turbo(scores[static_cast<size_t>(r * map.cols + c)]);
      line[c] = qRgb(rgb[0], rgb[1], rgb[2]);
    }
  }
  overlay.level0 =
      QRectF(map.origin_x, map.origin_y, map.cell_width * map.cols, map.cell_height * map.rows);
  return overlay;
}

QImage turbo_bar(int width, int height) {
  QImage bar(width, height, QImage::Format_RGB32);
  for (int x = 0; x < width; ++x) {
    const auto c = io::turbo(static_cast<float>(x) / static_cast<float>(std::max(1, width - 1)));
    for (int y = 0; y < height; ++y) bar.setPixel(x, y, qRgb(c[0], c[1], c[2]));
  }
  return bar;
}

}  // namespace tessel::gui
