// A second pixel reader for slide levels that are plain tiled TIFF pages: libvips' tiffload opens
// the page once and each read pulls its rectangle through a VRegion made on the reading thread.
// libvips decodes JPEG tiles outside its file lock, so reader threads decode in parallel, where
// OpenSlide 3.4.1 serialises them; the pixels are the same (tests/io/tiff_reader_test.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/slide.h"

namespace tessel::io {

// Which library decodes a level's pixels. kAuto takes libvips where libvips_page_of() allows it.
enum class PixelReader { kAuto, kOpenSlide, kLibvips };

std::string to_string(PixelReader reader);
PixelReader parse_pixel_reader(const std::string& text);  // "auto", "openslide", "libvips"

// The TIFF page (directory index) holding `level` of `slide` when libvips decodes it exactly as
// OpenSlide does: a tiled, 8-bit, 3-sample, chunky page the level's size, uncompressed, LZW,
// deflate or JPEG. Vendor formats stay on OpenSlide (real Aperio tiles may carry quirks or JPEG
// 2000) except generic TIFF and Tessel's own sample slides; `any_vendor` drops that rule (forced
// reads). Otherwise nullopt and `why` (if given) says why.
std::optional<int> libvips_page_of(const Slide& slide, int level, bool any_vendor,
                                   std::string* why = nullptr);

// The sizes of the first page's SubIFDs that are tiled 8-bit RGB images libvips reads as
// OpenSlide would (a pyramid's smaller levels, as OME-TIFF keeps them), in order; empty when
// there are none or libtiff cannot read the file.
std::vector<std::pair<int64_t, int64_t>> subifd_levels(const std::filesystem::path& path);

class TiffLevelReader {
 public:
  // Opens `page` of the TIFF file with libvips (random access), or its SubIFD `subifd` (OME-TIFF
  // keeps its pyramid there; -1: the page itself). Throws tessel::Error naming the file when
  // libvips cannot, or when the image is not width × height 8-bit RGB.
  TiffLevelReader(const std::filesystem::path& path, int page, int64_t width, int64_t height,
                  int subifd = -1);
  ~TiffLevelReader();
  TiffLevelReader(const TiffLevelReader&) = delete;
  TiffLevelReader& operator=(const TiffLevelReader&) = delete;

  int page() const;
  // Pixels [x, x + width) × [y, y + height), inside the page, into `rgb` (3 · width · height
  // bytes, interleaved). Thread-safe. Throws tessel::Error when a tile cannot be decoded.
  void read_into(int64_t x, int64_t y, int64_t width, int64_t height, uint8_t* rgb) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessel::io
