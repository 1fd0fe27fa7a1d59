#include "io/heatmap_writer.h"

#include <vips/vips8>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/durable.h"
#include "io/thumbnail.h"
#include "io/vips.h"

namespace tessel::io {
namespace {

using vips::VImage;

// Encodes the image in memory (`encode` returns libvips' blob), then writes it through
// "<path>.partial", fsync and a rename (io/durable.h): a full disk is an error naming the file and
// the reason, and leaves no partial file.
template <typename Encode>
void write_atomically(const std::filesystem::path& path, const char* what, Encode&& encode) {
  std::string bytes;
  try {
    bytes = take_blob(encode());
  } catch (const vips::VError& e) {
    vips_error_text();  // clears libvips' buffer; e.what() holds the same text
    throw Error("cannot write the " + std::string(what) + " " + path.string() + ": " + e.what());
  }
  write_file_atomically(path, bytes, "the " + std::string(what));
}

void blend(uint8_t* rgb, const std::array<uint8_t, 3>& colour, double alpha) {
  for (size_t c = 0; c < 3; ++c) {
    rgb[c] = static_cast<uint8_t>(std::lround(rgb[c] * (1 - alpha) + colour[c] * alpha));
  }
}

}  // namespace

const std::vector<float>& Heatmap::of(const std::string& class_name) const {
  for (size_t k = 0; k < classes.size(); ++k) {
    if (classes[k] == class_name) return scores[k];
  }
  std::string known;
  for (const std::string& c : classes) known += (known.empty() ? "" : ", ") + c;
  throw Error("the heatmap has no class '" + class_name + "' (classes: " + known + ")");
}

core::Region Heatmap::cell(int64_t row, int64_t col) const {
  const auto at = [](double origin, double size, int64_t i) {
    return static_cast<int64_t>(std::llround(origin + size * static_cast<double>(i)));
  };
  return {{at(origin_y, cell_height, row), at(origin_y, cell_height, row + 1)},
          {at(origin_x, cell_width, col), at(origin_x, cell_width, col + 1)}};
}

void mark_tissue(Heatmap& heatmap, const TissueMask& mask) {
  heatmap.tissue.assign(static_cast<size_t>(heatmap.rows * heatmap.cols), 1);
  if (mask.empty() || mask.width <= 0 || mask.height <= 0) return;
  const double scale_x = static_cast<double>(mask.width) / static_cast<double>(mask.slide_width);
  const double scale_y = static_cast<double>(mask.height) / static_cast<double>(mask.slide_height);
  for (int64_t row = 0; row < heatmap.rows; ++row) {
    for (int64_t col = 0; col < heatmap.cols; ++col) {
      const core::Region c = heatmap.cell(row, col);
      // The mask pixels the cell meets (at least the one under its centre).
      const auto lo = [](double v, int64_t n) {
        return std::clamp<int64_t>(static_cast<int64_t>(std::floor(v)), 0, n - 1);
      };
      const int64_t x0 = lo(static_cast<double>(c.x.begin) * scale_x, mask.width);
      const int64_t y0 = lo(static_cast<double>(c.y.begin) * scale_y, mask.height);
      const int64_t x1 =
          std::max(x0, lo(static_cast<double>(c.x.end) * scale_x - 1e-9, mask.width));
      const int64_t y1 =
          std::max(y0, lo(static_cast<double>(c.y.end) * scale_y - 1e-9, mask.height));
      bool any = false;
      for (int64_t y = y0; y <= y1 && !any; ++y) {
        for (int64_t x = x0; x <= x1 && !any; ++x) any = mask.at(x, y);
      }
      heatmap.tissue[static_cast<size_t>(row * heatmap.cols + col)] = any ? 1 : 0;
    }
  }
}

std::array<uint8_t, 3> turbo(float value) {
  // Polynomial approximation of Google's Turbo colour map (Mikhailov, 2019), public domain.
  const double x = std::clamp(static_cast<double>(value), 0.0, 1.0);
  const double x2 = x * x, x3 = x2 * x, x4 = x3 * x, x5 = x4 * x;
  const double r = 0.13572138 + 4.61539260 * x - 42.66032258 * x2 + 132.13108234 * x3 -
                   152.94239396 * x4 + 59.28637943 * x5;
  const double g = 0.09140261 + 2.19418839 * x + 4.84296658 * x2 - 14.18503333 * x3 +
                   4.27729857 * x4 + 2.82956604 * x5;
  const double b = 0.10667330 + 12.64194608 * x - 60.58204836 * x2 + 110.36276771 * x3 -
                   89.90310912 * x4 + 27.34824973 * x5;
  const auto byte = [](double v) {
    return static_cast<uint8_t>(std::lround(std::clamp(v, 0.0, 1.0) * 255));
  };
  return {byte(r), byte(g), byte(b)};
}

void write_heatmap_tiff(const std::filesystem::path& path, const Heatmap& heatmap,
                        const std::string& class_name, std::optional<double> mpp) {
  start_vips();
  const std::vector<float>& scores = heatmap.of(class_name);
  std::vector<uint8_t> cells(static_cast<size_t>(3 * heatmap.rows * heatmap.cols));
  for (size_t i = 0; i < scores.size(); ++i) {
    if (!heatmap.tissue.empty() && heatmap.tissue[i] == 0) continue;  // glass: black
    const auto colour = turbo(scores[i]);
    std::copy(colour.begin(), colour.end(), cells.begin() + static_cast<std::ptrdiff_t>(3 * i));
  }
  write_atomically(path, "heatmap TIFF", [&] {
    VImage grid =
        VImage::new_from_memory(cells.data(), cells.size(), static_cast<int>(heatmap.cols),
                                static_cast<int>(heatmap.rows), 3, VIPS_FORMAT_UCHAR);
    // Nearest-neighbour upscaling: each cell stays one flat colour over its level-0 pixels.
    VImage big = grid.resize(
        heatmap.cell_width,
        VImage::option()->set("vscale", heatmap.cell_height)->set("kernel", VIPS_KERNEL_NEAREST));
    big = big.embed(static_cast<int>(std::lround(heatmap.origin_x)),
                    static_cast<int>(std::lround(heatmap.origin_y)),
                    static_cast<int>(heatmap.slide_width), static_cast<int>(heatmap.slide_height));
    auto options = VImage::option()
                       ->set("tile", true)
                       ->set("pyramid", true)
                       ->set("tile_width", 256)
                       ->set("tile_height", 256)
                       ->set("compression", VIPS_FOREIGN_TIFF_COMPRESSION_DEFLATE);
    if (mpp && *mpp > 0) {
      // libvips' resolution unit is pixels per millimetre.
      options->set("xres", 1000.0 / *mpp)->set("yres", 1000.0 / *mpp);
    }
    return big.tiffsave_buffer(options);
  });
}

void write_heatmap_overlay(const std::filesystem::path& path, const Slide& slide,
                           const Heatmap& heatmap, const std::string& class_name, int64_t max_side,
                           double opacity) {
  start_vips();
  const std::vector<float>& scores = heatmap.of(class_name);
  RgbImage thumb = thumbnail(slide, max_side);
  const double sx = static_cast<double>(heatmap.slide_width) / static_cast<double>(thumb.width);
  const double sy = static_cast<double>(heatmap.slide_height) / static_cast<double>(thumb.height);
  for (int64_t y = 0; y < thumb.height; ++y) {
    const double l0y = (static_cast<double>(y) + 0.5) * sy;
    const auto row =
        static_cast<int64_t>(std::floor((l0y - heatmap.origin_y) / heatmap.cell_height));
    if (row < 0 || row >= heatmap.rows) continue;
    for (int64_t x = 0; x < thumb.width; ++x) {
      const double l0x = (static_cast<double>(x) + 0.5) * sx;
      const auto col =
          static_cast<int64_t>(std::floor((l0x - heatmap.origin_x) / heatmap.cell_width));
      if (col < 0 || col >= heatmap.cols || !heatmap.on_tissue(row, col)) continue;
      const float score = scores[static_cast<size_t>(row * heatmap.cols + col)];
      blend(&thumb.pixels[static_cast<size_t>(3 * (y * thumb.width + x))], turbo(score),
            opacity * (0.25 + 0.75 * score));
    }
  }
  // The legend: a colour bar 0 → 1 under the image, with the class name.
  const int64_t bar_height = 14, label_height = 40, margin = 8;
  const int64_t width = thumb.width, height = thumb.height + label_height;
  std::vector<uint8_t> canvas(static_cast<size_t>(3 * width * height), 255);
  std::copy(thumb.pixels.begin(), thumb.pixels.end(), canvas.begin());
  const int64_t bar_x0 = margin + 20, bar_x1 = std::max(bar_x0 + 10, width / 2);
  for (int64_t y = thumb.height + margin; y < thumb.height + margin + bar_height; ++y) {
    for (int64_t x = bar_x0; x < bar_x1; ++x) {
      const auto colour =
          turbo(static_cast<float>(x - bar_x0) / static_cast<float>(bar_x1 - bar_x0 - 1));
      std::copy(colour.begin(), colour.end(),
                canvas.begin() + static_cast<std::ptrdiff_t>(3 * (y * width + x)));
    }
  }
  write_atomically(path, "heatmap overlay", [&] {
    VImage image = VImage::new_from_memory(canvas.data(), canvas.size(), static_cast<int>(width),
                                           static_cast<int>(height), 3, VIPS_FORMAT_UCHAR);
    const auto label = [&](const std::string& text, int64_t x, int64_t y) {
      VImage mask = VImage::text(text.c_str(), VImage::option()->set("dpi", 72));
      VImage ink = mask.new_from_image(std::vector<double>{0, 0, 0})
                       .copy(VImage::option()->set("interpretation", VIPS_INTERPRETATION_sRGB));
      image = image.composite2(
          ink.bandjoin(mask), VIPS_BLEND_MODE_OVER,
          VImage::option()->set("x", static_cast<int>(x))->set("y", static_cast<int>(y)));
      image = image.extract_band(0, VImage::option()->set("n", 3));
    };
    const int64_t text_y = thumb.height + margin + 1;
    label("0", margin + 8, text_y);
    label("1", bar_x1 + 6, text_y);
    label(class_name.starts_with("attention") ? class_name + " / max" : "P(" + class_name + ")",
          bar_x1 + 24, text_y);
    return image.pngsave_buffer();
  });
}

Heatmap coarsened(const Heatmap& heatmap, int64_t k) {
  if (k < 1) throw Error("a heatmap is coarsened by at least 1");
  Heatmap out = heatmap;
  out.rows = (heatmap.rows + k - 1) / k;
  out.cols = (heatmap.cols + k - 1) / k;
  out.cell_width = heatmap.cell_width * static_cast<double>(k);
  out.cell_height = heatmap.cell_height * static_cast<double>(k);
  if (!heatmap.tissue.empty()) {
    out.tissue.assign(static_cast<size_t>(out.rows * out.cols), 0);
    for (int64_t r = 0; r < heatmap.rows; ++r) {
      for (int64_t q = 0; q < heatmap.cols; ++q) {
        if (heatmap.on_tissue(r, q))
          out.tissue[static_cast<size_t>((r / k) * out.cols + q / k)] = 1;
      }
    }
  }
  for (size_t c = 0; c < heatmap.scores.size(); ++c) {
    std::vector<float> sum(static_cast<size_t>(out.rows * out.cols), 0.0F);
    std::vector<float> count(sum.size(), 0.0F);
    for (int64_t r = 0; r < heatmap.rows; ++r) {
      for (int64_t q = 0; q < heatmap.cols; ++q) {
        const auto i = static_cast<size_t>((r / k) * out.cols + q / k);
        sum[i] += heatmap.scores[c][static_cast<size_t>(r * heatmap.cols + q)];
        count[i] += 1;
      }
    }
    for (size_t i = 0; i < sum.size(); ++i) sum[i] /= count[i];
    out.scores[c] = std::move(sum);
  }
  return out;
}

void write_heatmap_geojson(const std::filesystem::path& path, const Heatmap& fine,
                           int64_t max_tiles) {
  int64_t k = 1;
  while (fine.rows * fine.cols > max_tiles * k * k) ++k;
  const Heatmap heatmap = k > 1 ? coarsened(fine, k) : fine;
  const double right = fine.origin_x + fine.cell_width * static_cast<double>(fine.cols);
  const double bottom = fine.origin_y + fine.cell_height * static_cast<double>(fine.rows);
  nlohmann::json features = nlohmann::json::array();
  for (int64_t row = 0; row < heatmap.rows; ++row) {
    for (int64_t col = 0; col < heatmap.cols; ++col) {
      if (!heatmap.on_tissue(row, col)) continue;
      core::Region c = heatmap.cell(row, col);
      // A network whose first cell's field starts in the padding: clipped to the slide.
      c.x.begin = std::max<int64_t>(c.x.begin, 0);
      c.y.begin = std::max<int64_t>(c.y.begin, 0);
      c.x.end = std::min(c.x.end, static_cast<int64_t>(std::llround(right)));
      c.y.end = std::min(c.y.end, static_cast<int64_t>(std::llround(bottom)));
      nlohmann::json measurements = nlohmann::json::object();
      for (size_t k = 0; k < heatmap.classes.size(); ++k) {
        measurements[heatmap.classes[k]] =
            heatmap.scores[k][static_cast<size_t>(row * heatmap.cols + col)];
      }
      features.push_back(
          {{"type", "Feature"},
           {"geometry",
            {{"type", "Polygon"},
             {"coordinates",
              nlohmann::json::array({nlohmann::json::array({{c.x.begin, c.y.begin},
                                                            {c.x.end, c.y.begin},
                                                            {c.x.end, c.y.end},
                                                            {c.x.begin, c.y.end},
                                                            {c.x.begin, c.y.begin}})})}}},
           {"properties", {{"objectType", "tile"}, {"measurements", measurements}}}});
    }
  }
  const nlohmann::json collection = {{"type", "FeatureCollection"}, {"features", features}};
  write_file_atomically(path, collection.dump() + "\n", "the heatmap GeoJSON");
}

}  // namespace tessel::io
