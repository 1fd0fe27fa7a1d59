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

}  // namespace tessel::pipelines
