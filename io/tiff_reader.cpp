#include "io/tiff_reader.h"

#include <tiffio.h>
#include <vips/vips8>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "io/vips.h"

namespace tessel::io {
namespace {

struct CloseTiff {
  void operator()(TIFF* tiff) const noexcept { TIFFClose(tiff); }
};

bool plain_compression(uint16_t compression) {
  return compression == COMPRESSION_NONE || compression == COMPRESSION_LZW ||
         compression == COMPRESSION_JPEG || compression == COMPRESSION_ADOBE_DEFLATE ||
         compression == COMPRESSION_DEFLATE;
}

// Why libvips cannot stand in for OpenSlide on the current directory, or "" when it can.
std::string page_problem(TIFF* tiff) {
  uint16_t compression = 0, bits = 0, samples = 0, planar = PLANARCONFIG_CONTIG, photometric = 0;
  TIFFGetFieldDefaulted(tiff, TIFFTAG_COMPRESSION, &compression);
  TIFFGetFieldDefaulted(tiff, TIFFTAG_BITSPERSAMPLE, &bits);
  TIFFGetFieldDefaulted(tiff, TIFFTAG_SAMPLESPERPIXEL, &samples);
  TIFFGetFieldDefaulted(tiff, TIFFTAG_PLANARCONFIG, &planar);
  TIFFGetField(tiff, TIFFTAG_PHOTOMETRIC, &photometric);
  if (!plain_compression(compression)) {
    return "compression " + std::to_string(compression) + " is not none, LZW, deflate or JPEG";
  }
  if (bits != 8 || samples != 3 || planar != PLANARCONFIG_CONTIG) {
    return "pixels are not 8-bit interleaved RGB";
  }
  const bool rgb = photometric == PHOTOMETRIC_RGB ||
                   (compression == COMPRESSION_JPEG && photometric == PHOTOMETRIC_YCBCR);
  if (!rgb) return "photometric interpretation " + std::to_string(photometric) + " is not RGB";
  return "";
}

}  // namespace

std::string to_string(PixelReader reader) {
  switch (reader) {
    case PixelReader::kAuto:
      return "auto";
    case PixelReader::kOpenSlide:
      return "openslide";
    case PixelReader::kLibvips:
      return "libvips";
  }
  return "?";
}

PixelReader parse_pixel_reader(const std::string& text) {
  if (text == "auto") return PixelReader::kAuto;
  if (text == "openslide") return PixelReader::kOpenSlide;
  if (text == "libvips") return PixelReader::kLibvips;
  throw Error("unknown pixel reader \"" + text + "\" (auto, openslide or libvips)");
}

std::optional<int> libvips_page_of(const Slide& slide, int level, bool any_vendor,
                                   std::string* why) {
  const auto refuse = [why](std::string reason) -> std::optional<int> {
    if (why != nullptr) *why = std::move(reason);
    return std::nullopt;
  };
  const Level& info = slide.level(level);
  if (slide.vendor() != "generic-tiff" && slide.vendor() != "aperio") {
    return refuse(slide.vendor() + " slides are not single TIFF files libvips can page through");
  }
  std::unique_ptr<TIFF, CloseTiff> tiff(TIFFOpen(slide.path().c_str(), "rm"));
  if (!tiff) return refuse("libtiff cannot open the file");
  if (slide.vendor() == "aperio" && !any_vendor) {
    // Tessel's sample slides are plain libvips-written JPEG TIFFs that only borrow Aperio's
    // ImageDescription so OpenSlide reads their mpp (io/sample_slides.cpp).
    const char* description = nullptr;
    if (TIFFGetField(tiff.get(), TIFFTAG_IMAGEDESCRIPTION, &description) != 1 ||
        description == nullptr || std::strstr(description, "Tessel sample-data") == nullptr) {
      return refuse("real Aperio slides stay on OpenSlide (JPEG quirks, JPEG 2000)");
    }
  }
  int page = 0;
  do {
    uint32_t width = 0, height = 0;
    TIFFGetField(tiff.get(), TIFFTAG_IMAGEWIDTH, &width);
    TIFFGetField(tiff.get(), TIFFTAG_IMAGELENGTH, &height);
    if (TIFFIsTiled(tiff.get()) != 0 && width == info.width && height == info.height) {
      std::string problem = page_problem(tiff.get());
      if (!problem.empty()) return refuse("TIFF page " + std::to_string(page) + ": " + problem);
      if (why != nullptr) why->clear();
      return page;
    }
    ++page;
  } while (TIFFReadDirectory(tiff.get()) == 1);
  return refuse("no tiled TIFF page is " + std::to_string(info.width) + "×" +
                std::to_string(info.height));
}

struct TiffLevelReader::Impl {
  std::filesystem::path path;
  int page = 0;
  vips::VImage image;
};

std::vector<std::pair<int64_t, int64_t>> subifd_levels(const std::filesystem::path& path) {
  std::vector<std::pair<int64_t, int64_t>> levels;
  std::unique_ptr<TIFF, CloseTiff> tiff(TIFFOpen(path.c_str(), "rm"));
  if (!tiff) return levels;
  uint16_t count = 0;
  uint64_t* offsets_in_tiff = nullptr;
  if (TIFFGetField(tiff.get(), TIFFTAG_SUBIFD, &count, &offsets_in_tiff) != 1 || count == 0) {
    return levels;
  }
  // Moving to a SubIFD frees libtiff's copy of the list.
  const std::vector<uint64_t> offsets(offsets_in_tiff, offsets_in_tiff + count);
  for (const uint64_t offset : offsets) {
    if (TIFFSetSubDirectory(tiff.get(), offset) != 1) break;
    uint32_t width = 0, height = 0;
    TIFFGetField(tiff.get(), TIFFTAG_IMAGEWIDTH, &width);
    TIFFGetField(tiff.get(), TIFFTAG_IMAGELENGTH, &height);
    if (TIFFIsTiled(tiff.get()) == 0 || width == 0 || height == 0 ||
        !page_problem(tiff.get()).empty()) {
      break;  // a level that is not plain tiled RGB ends the pyramid Tessel can read
    }
    levels.emplace_back(width, height);
  }
  return levels;
}

TiffLevelReader::TiffLevelReader(const std::filesystem::path& path, int page, int64_t width,
                                 int64_t height, int subifd)
    : impl_(std::make_unique<Impl>()) {
  start_vips();
  impl_->path = path;
  impl_->page = page;
  const std::string prefix =
      "cannot read slide " + path.string() + " page " + std::to_string(page) +
      (subifd >= 0 ? " SubIFD " + std::to_string(subifd) : "") + " with libvips: ";
  try {
    impl_->image = vips::VImage::tiffload(path.c_str(), vips::VImage::option()
                                                            ->set("page", page)
                                                            ->set("subifd", subifd)
                                                            ->set("access", VIPS_ACCESS_RANDOM)
                                                            ->set("fail_on", VIPS_FAIL_ON_ERROR));
  } catch (const vips::VError& e) {
    throw Error(prefix + e.what());
  }
  const vips::VImage& image = impl_->image;
  if (image.width() != width || image.height() != height || image.bands() != 3 ||
      image.format() != VIPS_FORMAT_UCHAR) {
    throw Error(prefix + "it is " + std::to_string(image.width()) + "×" +
                std::to_string(image.height()) + " with " + std::to_string(image.bands()) +
                " bands, not " + std::to_string(width) + "×" + std::to_string(height) +
                " 8-bit RGB");
  }
}

TiffLevelReader::~TiffLevelReader() = default;

int TiffLevelReader::page() const { return impl_->page; }

void TiffLevelReader::read_into(int64_t x, int64_t y, int64_t width, int64_t height,
                                uint8_t* rgb) const {
  if (width <= 0 || height <= 0) return;
  try {
    // A region belongs to the thread that made it (libvips checks ownership), so each read
    // makes its own on the calling thread; the decoded tiles are cached in the image, not here.
    const vips::VRegion region = vips::VRegion::new_from_image(impl_->image);
    region.prepare(static_cast<int>(x), static_cast<int>(y), static_cast<int>(width),
                   static_cast<int>(height));
    const size_t row_bytes = static_cast<size_t>(3 * width);
    for (int64_t row = 0; row < height; ++row) {
      const VipsPel* in = region.addr(static_cast<int>(x), static_cast<int>(y + row));
      std::memcpy(rgb + row * static_cast<int64_t>(row_bytes), in, row_bytes);
    }
  } catch (const vips::VError& e) {
    throw Error("slide " + impl_->path.string() + ": libvips failed reading page " +
                std::to_string(impl_->page) + " region x " + std::to_string(x) + ", y " +
                std::to_string(y) + ", " + std::to_string(width) + "×" + std::to_string(height) +
                ": " + e.what());
  }
}

}  // namespace tessel::io
