// Tissue masks: which parts of a slide hold tissue rather than bare glass, found on a thumbnail.
// Saturation (max − min of R, G, B: glass is grey-white, stained tissue is coloured), an Otsu
// threshold on its histogram guarded by a minimum saturation, marker ink taken out (its hue is
// one H&E never has), a morphological close then open (libvips), and tissue components below a
// minimum area dropped.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/graph/window.h"
#include "io/slide.h"

namespace tessel::io {

struct TissueMaskOptions {
  // Mask resolution: longest side in pixels, or (when set) a downsample from level 0.
  int64_t max_side_px = 2048;
  std::optional<double> downsample;
  // Radii in mask pixels of the disc closing gaps inside tissue, then opening away specks.
  int close_radius_px = 2;
  int open_radius_px = 2;
  // Tissue components smaller than this are dropped: µm² when the slide has microns per pixel,
  // otherwise level-0 pixels².
  double min_area_um2 = 10'000;  // 0.01 mm²: a 100 µm square
  double min_area_level0_px = 40'000;
  // A fixed saturation threshold (0–255; tissue is above it) instead of Otsu's.
  std::optional<int> threshold;
  // Below this saturation nothing is tissue, whatever Otsu says: on a slide of bare glass the
  // histogram holds only noise, and Otsu would split that noise in two.
  int min_saturation = 20;
  // Marker ink and tissue-marking dye are not tissue: pixels saturated enough to be tissue whose
  // hue lies in [70°, 230°] (blue, blue-green and green pens and dyes; H&E's eosin pinks lie near
  // 330°, haematoxylin's purples at 240–300°), opened (strokes, not specks: a bluish nucleus is
  // kept) and grown by two mask pixels (a stroke's soft rim). Red pens (hues near eosin's) and
  // black ones (too grey to be tissue anyway) are not looked for.
  bool remove_ink = true;
};

// Whether an RGB colour of saturation at least `min_saturation` has marker ink's hue (above).
bool is_ink(uint8_t r, uint8_t g, uint8_t b, int min_saturation);

struct TissueMask {
  int64_t width = 0, height = 0;              // mask pixels
  std::vector<uint8_t> pixels;                // row-major, 255 tissue, 0 background
  double downsample = 1.0;                    // level-0 pixels per mask pixel (along x)
  int64_t slide_width = 0, slide_height = 0;  // level 0
  int threshold = 0;                          // the saturation threshold used
  double tissue_fraction = 0.0;               // of the mask's pixels
  double ink_fraction = 0.0;                  // of the mask's pixels: marker ink or dye taken out
  core::Region bbox;  // tissue bounding box in level-0 pixels; empty when no tissue

  bool empty() const { return bbox.empty(); }
  bool at(int64_t x, int64_t y) const { return pixels[y * width + x] != 0; }
  // Grey PNG (255 tissue), written to a temporary name and renamed.
  void save_png(const std::filesystem::path& path) const;
};

// The mask of `slide` at the resolution the options ask for.
TissueMask tissue_mask(const Slide& slide, const TissueMaskOptions& options = {});

// The mask of `thumbnail`, an image of a whole slide whose level 0 is slide_width × slide_height
// with `mpp` microns per level-0 pixel (if known). The mask has the thumbnail's size.
TissueMask tissue_mask(const RgbImage& thumbnail, int64_t slide_width, int64_t slide_height,
                       std::optional<double> mpp, const TissueMaskOptions& options = {});

// Otsu's threshold (Otsu 1979, "A threshold selection method from gray-level histograms"):
// the t maximising the between-class variance w₀·w₁·(μ₀ − μ₁)² of the split [0, t] | (t, 255].
// When several t tie (an empty stretch between two peaks), the middle one. Also returns the two
// class means, so a caller can tell a real split from a unimodal histogram cut in half.
struct OtsuSplit {
  int threshold = 0;
  double mean_below = 0.0, mean_above = 0.0;  // of [0, threshold] and (threshold, 255]
};
OtsuSplit otsu(const std::array<int64_t, 256>& histogram);

// Saturation max(R, G, B) − min(R, G, B) of each pixel of an RGB image.
std::vector<uint8_t> saturation(const RgbImage& image);

// Sets the pixels of `region` that lie on background in the mask to `background`, so training
// on tissue only sees glass as one flat value. `region` was read from a level with
// `level_downsample` at (x, y) in that level's coordinates; a pixel is judged at its centre.
void fill_background(const TissueMask& mask, double level_downsample, int64_t x, int64_t y,
                     RgbImage& region, Rgb background = {});

// `thumbnail` with the mask's outline drawn in green and the background dimmed, for a quick look.
RgbImage tissue_overlay(const RgbImage& thumbnail, const TissueMask& mask);

std::string to_string(const TissueMask& mask);  // size, downsample, fraction, threshold, bbox

}  // namespace tessel::io
