#include "io/thumbnail.h"

#include <vips/vips8>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "io/durable.h"
#include "io/vips.h"

namespace tessel::io {
namespace {

int64_t longest_side(const Level& level) { return std::max(level.width, level.height); }

// Level pixels read per strip: bounds thumbnail memory whatever the level's size (~7 bytes each).
constexpr int64_t kStripPixels = int64_t{4} << 20;

// The level shrunk by an integer `factor`, each output pixel the mean of its factor × factor
// block (partial blocks at the right and bottom edges average the pixels they have). Read in
// strips of whole blocks, so no strip boundary changes a result.
RgbImage block_mean(const Slide& slide, int level_index, int64_t factor) {
  const Level& level = slide.level(level_index);
  const int64_t out_width = (level.width + factor - 1) / factor;
  const int64_t out_height = (level.height + factor - 1) / factor;
  RgbImage out{out_width, out_height, std::vector<uint8_t>(3 * out_width * out_height)};
  const int64_t blocks_per_strip = std::max<int64_t>(1, kStripPixels / (level.width * factor));
  std::vector<uint64_t> sum(static_cast<size_t>(3 * out_width));
  std::vector<uint64_t> count(static_cast<size_t>(out_width));
  for (int64_t block_row = 0; block_row < out_height; block_row += blocks_per_strip) {
    const int64_t y0 = block_row * factor;
    const int64_t rows = std::min(blocks_per_strip * factor, level.height - y0);
    const RgbImage strip = slide.read_region(level_index, 0, y0, level.width, rows);
    for (int64_t r = 0; r * factor < rows; ++r) {
      std::fill(sum.begin(), sum.end(), 0);
      std::fill(count.begin(), count.end(), 0);
      for (int64_t y = r * factor; y < std::min((r + 1) * factor, rows); ++y) {
        const uint8_t* p = &strip.pixels[static_cast<size_t>(3 * y * level.width)];
        for (int64_t x = 0; x < level.width; ++x, p += 3) {
          const auto o = static_cast<size_t>(x / factor);
          sum[3 * o] += p[0], sum[3 * o + 1] += p[1], sum[3 * o + 2] += p[2];
          ++count[o];
        }
      }
      uint8_t* q = &out.pixels[static_cast<size_t>(3 * (block_row + r) * out_width)];
      for (size_t o = 0; o < count.size(); ++o) {
        for (size_t c = 0; c < 3; ++c) {
          *q++ = static_cast<uint8_t>((sum[3 * o + c] + count[o] / 2) / count[o]);
        }
      }
    }
  }
  return out;
}

vips::VImage to_vips(const uint8_t* pixels, int64_t width, int64_t height, int bands) {
  // Copied into libvips' own buffer: the image must not outlive the caller's pixels.
  return vips::VImage::new_from_memory(
             const_cast<uint8_t*>(pixels), static_cast<size_t>(width * height * bands),
             static_cast<int>(width), static_cast<int>(height), bands, VIPS_FORMAT_UCHAR)
      .copy_memory();
}

// libvips' multi-line error text on one line: the CLI prints one line per error.
std::string one_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  std::string out;
  for (char c : text) out += c == '\n' ? std::string("; ") : std::string(1, c);
  return out;
}

}  // namespace

int thumbnail_level(const Slide& slide, int64_t max_side_px) {
  int chosen = 0;
  for (int i = 0; i < slide.level_count(); ++i) {
    if (longest_side(slide.level(i)) >= max_side_px) chosen = i;
  }
  return chosen;
}

RgbImage thumbnail(const Slide& slide, int64_t max_side_px) {
  if (max_side_px < 1) {
    throw Error("thumbnail of " + slide.path().string() + ": the size must be at least 1 px, not " +
                std::to_string(max_side_px));
  }
  const int level_index = thumbnail_level(slide, max_side_px);
  const Level& level = slide.level(level_index);
  const int64_t longest = longest_side(level);
  if (longest <= max_side_px)
    return slide.read_region(level_index, 0, 0, level.width, level.height);
  // An exact integer block mean first (in strips: bounded memory), then libvips for the rest
  // of the way, which is then less than a factor of 2.
  const int64_t factor = longest / max_side_px;
  RgbImage image = factor >= 2 ? block_mean(slide, level_index, factor)
                               : slide.read_region(level_index, 0, 0, level.width, level.height);
  const double scale = static_cast<double>(max_side_px) / static_cast<double>(longest);
  const auto side = [scale](int64_t n) {
    return std::max<int64_t>(1, std::llround(static_cast<double>(n) * scale));
  };
  return resized(image, side(level.width), side(level.height));
}

RgbImage resized(const RgbImage& image, int64_t width, int64_t height) {
  if (width == image.width && height == image.height) return image;
  start_vips();
  try {
    vips::VImage in = to_vips(image.pixels.data(), image.width, image.height, 3);
    const double hscale = static_cast<double>(width) / static_cast<double>(image.width);
    const double vscale = static_cast<double>(height) / static_cast<double>(image.height);
    vips::VImage out = in.resize(hscale, vips::VImage::option()->set("vscale", vscale));
    // resize rounds the output size; pad or crop the last row or column to the exact size asked.
    out = out.embed(0, 0, static_cast<int>(width), static_cast<int>(height),
                    vips::VImage::option()->set("extend", VIPS_EXTEND_COPY));
    size_t bytes = 0;
    void* data = out.write_to_memory(&bytes);
    RgbImage result{width, height, {}};
    result.pixels.assign(static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + bytes);
    g_free(data);
    return result;
  } catch (const vips::VError& e) {
    throw Error("resizing an image to " + std::to_string(width) + "×" + std::to_string(height) +
                " failed: " + e.what());
  }
}

void save_png(const uint8_t* pixels, int64_t width, int64_t height, int bands,
              const std::filesystem::path& path) {
  start_vips();
  std::string bytes;
  try {
    bytes = take_blob(to_vips(pixels, width, height, bands).pngsave_buffer());
  } catch (const vips::VError& e) {
    vips_error_text();  // clears libvips' buffer; e.what() holds the same text
    throw Error("cannot write " + path.string() + ": " + one_line(e.what()));
  }
  // Through "<path>.partial", fsync and a rename: a full disk says so.
  write_file_atomically(path, bytes, "the PNG");
}

void save_png(const RgbImage& image, const std::filesystem::path& path) {
  save_png(image.pixels.data(), image.width, image.height, 3, path);
}

}  // namespace tessel::io
