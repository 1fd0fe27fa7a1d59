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
  std::vector<uint8_t> binary(sat.size());
  for (size_t i = 0; i < sat.size(); ++i) binary[i] = sat[i] > mask.threshold ? 255 : 0;

  const int w = static_cast<int>(mask.width), h = static_cast<int>(mask.height);
  try {
    vips::VImage image =
        vips::VImage::new_from_memory(binary.data(), binary.size(), w, h, 1, VIPS_FORMAT_UCHAR);
    image = morph(morph(image, options.close_radius_px, VIPS_OPERATION_MORPHOLOGY_DILATE),
                  options.close_radius_px, VIPS_OPERATION_MORPHOLOGY_ERODE);
    image = morph(morph(image, options.open_radius_px, VIPS_OPERATION_MORPHOLOGY_ERODE),
                  options.open_radius_px, VIPS_OPERATION_MORPHOLOGY_DILATE);
    mask.pixels = to_bytes(image);
    // labelregions numbers 4-connected runs of equal value, background runs included.
    const std::vector<uint8_t> label_bytes = to_bytes(image.labelregions());
    std::vector<int32_t> labels(mask.pixels.size());
    std::memcpy(labels.data(), label_bytes.data(), labels.size() * sizeof(int32_t));

    const double level0_px_per_mask_px = scale_x * scale_y;
    const double min_area_level0_px =
        mpp ? options.min_area_um2 / (*mpp * *mpp) : options.min_area_level0_px;
    const double min_area_mask_px = min_area_level0_px / level0_px_per_mask_px;
    std::vector<int64_t> area(static_cast<size_t>(*std::max_element(labels.begin(), labels.end())) +
                              1);
    for (size_t i = 0; i < labels.size(); ++i) {
      if (mask.pixels[i] != 0) ++area[static_cast<size_t>(labels[i])];
    }
    for (size_t i = 0; i < labels.size(); ++i) {
      if (static_cast<double>(area[static_cast<size_t>(labels[i])]) < min_area_mask_px) {
        mask.pixels[i] = 0;
      }
    }
  } catch (const vips::VError& e) {
    throw Error("tissue mask: libvips failed: " + std::string(e.what()));
  }

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
  if (tissue > 0) {
    // Outward rounding: the box covers every level-0 pixel a tissue mask pixel touches.
    const auto down = [](double v) { return static_cast<int64_t>(std::floor(v)); };
    const auto up = [](double v, int64_t limit) {
      return std::min(limit, static_cast<int64_t>(std::ceil(v)));
    };
    mask.bbox.x = {down(static_cast<double>(x0) * scale_x),
                   up(static_cast<double>(x1) * scale_x, slide_width)};
    mask.bbox.y = {down(static_cast<double>(y0) * scale_y),
                   up(static_cast<double>(y1) * scale_y, slide_height)};
  }
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
      << "%, bbox ";
  if (mask.empty()) {
    out << "none";
  } else {
    out << "x " << mask.bbox.x.begin << "–" << mask.bbox.x.end << ", y " << mask.bbox.y.begin << "–"
        << mask.bbox.y.end;
  }
  return out.str();
}

}  // namespace tessel::io
