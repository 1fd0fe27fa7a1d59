// A view of another tile source: a crop (tissue or ROI bounding box), one of the 8 flips and
// 90° rotations, and a per-channel affine colour change — the augmentations that stay exact
// under tiling, because every window maps to one window of the source.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
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
  bool is_identity_colour() const {
    return scale == std::array<float, 3>{1, 1, 1} && shift == std::array<float, 3>{0, 0, 0};
  }
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
  // The source's background seen through the view: its cells cropped, transposed and flipped,
  // its colour changed as the pixels are.
  const core::Background* background() const override;

 private:
  std::shared_ptr<core::TileSource> source_;
  View view_;
  int64_t height_ = 0, width_ = 0;
  mutable std::optional<core::Background> background_;  // made at the first ask
  mutable bool background_made_ = false;
};

// Another source with the pixels off a mask replaced by a fixed value per channel: the tissue
// mask's "background" for training on tissue only. Each pixel is judged by the mask pixel under
// its centre, so a pixel's value never depends on the window it is read in.
// The cells of an image of height × width whose pixels MaskedTileSource fills (the mask pixel
// under each pixel's centre is off), with the fill value; none where no mask pixel is off. Cells
// are at least `least` positions a side (the last of an axis may be shorter): runs of rows and
// columns under one mask pixel joined, a cell in the set only where every pixel in it is filled.
std::optional<core::Background> filled_cells(const at::Tensor& keep, double per_y, double per_x,
                                             int64_t height, int64_t width,
                                             const std::vector<float>& fill, int64_t least = 1);

// The side of the background's cells MaskedTileSource declares by default for an image of
// height × width: 16 positions, or 1/512 of the longer side. A tissue mask has up to 2048 pixels
// a side, one or two image pixels each on a small slide: millions of cells, which the planner
// floods tile by tile for every plan it prices (minutes for a 2220×2967 slide). What the coarser
// cells leave undeclared is at most a cell at the tissue's edges, small against the receptive
// field that the glass margin is made of.
int64_t background_cell_side(int64_t height, int64_t width);

class MaskedTileSource : public core::TileSource {
 public:
  // `mask` (mask_height × mask_width, non-zero = keep) covers the image at `pixels_per_mask_x`
  // and `pixels_per_mask_y` image pixels per mask pixel; `fill` holds one value per channel.
  // The background's cells are at least `cell_side` positions a side (0:
  // background_cell_side).
  MaskedTileSource(std::shared_ptr<core::TileSource> source, at::Tensor mask,
                   double pixels_per_mask_x, double pixels_per_mask_y, std::vector<float> fill,
                   int64_t cell_side = 0);
  int64_t channels() const override { return source_->channels(); }
  int64_t height() const override { return source_->height(); }
  int64_t width() const override { return source_->width(); }
  at::Tensor read(const core::Region& r) override;
  void will_read(const std::vector<core::Region>& upcoming) override {
    source_->will_read(upcoming);
  }
  // The filled pixels (filled_cells), the fill value. None where every mask pixel keeps.
  const core::Background* background() const override;

 private:
  std::shared_ptr<core::TileSource> source_;
  at::Tensor mask_;  // bool, mask_height × mask_width
  double per_x_, per_y_;
  at::Tensor fill_;  // 1×C×1×1
  std::optional<core::Background> background_;
};

}  // namespace tessel::pipelines
