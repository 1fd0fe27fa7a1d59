#include "pipelines/view_source.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/error.h"

namespace tessel::pipelines {

namespace {

// The mask pixel (as read() picks it: the one under the pixel's centre) of each of `size` image
// positions along an axis.
std::vector<int64_t> mask_index(int64_t size, double per, int64_t mask_size) {
  std::vector<int64_t> index(static_cast<size_t>(size));
  for (int64_t v = 0; v < size; ++v) {
    const auto i = static_cast<int64_t>(std::floor((static_cast<double>(v) + 0.5) / per));
    index[static_cast<size_t>(v)] = std::clamp<int64_t>(i, 0, mask_size - 1);
  }
  return index;
}

// The runs of equal mask pixels along an axis: their edges, and the mask pixel of each.
std::pair<std::vector<int64_t>, std::vector<int64_t>> runs(const std::vector<int64_t>& index) {
  std::vector<int64_t> edges{0}, of;
  for (size_t v = 0; v < index.size(); ++v) {
    if (v > 0 && index[v] == index[v - 1]) continue;
    if (v > 0) edges.push_back(static_cast<int64_t>(v));
    of.push_back(index[v]);
  }
  edges.push_back(static_cast<int64_t>(index.size()));
  return {edges, of};
}

// Runs joined into cells of at least `least` positions along an axis: their edges, and the
// first and last mask pixel under each (runs follow the mask pixels in order).
struct AxisCells {
  std::vector<int64_t> edges{0};
  std::vector<std::pair<int64_t, int64_t>> pixels;
};

AxisCells join_runs(const std::vector<int64_t>& index, int64_t least) {
  const auto [edges, of] = runs(index);
  AxisCells cells;
  for (size_t i = 0; i < of.size(); ++i) {
    if (cells.pixels.empty() || edges[i] - cells.edges.back() >= least) {
      if (!cells.pixels.empty()) cells.edges.push_back(edges[i]);
      cells.pixels.emplace_back(of[i], of[i]);
    } else {
      cells.pixels.back().second = of[i];
    }
  }
  cells.edges.push_back(edges.back());
  return cells;
}

}  // namespace

int64_t background_cell_side(int64_t height, int64_t width) {
  return std::max<int64_t>(16, std::max(height, width) / 512);
}

std::optional<core::Background> filled_cells(const at::Tensor& keep, double per_y, double per_x,
                                             int64_t height, int64_t width,
                                             const std::vector<float>& fill, int64_t least) {
  const AxisCells ys = join_runs(mask_index(height, per_y, keep.size(0)), least);
  const AxisCells xs = join_runs(mask_index(width, per_x, keep.size(1)), least);
  // kept[i][j]: the mask pixels kept above and left of (i, j), so a cell's count is four reads.
  const at::Tensor sums = at::constant_pad_nd(
      keep.to(at::kBool).to(at::kLong).cumsum(0).cumsum(1).contiguous(), {1, 0, 1, 0});
  const auto kept = sums.accessor<int64_t, 2>();
  std::vector<uint8_t> in;
  in.reserve(ys.pixels.size() * xs.pixels.size());
  bool any = false;
  for (const auto& [y0, y1] : ys.pixels) {
    for (const auto& [x0, x1] : xs.pixels) {
      const int64_t n = kept[y1 + 1][x1 + 1] - kept[y0][x1 + 1] - kept[y1 + 1][x0] + kept[y0][x0];
      in.push_back(n == 0 ? 1 : 0);
      any = any || n == 0;
    }
  }
  if (!any) return std::nullopt;
  core::Background b;
  b.cells = core::CellMask(ys.edges, xs.edges, std::move(in));
  b.value.assign(fill.begin(), fill.end());
  return b;
}

const core::Background* MaskedTileSource::background() const {
  return background_ ? &*background_ : nullptr;
}

View random_view(View base, bool flips, bool rotations, double color_jitter, std::mt19937_64& rng) {
  const auto coin = [&rng] { return (rng() >> 11) % 2 == 1; };
  if (flips && rotations) {
    base.transpose = coin(), base.flip_y = coin(), base.flip_x = coin();
  } else if (rotations) {
    // 0°, 90°, 180°, 270°: identity, transpose+flip_y, flip both, transpose+flip_x.
    const auto turn = (rng() >> 11) % 4;
    base.transpose = turn == 1 || turn == 3;
    base.flip_y = turn == 1 || turn == 2;
    base.flip_x = turn == 2 || turn == 3;
  } else if (flips) {
    base.flip_y = coin(), base.flip_x = coin();
  }
  if (color_jitter > 0) {
    std::uniform_real_distribution<double> jitter(-color_jitter, color_jitter);
    for (size_t c = 0; c < 3; ++c) {
      base.scale[c] = static_cast<float>(1.0 + jitter(rng));
      base.shift[c] = static_cast<float>(jitter(rng));
    }
  }
  return base;
}

ViewTileSource::ViewTileSource(std::shared_ptr<core::TileSource> source, const View& view)
    : source_(std::move(source)), view_(view) {
  if (!source_) throw Error("a view needs a tile source");
  if (view_.crop.empty()) view_.crop = {{0, source_->height()}, {0, source_->width()}};
  const core::Region& c = view_.crop;
  if (c.y.begin < 0 || c.x.begin < 0 || c.y.end > source_->height() || c.x.end > source_->width() ||
      c.empty()) {
    throw Error("the crop " + core::to_string(c) + " is not inside the image (" +
                std::to_string(source_->height()) + "×" + std::to_string(source_->width()) + ")");
  }
  height_ = view_.transpose ? c.x.size() : c.y.size();
  width_ = view_.transpose ? c.y.size() : c.x.size();
}

core::Region ViewTileSource::source_region(const core::Region& r) const {
  core::Window y = r.y, x = r.x;
  if (view_.flip_y) y = {height_ - r.y.end, height_ - r.y.begin};
  if (view_.flip_x) x = {width_ - r.x.end, width_ - r.x.begin};
  if (view_.transpose) std::swap(y, x);
  return {{y.begin + view_.crop.y.begin, y.end + view_.crop.y.begin},
          {x.begin + view_.crop.x.begin, x.end + view_.crop.x.begin}};
}

at::Tensor ViewTileSource::read(const core::Region& r) {
  at::Tensor t = source_->read(source_region(r));
  if (view_.transpose) t = t.transpose(2, 3);
  std::vector<int64_t> dims;
  if (view_.flip_y) dims.push_back(2);
  if (view_.flip_x) dims.push_back(3);
  if (!dims.empty()) t = t.flip(dims);
  if (!view_.is_identity_colour() && t.size(1) == 3) {
    const at::Tensor scale =
        at::tensor(at::ArrayRef<float>(view_.scale.data(), 3)).view({1, 3, 1, 1});
    const at::Tensor shift =
        at::tensor(at::ArrayRef<float>(view_.shift.data(), 3)).view({1, 3, 1, 1});
    t = t * scale.to(t.scalar_type()) + shift.to(t.scalar_type());
  }
  return t.contiguous();
}

namespace {

// The cells of `m` within `crop`, shifted to start at 0.
core::CellMask cropped(const core::CellMask& m, const core::Region& crop) {
  const auto axis = [](const std::vector<int64_t>& edges, core::Window w) {
    std::vector<int64_t> out{0};
    std::vector<int64_t> index;  // the source cell of each output cell
    for (size_t i = 0; i + 1 < edges.size(); ++i) {
      const int64_t lo = std::max(edges[i], w.begin), hi = std::min(edges[i + 1], w.end);
      if (hi <= lo) continue;
      out.push_back(hi - w.begin);
      index.push_back(static_cast<int64_t>(i));
    }
    return std::make_pair(out, index);
  };
  std::vector<int64_t> y_edges, y_of, x_edges, x_of;
  std::tie(y_edges, y_of) = axis(m.y_edges(), crop.y);
  std::tie(x_edges, x_of) = axis(m.x_edges(), crop.x);
  std::vector<uint8_t> in;
  for (int64_t r : y_of) {
    for (int64_t c : x_of) in.push_back(m.cell_in(r, c) ? 1 : 0);
  }
  return {y_edges, x_edges, in};
}

// Edges of an axis mirrored (a flip).
std::vector<int64_t> mirrored(const std::vector<int64_t>& edges) {
  std::vector<int64_t> out;
  const int64_t size = edges.back();
  for (auto it = edges.rbegin(); it != edges.rend(); ++it) out.push_back(size - *it);
  return out;
}

// `m` transposed and flipped as a view is (View: flip(transpose(crop))).
core::CellMask oriented(const core::CellMask& m, const View& v) {
  const int64_t rows = v.transpose ? m.cols() : m.rows(), cols = v.transpose ? m.rows() : m.cols();
  std::vector<int64_t> y_edges = v.transpose ? m.x_edges() : m.y_edges();
  std::vector<int64_t> x_edges = v.transpose ? m.y_edges() : m.x_edges();
  if (v.flip_y) y_edges = mirrored(y_edges);
  if (v.flip_x) x_edges = mirrored(x_edges);
  std::vector<uint8_t> in;
  in.reserve(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t tr = v.flip_y ? rows - 1 - r : r, tc = v.flip_x ? cols - 1 - c : c;
      in.push_back((v.transpose ? m.cell_in(tc, tr) : m.cell_in(tr, tc)) ? 1 : 0);
    }
  }
  return {y_edges, x_edges, in};
}

}  // namespace

const core::Background* ViewTileSource::background() const {
  if (background_made_) return background_ ? &*background_ : nullptr;
  background_made_ = true;
  const core::Background* b = source_->background();
  if (b == nullptr) return nullptr;
  core::CellMask cells = oriented(cropped(b->cells, view_.crop), view_);
  if (cells.none()) return nullptr;
  // The colour as read() changes a pixel: in float32, then exact in double.
  std::vector<double> value = b->value;
  if (!view_.is_identity_colour() && value.size() == 3) {
    for (size_t c = 0; c < 3; ++c) {
      const float changed =
          (at::tensor(static_cast<float>(value[c])) * view_.scale[c] + view_.shift[c])
              .item<float>();
      value[c] = changed;
    }
  }
  background_ = core::Background{std::move(cells), std::move(value)};
  return &*background_;
}

void ViewTileSource::will_read(const std::vector<core::Region>& upcoming) {
  std::vector<core::Region> mapped;
  mapped.reserve(upcoming.size());
  for (const core::Region& r : upcoming) mapped.push_back(source_region(r));
  source_->will_read(mapped);
}

MaskedTileSource::MaskedTileSource(std::shared_ptr<core::TileSource> source, at::Tensor mask,
                                   double pixels_per_mask_x, double pixels_per_mask_y,
                                   std::vector<float> fill, int64_t cell_side)
    : source_(std::move(source)),
      mask_(mask.ne(0)),
      per_x_(pixels_per_mask_x),
      per_y_(pixels_per_mask_y),
      fill_(at::tensor(fill).view({1, -1, 1, 1})) {
  if (!source_) throw Error("a masked source needs a tile source");
  if (mask_.dim() != 2 || mask_.numel() == 0) throw Error("a tissue mask must be a 2-D image");
  if (static_cast<int64_t>(fill.size()) != source_->channels()) {
    throw Error("the fill value needs one number per channel");
  }
  background_ = filled_cells(mask_, per_y_, per_x_, height(), width(), fill,
                             cell_side > 0 ? cell_side : background_cell_side(height(), width()));
}

at::Tensor MaskedTileSource::read(const core::Region& r) {
  at::Tensor t = source_->read(r);
  // The mask pixel under each row's and column's centre.
  const auto index = [](const core::Window& w, double per, int64_t size) {
    at::Tensor i = (at::arange(w.begin, w.end, at::kDouble) + 0.5) / per;
    return i.floor().to(at::kLong).clamp(0, size - 1);
  };
  const at::Tensor rows = index(r.y, per_y_, mask_.size(0));
  const at::Tensor cols = index(r.x, per_x_, mask_.size(1));
  const at::Tensor keep =
      mask_.index_select(0, rows).index_select(1, cols).view({1, 1, r.y.size(), r.x.size()});
  return at::where(keep, t, fill_.to(t.scalar_type())).contiguous();
}

}  // namespace tessel::pipelines
