#include "gui/viewport.h"

#include <algorithm>
#include <cmath>

namespace tessel::gui {

QRectF level0_rect(const ViewState& view, QSize size) {
  const double w = size.width() * view.downsample;
  const double h = size.height() * view.downsample;
  return {view.center.x() - w / 2, view.center.y() - h / 2, w, h};
}

QPointF to_screen(const ViewState& view, QSize size, QPointF level0) {
  return (level0 - view.center) / view.downsample +
         QPointF(size.width() / 2.0, size.height() / 2.0);
}

QPointF to_level0(const ViewState& view, QSize size, QPointF screen) {
  return (screen - QPointF(size.width() / 2.0, size.height() / 2.0)) * view.downsample +
         view.center;
}

bool smooth_tiles(double downsample) { return std::abs(downsample - 1.0) > 1e-9; }

int level_for_downsample(const std::vector<io::Level>& levels, double downsample) {
  int best = 0;
  for (int i = 0; i < static_cast<int>(levels.size()); ++i) {
    if (levels[i].downsample <= downsample * 1.01 &&
        levels[i].downsample > levels[best].downsample) {
      best = i;
    }
  }
  return best;
}

double fit_downsample(int64_t width, int64_t height, QSize size) {
  constexpr double kMargin = 0.95;
  const double sx = static_cast<double>(width) / std::max(1, size.width());
  const double sy = static_cast<double>(height) / std::max(1, size.height());
  return std::max({sx, sy, 1e-6}) / kMargin;
}

std::vector<TileKey> visible_tiles(const io::Level& level, int level_index, const QRectF& level0,
                                   int tile_size) {
  const double d = level.downsample;
  const int64_t columns = (level.width + tile_size - 1) / tile_size;
  const int64_t rows = (level.height + tile_size - 1) / tile_size;
  const auto first = [&](double v) {
    return std::max<int64_t>(0, static_cast<int64_t>(std::floor(v / d / tile_size)));
  };
  const auto last = [&](double v, int64_t count) {
    return std::min<int64_t>(count - 1, static_cast<int64_t>(std::ceil(v / d / tile_size)) - 1);
  };
  const int64_t c0 = first(level0.left()), c1 = last(level0.right(), columns);
  const int64_t r0 = first(level0.top()), r1 = last(level0.bottom(), rows);
  std::vector<TileKey> tiles;
  for (int64_t r = r0; r <= r1; ++r) {
    for (int64_t c = c0; c <= c1; ++c) tiles.push_back({level_index, c, r});
  }
  const double cx = level0.center().x() / d / tile_size - 0.5;
  const double cy = level0.center().y() / d / tile_size - 0.5;
  const auto distance = [&](const TileKey& k) {
    return std::hypot(static_cast<double>(k.column) - cx, static_cast<double>(k.row) - cy);
  };
  std::stable_sort(tiles.begin(), tiles.end(),
                   [&](const TileKey& a, const TileKey& b) { return distance(a) < distance(b); });
  return tiles;
}

QRect tile_rect(const io::Level& level, const TileKey& key, int tile_size) {
  const int64_t x = key.column * tile_size, y = key.row * tile_size;
  const int64_t w = std::min<int64_t>(tile_size, level.width - x);
  const int64_t h = std::min<int64_t>(tile_size, level.height - y);
  return {static_cast<int>(x), static_cast<int>(y), static_cast<int>(w), static_cast<int>(h)};
}

QRectF tile_level0_rect(const io::Level& level, const TileKey& key, int tile_size) {
  const QRect r = tile_rect(level, key, tile_size);
  const double d = level.downsample;
  return {r.x() * d, r.y() * d, r.width() * d, r.height() * d};
}

}  // namespace tessel::gui
