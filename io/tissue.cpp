#include "io/tissue.h"

#include <vips/vips8>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "io/thumbnail.h"
#include "io/vips.h"

namespace tessel::io {
namespace {

// A disc of radius r as a libvips morphology mask: 255 must match, 128 does not matter.
vips::VImage disc(int radius) {
  const int side = 2 * radius + 1;
  std::vector<double> values(static_cast<size_t>(side * side), 128.0);
  for (int y = -radius; y <= radius; ++y) {
    for (int x = -radius; x <= radius; ++x) {
      if (x * x + y * y <= radius * radius) values[(y + radius) * side + x + radius] = 255.0;
    }
  }
  return vips::VImage::new_matrix(side, side, values.data(), static_cast<int>(values.size()));
}

// Erode or dilate a 0/255 image with a disc. The border is padded by copying the edge pixels, so
// tissue touching the slide edge is neither eaten by erosion nor grown by padding.
vips::VImage morph(const vips::VImage& image, int radius, VipsOperationMorphology operation) {
  if (radius <= 0) return image;
  const int width = image.width(), height = image.height();
  vips::VImage padded = image.embed(radius, radius, width + 2 * radius, height + 2 * radius,
                                    vips::VImage::option()->set("extend", VIPS_EXTEND_COPY));
  vips::VImage out = padded.morph(disc(radius), operation);
  return out.crop(radius, radius, width, height);
}

std::vector<uint8_t> to_bytes(const vips::VImage& image) {
  size_t bytes = 0;
  void* data = image.write_to_memory(&bytes);
  std::vector<uint8_t> out(static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + bytes);
  g_free(data);
  return out;
}

// Background must be glass: when even Otsu's lower class is coloured, the thumbnail is all
// tissue (H&E split into haematoxylin and eosin), and only the minimum saturation separates.
int choose_threshold(const std::vector<uint8_t>& sat, const TissueMaskOptions& options) {
  if (options.threshold) return *options.threshold;
  std::array<int64_t, 256> histogram{};
  for (uint8_t s : sat) ++histogram[s];
  const OtsuSplit split = otsu(histogram);
  if (split.mean_below >= options.min_saturation) return options.min_saturation;
  return std::max(split.threshold, options.min_saturation);
}

}  // namespace

OtsuSplit otsu(const std::array<int64_t, 256>& histogram) {
  double total = 0.0, sum = 0.0;
  for (int i = 0; i < 256; ++i) {
    total += static_cast<double>(histogram[i]);
    sum += static_cast<double>(i) * static_cast<double>(histogram[i]);
  }
  if (total == 0.0) return {};
  // One pass over t with running class weights and sums; keep the plateau of the maximum.
  double best = -1.0;
  int first = 0, last = 0;
  double weight_below = 0.0, sum_below = 0.0;
  for (int t = 0; t < 255; ++t) {
    weight_below += static_cast<double>(histogram[t]);
    sum_below += static_cast<double>(t) * static_cast<double>(histogram[t]);
    const double weight_above = total - weight_below;
    if (weight_below == 0.0 || weight_above == 0.0) continue;
    const double mean_below = sum_below / weight_below;
    const double mean_above = (sum - sum_below) / weight_above;
    const double between =
        weight_below * weight_above * (mean_below - mean_above) * (mean_below - mean_above);
    // Relative tolerance: equal variances computed along different paths differ in the last bits.
    if (between > best * (1.0 + 1e-12)) {
      best = between;
      first = last = t;
    } else if (between >= best * (1.0 - 1e-12)) {
      last = t;
    }
  }
  if (best < 0.0) {  // one grey value only: nothing to split
    const int only = static_cast<int>(std::lround(sum / total));
    return {only, sum / total, sum / total};
  }
  OtsuSplit split;
  split.threshold = (first + last) / 2;
  double weight_below_t = 0.0, sum_below_t = 0.0;
  for (int i = 0; i <= split.threshold; ++i) {
    weight_below_t += static_cast<double>(histogram[i]);
    sum_below_t += static_cast<double>(i) * static_cast<double>(histogram[i]);
  }
  split.mean_below = sum_below_t / weight_below_t;
  split.mean_above = (sum - sum_below_t) / (total - weight_below_t);
  return split;
}

std::vector<uint8_t> saturation(const RgbImage& image) {
  std::vector<uint8_t> sat(static_cast<size_t>(image.width * image.height));
  const uint8_t* p = image.pixels.data();
  for (size_t i = 0; i < sat.size(); ++i, p += 3) {
    sat[i] = static_cast<uint8_t>(std::max({p[0], p[1], p[2]}) - std::min({p[0], p[1], p[2]}));
  }
  return sat;
}

TissueMask tissue_mask(const Slide& slide, const TissueMaskOptions& options) {
  const Level& level0 = slide.level(0);
  int64_t max_side = options.max_side_px;
  if (options.downsample) {
    if (!(*options.downsample >= 1.0)) {
      throw Error("tissue mask of " + slide.path().string() +
                  ": the downsample must be at least 1, not " +
                  std::to_string(*options.downsample));
    }
    max_side = std::max<int64_t>(
        1, std::llround(static_cast<double>(std::max(level0.width, level0.height)) /
                        *options.downsample));
  }
  std::optional<double> mpp;
  if (slide.mpp_x() && slide.mpp_y()) mpp = std::sqrt(*slide.mpp_x() * *slide.mpp_y());
  return tissue_mask(thumbnail(slide, max_side), level0.width, level0.height, mpp, options);
}

namespace {

// Tissue (255) where the saturation is above the threshold, less marker ink when `ink` is given
// (there 255, and not tissue).
std::vector<uint8_t> tissue_pixels(const RgbImage& thumbnail, const std::vector<uint8_t>& sat,
                                   int threshold, std::vector<uint8_t>* ink) {
  std::vector<uint8_t> binary(sat.size());
  const uint8_t* p = thumbnail.pixels.data();
  for (size_t i = 0; i < sat.size(); ++i, p += 3) {
    binary[i] = sat[i] > threshold ? 255 : 0;
    if (ink != nullptr && binary[i] != 0 && is_ink(p[0], p[1], p[2], threshold + 1)) {
      (*ink)[i] = 255;
      binary[i] = 0;
    }
  }
  return binary;
}

// Drops the tissue components of `mask` smaller than `min_area` mask pixels.
void drop_small_components(const vips::VImage& image, std::vector<uint8_t>& pixels,
                           double min_area) {
  // labelregions numbers 4-connected runs of equal value, background runs included.
  const std::vector<uint8_t> label_bytes = to_bytes(image.labelregions());
  std::vector<int32_t> labels(pixels.size());
  std::memcpy(labels.data(), label_bytes.data(), labels.size() * sizeof(int32_t));
  std::vector<int64_t> area(static_cast<size_t>(*std::max_element(labels.begin(), labels.end())) +
                            1);
  for (size_t i = 0; i < labels.size(); ++i) {
    if (pixels[i] != 0) ++area[static_cast<size_t>(labels[i])];
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (static_cast<double>(area[static_cast<size_t>(labels[i])]) < min_area) pixels[i] = 0;
  }
}

// The fraction of tissue and its bounding box in level-0 pixels (rounded outwards: the box
// covers every level-0 pixel a tissue mask pixel touches).
void measure_tissue(TissueMask& mask, double scale_x, double scale_y) {
  int64_t tissue = 0, x0 = mask.width, y0 = mask.height, x1 = 0, y1 = 0;
  for (int64_t y = 0; y < mask.height; ++y) {
    for (int64_t x = 0; x < mask.width; ++x) {
      if (!mask.at(x, y)) continue;
      ++tissue;
      x0 = std::min(x0, x), x1 = std::max(x1, x + 1);
      y0 = std::min(y0, y), y1 = std::max(y1, y + 1);
    }
  }
  mask.tissue_fraction = static_cast<double>(tissue) / static_cast<double>(mask.pixels.size());
  if (tissue == 0) return;
  const auto down = [](double v) { return static_cast<int64_t>(std::floor(v)); };
  const auto up = [](double v, int64_t limit) {
    return std::min(limit, static_cast<int64_t>(std::ceil(v)));
  };
  mask.bbox.x = {down(static_cast<double>(x0) * scale_x),
                 up(static_cast<double>(x1) * scale_x, mask.slide_width)};
  mask.bbox.y = {down(static_cast<double>(y0) * scale_y),
                 up(static_cast<double>(y1) * scale_y, mask.slide_height)};
}

}  // namespace

bool is_ink(uint8_t r, uint8_t g, uint8_t b, int min_saturation) {
  const int high = std::max({r, g, b}), low = std::min({r, g, b});
  const double range = high - low;
  if (range < std::max(1, min_saturation)) return false;
  double hue = 0;  // degrees
  if (high == r) {
    hue = 60.0 * (g - b) / range;
  } else if (high == g) {
    hue = 60.0 * ((b - r) / range + 2.0);
  } else {
    hue = 60.0 * ((r - g) / range + 4.0);
  }
  if (hue < 0) hue += 360.0;
  return hue >= 70.0 && hue <= 230.0;
}

TissueMask tissue_mask(const RgbImage& thumbnail, int64_t slide_width, int64_t slide_height,
                       std::optional<double> mpp, const TissueMaskOptions& options) {
  if (thumbnail.width < 1 || thumbnail.height < 1) throw Error("tissue mask of an empty image");
  if (options.threshold && (*options.threshold < 0 || *options.threshold > 255)) {
    throw Error("tissue threshold must be between 0 and 255, not " +
                std::to_string(*options.threshold));
  }
  start_vips();
  TissueMask mask;
  mask.width = thumbnail.width;
  mask.height = thumbnail.height;
  mask.slide_width = slide_width;
  mask.slide_height = slide_height;
  const double scale_x = static_cast<double>(slide_width) / static_cast<double>(mask.width);
  const double scale_y = static_cast<double>(slide_height) / static_cast<double>(mask.height);
  mask.downsample = scale_x;

  const std::vector<uint8_t> sat = saturation(thumbnail);
  mask.threshold = choose_threshold(sat, options);
  std::vector<uint8_t> ink(options.remove_ink ? sat.size() : 0, 0);
  std::vector<uint8_t> binary =
      tissue_pixels(thumbnail, sat, mask.threshold, options.remove_ink ? &ink : nullptr);

  const int w = static_cast<int>(mask.width), h = static_cast<int>(mask.height);
  try {
    using vips::VImage;
    VImage image =
        VImage::new_from_memory(binary.data(), binary.size(), w, h, 1, VIPS_FORMAT_UCHAR);
    image = morph(morph(image, options.close_radius_px, VIPS_OPERATION_MORPHOLOGY_DILATE),
                  options.close_radius_px, VIPS_OPERATION_MORPHOLOGY_ERODE);
    image = morph(morph(image, options.open_radius_px, VIPS_OPERATION_MORPHOLOGY_ERODE),
                  options.open_radius_px, VIPS_OPERATION_MORPHOLOGY_DILATE);
    if (options.remove_ink) {
      // The close above fills ink's pixels back where they are specks (a bluish nucleus) and may
      // bridge a stroke. Strokes (what an open by one pixel keeps), grown by two pixels to take
      // their soft rim (thin ink over tissue takes the tissue's hue), are never tissue.
      if (std::find(ink.begin(), ink.end(), 255) != ink.end()) {
        VImage strokes =
            VImage::new_from_memory(ink.data(), ink.size(), w, h, 1, VIPS_FORMAT_UCHAR);
        strokes = morph(morph(strokes, 1, VIPS_OPERATION_MORPHOLOGY_ERODE), 3,
                        VIPS_OPERATION_MORPHOLOGY_DILATE)
                      .copy_memory();  // read twice below
        image = (strokes > 0).ifthenelse(0, image).cast(VIPS_FORMAT_UCHAR).copy_memory();
        const std::vector<uint8_t> taken = to_bytes(strokes);
        mask.ink_fraction = static_cast<double>(std::count(taken.begin(), taken.end(), 255)) /
                            static_cast<double>(taken.size());
      }
    }
    mask.pixels = to_bytes(image);
    const double level0_px_per_mask_px = scale_x * scale_y;
    const double min_area_level0_px =
        mpp ? options.min_area_um2 / (*mpp * *mpp) : options.min_area_level0_px;
    drop_small_components(image, mask.pixels, min_area_level0_px / level0_px_per_mask_px);
  } catch (const vips::VError& e) {
    throw Error("tissue mask: libvips failed: " + std::string(e.what()));
  }
  measure_tissue(mask, scale_x, scale_y);
  return mask;
}

void TissueMask::save_png(const std::filesystem::path& path) const {
  io::save_png(pixels.data(), width, height, 1, path);
}

void fill_background(const TissueMask& mask, double level_downsample, int64_t x, int64_t y,
                     RgbImage& region, Rgb background) {
  if (mask.width < 1 || mask.height < 1) throw Error("fill_background: the tissue mask is empty");
  const double mask_per_level_x =
      level_downsample * static_cast<double>(mask.width) / static_cast<double>(mask.slide_width);
  const double mask_per_level_y =
      level_downsample * static_cast<double>(mask.height) / static_cast<double>(mask.slide_height);
  const auto mask_index = [](double v, int64_t size) {
    return std::clamp<int64_t>(static_cast<int64_t>(std::floor(v)), 0, size - 1);
  };
  for (int64_t j = 0; j < region.height; ++j) {
    const int64_t my =
        mask_index((static_cast<double>(y + j) + 0.5) * mask_per_level_y, mask.height);
    for (int64_t i = 0; i < region.width; ++i) {
      const int64_t mx =
          mask_index((static_cast<double>(x + i) + 0.5) * mask_per_level_x, mask.width);
      if (mask.at(mx, my)) continue;
      uint8_t* p = &region.pixels[static_cast<size_t>(3 * (j * region.width + i))];
      p[0] = background.r, p[1] = background.g, p[2] = background.b;
    }
  }
}

RgbImage tissue_overlay(const RgbImage& thumbnail, const TissueMask& mask) {
  if (thumbnail.width != mask.width || thumbnail.height != mask.height) {
    throw Error("tissue overlay: the thumbnail (" + std::to_string(thumbnail.width) + "×" +
                std::to_string(thumbnail.height) + ") and the mask (" + std::to_string(mask.width) +
                "×" + std::to_string(mask.height) + ") differ in size");
  }
  RgbImage out = thumbnail;
  const auto tissue = [&mask](int64_t x, int64_t y) {
    return x >= 0 && y >= 0 && x < mask.width && y < mask.height && mask.at(x, y);
  };
  for (int64_t y = 0; y < mask.height; ++y) {
    for (int64_t x = 0; x < mask.width; ++x) {
      uint8_t* p = &out.pixels[static_cast<size_t>(3 * (y * mask.width + x))];
      if (!tissue(x, y)) {
        for (int c = 0; c < 3; ++c) p[c] = static_cast<uint8_t>(p[c] / 2);
        continue;
      }
      // Outline: tissue pixels next to background (8-neighbourhood), a line just inside the tissue.
      bool edge = false;
      for (int dy = -1; dy <= 1 && !edge; ++dy) {
        for (int dx = -1; dx <= 1 && !edge; ++dx) edge = !tissue(x + dx, y + dy);
      }
      if (edge) p[0] = 0, p[1] = 200, p[2] = 0;
    }
  }
  return out;
}

std::string to_string(const TissueMask& mask) {
  std::ostringstream out;
  out << "tissue mask " << mask.width << "×" << mask.height << " (downsample " << mask.downsample
      << "), saturation threshold " << mask.threshold << ", tissue " << mask.tissue_fraction * 100.0
      << "%, ";
  if (mask.ink_fraction > 0) out << "pen ink " << mask.ink_fraction * 100.0 << "% (not tissue), ";
  out << "bbox ";
  if (mask.empty()) {
    out << "none";
  } else {
    out << "x " << mask.bbox.x.begin << "–" << mask.bbox.x.end << ", y " << mask.bbox.y.begin << "–"
        << mask.bbox.y.end;
  }
  return out.str();
}

}  // namespace tessel::io
