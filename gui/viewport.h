// Where the viewer looks: a centre in level-0 pixels and a zoom (level-0 pixels per screen pixel),
// mapped to the pyramid level to read and the tiles of it the screen shows. Pure functions.
#pragma once

#include <QPointF>
#include <QRectF>
#include <QSize>

#include <cstdint>
#include <vector>

#include "gui/tile_cache.h"
#include "io/slide.h"

namespace tessel::gui {

struct ViewState {
  QPointF center;           // level-0 pixels
  double downsample = 1.0;  // level-0 pixels per screen pixel; below 1 is magnified
};

// The level-0 rectangle a widget of `size` shows.
QRectF level0_rect(const ViewState& view, QSize size);
QPointF to_screen(const ViewState& view, QSize size, QPointF level0);
QPointF to_level0(const ViewState& view, QSize size, QPointF screen);

// The level to read at `downsample`: the coarsest whose downsample is at most it (1% slack, so
// 4.0 picks a level of downsample 4.02), else level 0. Never a level coarser than the screen:
// it would have to be enlarged and look blurred.
int level_for_downsample(const std::vector<io::Level>& levels, double downsample);

// Whether slide tiles are drawn with bilinear filtering (QPainter::SmoothPixmapTransform) at
// `downsample`: above native resolution (below 1) interpolated as other slide viewers do, not as
// blocks; below native (above 1) smoothed as they are shrunk; at exactly 1 (a preset can land
// there) not, since level 0's pixels are shown one to one and filtering would only blur them by
// the view's sub-pixel offset.
bool smooth_tiles(double downsample);

// The zoom that fits a slide of width × height into `size`, with a small margin.
double fit_downsample(int64_t width, int64_t height, QSize size);

// The tiles of `level` (index `level_index`) that cover `level0`, nearest the rectangle's centre
// first: those are the ones a user looks at.
std::vector<TileKey> visible_tiles(const io::Level& level, int level_index, const QRectF& level0,
                                   int tile_size);

// Tile `key`'s rectangle in its level's pixels (clipped to the level) and in level-0 pixels.
QRect tile_rect(const io::Level& level, const TileKey& key, int tile_size);
QRectF tile_level0_rect(const io::Level& level, const TileKey& key, int tile_size);

}  // namespace tessel::gui
