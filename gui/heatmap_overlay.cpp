// LibTorch (through pipelines/evaluate.h) before Qt: Qt defines `slots` as a macro.
#include "pipelines/evaluate.h"
// clang-format off
#include "gui/heatmap_overlay.h"
// clang-format on

#include <QPoint>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "core/error.h"
#include "io/heatmap_writer.h"
#include "io/resolution.h"
#include "io/slide.h"

namespace tessel::gui {

namespace {

// The drawn map as the overlay's image and scores: turbo colours on tissue, clear on glass.
void draw(const io::Heatmap& map, const std::string& drawn, HeatmapOverlay& overlay) {
  const std::vector<float>& scores = map.of(drawn);
  overlay.image =
      QImage(static_cast<int>(map.cols), static_cast<int>(map.rows), QImage::Format_ARGB32);
  overlay.scores.assign(scores.size(), std::numeric_limits<float>::quiet_NaN());
  for (int64_t r = 0; r < map.rows; ++r) {
    auto* line = reinterpret_cast<QRgb*>(overlay.image.scanLine(static_cast<int>(r)));
    for (int64_t c = 0; c < map.cols; ++c) {
      // Glass is left clear: a score there says nothing about tissue.
      if (!map.on_tissue(r, c)) {
        line[c] = qRgba(0, 0, 0, 0);
        continue;
      }
      const auto i = static_cast<size_t>(r * map.cols + c);
      const auto rgb = io::turbo(scores[i]);
      line[c] = qRgb(rgb[0], rgb[1], rgb[2]);
      overlay.scores[i] = scores[i];
    }
  }
  overlay.level0 =
      QRectF(map.origin_x, map.origin_y, map.cell_width * map.cols, map.cell_height * map.rows);
}

}  // namespace

std::optional<float> HeatmapOverlay::score_at(QPointF level0_point) const {
  if (image.isNull() || level0.isEmpty() || !level0.contains(level0_point)) return std::nullopt;
  const auto col =
      static_cast<int>((level0_point.x() - level0.left()) / level0.width() * image.width());
  const auto row =
      static_cast<int>((level0_point.y() - level0.top()) / level0.height() * image.height());
  if (col < 0 || row < 0 || col >= image.width() || row >= image.height()) return std::nullopt;
  const auto i =
      static_cast<size_t>(row) * static_cast<size_t>(image.width()) + static_cast<size_t>(col);
  if (i >= scores.size() || std::isnan(scores[i])) return std::nullopt;
  return scores[i];
}

HeatmapOverlay compute_heatmap_overlay(const HeatmapOrder& order) {
  pipelines::HeatmapRequest request;
  request.checkpoint = order.checkpoint;
  request.slide = order.slide;
  request.out_dir = order.out_dir;
  request.base_mpp = order.base_mpp;
  request.observer = order.observer;
  pipelines::HeatmapResult result;
  try {
    result = pipelines::make_heatmap(request);
  } catch (const io::MissingMpp& e) {
    // The CLI's words (--base-mpp) mean nothing in the viewer: say what to do here.
    throw Error(order.slide.filename().string() +
                " has no microns per pixel (mpp) in its file, and this checkpoint was trained at " +
                e.asked() +
                ": enter the slide's mpp with Set mpp… (Tools ▸ Set Microns per Pixel…), then "
                "ask for the heatmap again.");
  }
  HeatmapOverlay overlay;
  // The map the PNG shows: the last class's score, or its attention (an attention head).
  overlay.class_name = QString::fromStdString(result.drawn);
  overlay.png = result.png;
  draw(result.heatmap, result.drawn, overlay);
  return overlay;
}

std::optional<float> score_of_turbo(QRgb rgb) {
  static const std::vector<std::array<uint8_t, 3>> table = [] {
    std::vector<std::array<uint8_t, 3>> t(256);
    for (int i = 0; i < 256; ++i)
      t[static_cast<size_t>(i)] = io::turbo(static_cast<float>(i) / 255);
    return t;
  }();
  if (qRed(rgb) == 0 && qGreen(rgb) == 0 && qBlue(rgb) == 0) return std::nullopt;  // glass
  int best = -1;
  int best_distance = std::numeric_limits<int>::max();
  for (int i = 0; i < 256; ++i) {
    const auto& c = table[static_cast<size_t>(i)];
    const int dr = qRed(rgb) - c[0], dg = qGreen(rgb) - c[1], db = qBlue(rgb) - c[2];
    const int distance = dr * dr + dg * dg + db * db;
    if (distance < best_distance) {
      best_distance = distance;
      best = i;
    }
  }
  // Far from every turbo colour (another program's image): no score, not a made-up one.
  if (best_distance > 3 * 12 * 12) return std::nullopt;
  return static_cast<float>(best) / 255;
}

HeatmapOverlay load_heatmap_tiff(const std::filesystem::path& tiff, int64_t slide_width,
                                 int64_t slide_height, int max_side) {
  const io::Slide file(tiff);
  const io::Level& full = file.level(0);
  if (full.width != slide_width || full.height != slide_height) {
    throw Error(tiff.string() + " is " + std::to_string(full.width) + " × " +
                std::to_string(full.height) + " px, but the slide shown is " +
                std::to_string(slide_width) + " × " + std::to_string(slide_height) +
                " px: it is the heatmap of another slide");
  }
  // The smallest level at least max_side on its long side (the heatmap's cells are much larger
  // than a level-0 pixel), else the largest.
  int level = 0;
  for (int l = 0; l < file.level_count(); ++l) {
    if (std::max(file.level(l).width, file.level(l).height) >= max_side) level = l;
  }
  const io::Level& read = file.level(level);
  const io::RgbImage rgb = file.read_region(level, 0, 0, read.width, read.height);
  HeatmapOverlay overlay;
  overlay.image =
      QImage(static_cast<int>(rgb.width), static_cast<int>(rgb.height), QImage::Format_ARGB32);
  overlay.scores.assign(static_cast<size_t>(rgb.width * rgb.height),
                        std::numeric_limits<float>::quiet_NaN());
  overlay.approximate = true;
  // A heatmap has few colours (256 and the blends at cell edges): each looked up once.
  std::unordered_map<QRgb, std::optional<float>> seen;
  for (int64_t y = 0; y < rgb.height; ++y) {
    auto* line = reinterpret_cast<QRgb*>(overlay.image.scanLine(static_cast<int>(y)));
    for (int64_t x = 0; x < rgb.width; ++x) {
      const auto i = static_cast<size_t>(y * rgb.width + x);
      const QRgb colour = qRgb(rgb.pixels[3 * i], rgb.pixels[3 * i + 1], rgb.pixels[3 * i + 2]);
      auto found = seen.find(colour);
      if (found == seen.end()) found = seen.emplace(colour, score_of_turbo(colour)).first;
      const std::optional<float>& score = found->second;
      line[x] = score ? colour : qRgba(0, 0, 0, 0);  // black: glass or off the cells
      if (score) overlay.scores[i] = *score;
    }
  }
  overlay.level0 =
      QRectF(0, 0, static_cast<double>(slide_width), static_cast<double>(slide_height));
  // make_heatmap's names: <slide stem>.heatmap.tif; the TIFF does not name its class.
  overlay.class_name = QStringLiteral("score");
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

namespace {

// A boundary edge between a cell in the region and one out of it, from one grid corner to the
// next, the region on its right (y down): cells' outer boundaries run clockwise on screen.
struct Edge {
  int x, y, dx, dy;
};

// The edge to leave corner (x, y) by after arriving along (dx, dy), of `candidates` (edge
// indices): the sharpest right turn, so that regions touching at a corner stay apart.
int next_edge(const std::vector<Edge>& edges, const std::vector<int>& candidates, int dx, int dy) {
  int best = -1, best_rank = -1;
  for (const int e : candidates) {
    const int cross = dx * edges[e].dy - dy * edges[e].dx;
    const int rank = cross > 0 ? 2 : cross == 0 ? 1 : 0;
    if (rank > best_rank) {
      best = e;
      best_rank = rank;
    }
  }
  return best;
}

// The boundary edges of the cells scoring at least `threshold`.
std::vector<Edge> boundary_edges(const HeatmapOverlay& h, float threshold) {
  const int w = h.image.width(), rows = h.image.height();
  const auto in = [&](int x, int y) {
    if (x < 0 || y < 0 || x >= w || y >= rows) return false;
    const float s = h.scores[static_cast<size_t>(y) * static_cast<size_t>(w) + x];
    return !std::isnan(s) && s >= threshold;
  };
  std::vector<Edge> edges;
  for (int y = 0; y < rows; ++y) {
    for (int x = 0; x < w; ++x) {
      if (!in(x, y)) continue;
      if (!in(x, y - 1)) edges.push_back({x, y, 1, 0});
      if (!in(x + 1, y)) edges.push_back({x + 1, y, 0, 1});
      if (!in(x, y + 1)) edges.push_back({x + 1, y + 1, -1, 0});
      if (!in(x - 1, y)) edges.push_back({x, y + 1, 0, -1});
    }
  }
  return edges;
}

// Twice the signed area of a closed ring of grid corners (positive: clockwise on screen).
int64_t twice_area(const std::vector<QPoint>& ring) {
  int64_t sum = 0;
  for (size_t i = 0; i < ring.size(); ++i) {
    const QPoint& a = ring[i];
    const QPoint& b = ring[(i + 1) % ring.size()];
    sum += static_cast<int64_t>(a.x()) * b.y() - static_cast<int64_t>(b.x()) * a.y();
  }
  return sum;
}

}  // namespace

std::vector<QPolygonF> threshold_outlines(const HeatmapOverlay& h, float threshold) {
  const int w = h.image.width();
  if (w <= 0 || h.scores.size() != static_cast<size_t>(w) * h.image.height()) return {};
  const std::vector<Edge> edges = boundary_edges(h, threshold);
  std::unordered_map<int64_t, std::vector<int>> from;  // corner → edges leaving it
  const auto key = [w](int x, int y) { return static_cast<int64_t>(y) * (w + 1) + x; };
  for (int e = 0; e < static_cast<int>(edges.size()); ++e)
    from[key(edges[e].x, edges[e].y)].push_back(e);
  std::vector<uint8_t> used(edges.size(), 0);
  std::vector<std::pair<int64_t, QPolygonF>> outlines;
  const double sx = h.level0.width() / w, sy = h.level0.height() / h.image.height();
  for (int first = 0; first < static_cast<int>(edges.size()); ++first) {
    if (used[first] != 0) continue;
    std::vector<QPoint> ring;  // the corners where the direction changes
    int e = first;
    for (;;) {
      used[e] = 1;
      const Edge& cur = edges[e];
      const int x = cur.x + cur.dx, y = cur.y + cur.dy;
      std::vector<int> candidates;
      for (const int c : from[key(x, y)]) {
        if (used[c] == 0 || c == first) candidates.push_back(c);
      }
      const int next = next_edge(edges, candidates, cur.dx, cur.dy);
      if (next < 0) break;  // not reached: every boundary closes
      if (edges[next].dx != cur.dx || edges[next].dy != cur.dy) ring.emplace_back(x, y);
      if (next == first) break;
      e = next;
    }
    const int64_t area = twice_area(ring);
    if (area <= 0) continue;  // a hole (counter-clockwise)
    QPolygonF polygon;
    for (const QPoint& p : ring) {
      polygon << QPointF(h.level0.left() + p.x() * sx, h.level0.top() + p.y() * sy);
    }
    outlines.emplace_back(area, std::move(polygon));
  }
  std::stable_sort(outlines.begin(), outlines.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<QPolygonF> out;
  for (auto& [area, polygon] : outlines) out.push_back(std::move(polygon));
  return out;
}

}  // namespace tessel::gui
