// Slide thumbnails and PNG files: a whole slide shrunk to a given longest side (read from the
// smallest level that is at least that big, resized with libvips), and PNGs written to a temporary
// name and renamed, so a crash never leaves half a file under the real name.
#pragma once

#include <cstdint>
#include <filesystem>

#include "io/slide.h"

namespace tessel::io {

// The whole slide with its longest side `max_side_px` (aspect kept, each side at least 1 px),
// read from the smallest level whose longest side is at least `max_side_px`. A slide smaller
// than that comes back at level 0, not enlarged. The level is read in strips and block-averaged
// by an integer factor before libvips resizes it: memory stays within a few times the
// thumbnail's size plus one 4-megapixel strip. Throws tessel::Error when `max_side_px` < 1.
RgbImage thumbnail(const Slide& slide, int64_t max_side_px);

// The index of the level thumbnail() reads for `max_side_px`.
int thumbnail_level(const Slide& slide, int64_t max_side_px);

// `image` resized to exactly width × height with libvips (antialiased when shrinking).
RgbImage resized(const RgbImage& image, int64_t width, int64_t height);

// 8-bit PNG of interleaved pixels with `bands` channels (1 grey, 3 RGB), via a temporary file in
// the same folder renamed over `path`. Throws tessel::Error naming `path` on failure.
void save_png(const uint8_t* pixels, int64_t width, int64_t height, int bands,
              const std::filesystem::path& path);
void save_png(const RgbImage& image, const std::filesystem::path& path);

}  // namespace tessel::io
