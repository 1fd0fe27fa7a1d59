// A view of another tile source: a crop (tissue or ROI bounding box), one of the 8 flips and
// 90° rotations, and a per-channel affine colour change — the augmentations that stay exact
// under tiling, because every window maps to one window of the source.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <random>

#include "core/tile_source.h"

namespace tessel::pipelines {

struct View {
  core::Region crop;  // in the source's pixels; empty: the whole source
  // The view is flip(transpose(crop)): transpose swaps rows and columns, then flip_y / flip_x
  // mirror the result. The 8 combinations are the dihedral group: all flips and rotations.
  bool transpose = false;
  bool flip_y = false;
  bool flip_x = false;
  std::array<float, 3> scale{1, 1, 1};  // per channel: value · scale + shift
  std::array<float, 3> shift{0, 0, 0};

  bool is_identity_geometry() const { return !transpose && !flip_y && !flip_x; }
};

// A random view for training: a random flip (`flips`), a random multiple of 90° (`rotations`),
// and per-channel contrast and brightness changes of up to ± `color_jitter`. The crop is kept.
View random_view(View base, bool flips, bool rotations, double color_jitter, std::mt19937_64& rng);

class ViewTileSource : public core::TileSource {
 public:
  ViewTileSource(std::shared_ptr<core::TileSource> source, const View& view);
  int64_t channels() const override { return source_->channels(); }
  int64_t height() const override { return height_; }
  int64_t width() const override { return width_; }
  at::Tensor read(const core::Region& r) override;
  void will_read(const std::vector<core::Region>& upcoming) override;

  // The source region a view region comes from (before transpose and flips are applied).
  core::Region source_region(const core::Region& r) const;

 private:
  std::shared_ptr<core::TileSource> source_;
  View view_;
  int64_t height_ = 0, width_ = 0;
};

// Another source with the pixels off a mask replaced by a fixed value per channel: the tissue
// mask's "background" for training on tissue only. Each pixel is judged by the mask pixel under
// its centre, so a pixel's value never depends on the window it is read in.
class MaskedTileSource : public core::TileSource {
 public:
  // `mask` (mask_height × mask_width, non-zero = keep) covers the image at `pixels_per_mask_x`
  // and `pixels_per_mask_y` image pixels per mask pixel; `fill` holds one value per channel.
  MaskedTileSource(std::shared_ptr<core::TileSource> source, at::Tensor mask,
                   double pixels_per_mask_x, double pixels_per_mask_y, std::vector<float> fill);
  int64_t channels() const override { return source_->channels(); }
  int64_t height() const override { return source_->height(); }
  int64_t width() const override { return source_->width(); }
  at::Tensor read(const core::Region& r) override;
  void will_read(const std::vector<core::Region>& upcoming) override {
    source_->will_read(upcoming);
  }

 private:
  std::shared_ptr<core::TileSource> source_;
  at::Tensor mask_;  // bool, mask_height × mask_width
  double per_x_, per_y_;
  at::Tensor fill_;  // 1×C×1×1
};

}  // namespace tessel::pipelines
