#include "pipelines/view_source.h"

#include <ATen/ATen.h>

#include "core/error.h"

namespace tessel::pipelines {

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
  const bool colour =
      view_.scale != std::array<float, 3>{1, 1, 1} || view_.shift != std::array<float, 3>{0, 0, 0};
  if (colour && t.size(1) == 3) {
    const at::Tensor scale =
        at::tensor(at::ArrayRef<float>(view_.scale.data(), 3)).view({1, 3, 1, 1});
    const at::Tensor shift =
        at::tensor(at::ArrayRef<float>(view_.shift.data(), 3)).view({1, 3, 1, 1});
    t = t * scale.to(t.scalar_type()) + shift.to(t.scalar_type());
  }
  return t.contiguous();
}

void ViewTileSource::will_read(const std::vector<core::Region>& upcoming) {
  std::vector<core::Region> mapped;
  mapped.reserve(upcoming.size());
  for (const core::Region& r : upcoming) mapped.push_back(source_region(r));
  source_->will_read(mapped);
}

MaskedTileSource::MaskedTileSource(std::shared_ptr<core::TileSource> source, at::Tensor mask,
                                   double pixels_per_mask_x, double pixels_per_mask_y,
                                   std::vector<float> fill)
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
