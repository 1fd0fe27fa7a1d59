#include "io/slide.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "io/dicom_folder.h"
#include "io/ome_xml.h"
#include "io/openslide_api.h"
#include "io/tiff_reader.h"
#include "io/user_file.h"

namespace tessel::io {
namespace {

// One-line messages: OpenSlide's reasons may carry newlines, the CLI prints one line.
std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

std::optional<double> positive_number(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  double value = 0;
  const char* end = text->data() + text->size();
  const auto [ptr, ec] = std::from_chars(text->data(), end, value);
  if (ec != std::errc() || ptr == text->data() || !std::isfinite(value) || value <= 0) {
    return std::nullopt;
  }
  return value;
}

// OpenSlide 4 takes a generic TIFF's mpp from its resolution tags, which programs fill with their
// own default when an image has no scale (libvips writes 1 px/mm or 72 dpi: 1000 or 353 µm per
// pixel, as in boxes.tiff and the tests' tiny slides). No scanner's level 0 is that coarse: such an
// mpp is no mpp (the manifest's mpp column or --base-mpp gives the real one).
constexpr double kMaxGenericTiffMpp = 100.0;

std::vector<std::string> string_list(const char* const* names) {
  std::vector<std::string> list;
  for (; names != nullptr && *names != nullptr; ++names) list.emplace_back(*names);
  return list;
}

}  // namespace

void rgb_from_premultiplied_argb(const uint32_t* argb, int64_t count, Rgb background,
                                 uint8_t* rgb) {
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t p = argb[i];
    const uint32_t a = p >> 24;
    uint8_t* out = rgb + 3 * i;
    if (a == 255) {
      out[0] = static_cast<uint8_t>(p >> 16);
      out[1] = static_cast<uint8_t>(p >> 8);
      out[2] = static_cast<uint8_t>(p);
    } else if (a == 0) {
      out[0] = background.r;
      out[1] = background.g;
      out[2] = background.b;
    } else {
      // p_c + b_c·(255 − a)/255, rounded; never above 255 because p_c ≤ a.
      const uint32_t rest = 255 - a;
      out[0] = static_cast<uint8_t>(((p >> 16) & 255) + (background.r * rest + 127) / 255);
      out[1] = static_cast<uint8_t>(((p >> 8) & 255) + (background.g * rest + 127) / 255);
      out[2] = static_cast<uint8_t>((p & 255) + (background.b * rest + 127) / 255);
    }
  }
}

Slide::Slide(const std::filesystem::path& path) : path_(path) {
  const std::string name = path.string();
  const std::string prefix = "cannot open slide " + name + ": ";
  // A DICOM slide may be named by its folder; OpenSlide takes one of its files. (A MIRAX slide's
  // .mrxs names its folder beside it; that slide is still the one file.)
  std::filesystem::path file = path;
  if (const std::string why = not_a_regular_file(path); why == kIsAFolder) {
    file = dicom_slide_file(path);
  } else if (!why.empty()) {
    throw Error(prefix + why);
  }
  const OpenSlideApi& api = openslide();
  const char* vendor = api.detect_vendor(file.c_str());
  if (vendor == nullptr && is_dicom_file(file)) {
    throw Error(prefix + "a DICOM file, but not a whole-slide image (VL Whole Slide Microscopy) " +
                "OpenSlide " + api.get_version() + " can read");
  }
  if (vendor == nullptr) {
    throw Error(prefix + "not a slide format OpenSlide " + api.get_version() +
                " can read (supported: Aperio, DICOM, Hamamatsu, Leica, MIRAX, Philips, Sakura, "
                "Trestle, Ventana, Zeiss, generic tiled TIFF)");
  }
  vendor_ = vendor;
  handle_.reset(api.open(file.c_str()));
  if (!handle_) {
    throw Error(prefix + "OpenSlide recognises it as " + vendor_ + " but cannot open it");
  }
  openslide_t* osr = handle_.get();
  if (const char* error = api.get_error(osr)) {
    throw Error(prefix + "broken " + vendor_ + " slide: " + one_line(error));
  }

  const int32_t count = api.get_level_count(osr);
  for (int32_t i = 0; i < count; ++i) {
    Level level;
    api.get_level_dimensions(osr, i, &level.width, &level.height);
    level.downsample = api.get_level_downsample(osr, i);
    levels_.push_back(level);
  }
  for (const std::string& key : string_list(api.get_property_names(osr))) {
    const char* value = api.get_property_value(osr, key.c_str());
    properties_[key] = value != nullptr ? value : "";
  }
  associated_names_ = string_list(api.get_associated_image_names(osr));
  mpp_x_ = positive_number(property("openslide.mpp-x"));
  mpp_y_ = positive_number(property("openslide.mpp-y"));
  objective_power_ = positive_number(property("openslide.objective-power"));
  if (vendor_ == "generic-tiff" &&
      ((mpp_x_ && *mpp_x_ > kMaxGenericTiffMpp) || (mpp_y_ && *mpp_y_ > kMaxGenericTiffMpp))) {
    spdlog::debug(
        "slide {}: its TIFF resolution ({} µm per pixel) is a writing program's "
        "default, not a scan's scale: no mpp",
        name, property("openslide.mpp-x").value_or("?"));
    mpp_x_.reset();
    mpp_y_.reset();
  }
  if (count <= 0) throw Error(prefix + "the slide has no resolution levels");
  openslide_levels_ = count;
  if (vendor_ == "generic-tiff") read_ome_xml(prefix);
}

// An OME-TIFF's physical pixel size is in its OME-XML, not (or not only) in the TIFF resolution
// tags OpenSlide reads: the XML's wins. XML that contradicts the pixels is refused.
void Slide::read_ome_xml(const std::string& prefix) {
  const auto description = property("tiff.ImageDescription");
  if (!description) return;
  std::optional<OmePixels> ome;
  try {
    ome = read_ome_pixels(*description);
  } catch (const Error& e) {
    throw Error(prefix + e.what());
  }
  if (!ome) return;
  const Level& level0 = levels_.front();
  if (ome->size_x != level0.width || ome->size_y != level0.height) {
    throw Error(prefix + "its OME-XML says the image is " + std::to_string(ome->size_x) + " × " +
                std::to_string(ome->size_y) + " pixels, but it is " + std::to_string(level0.width) +
                " × " + std::to_string(level0.height) +
                ": the metadata does not describe this file");
  }
  if (ome->mpp_x && ome->mpp_y) {
    mpp_x_ = ome->mpp_x;
    mpp_y_ = ome->mpp_y;
  }
  if (levels_.size() != 1) return;  // a pyramid in the main IFDs, which OpenSlide lists itself
  const auto sizes = subifd_levels(path_);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto [width, height] = sizes[i];
    // OpenSlide's own rule for a level's downsample: the mean of the two axes'.
    const double downsample =
        (static_cast<double>(levels_[0].width) / static_cast<double>(width) +
         static_cast<double>(levels_[0].height) / static_cast<double>(height)) /
        2.0;
    subifd_readers_.push_back(
        std::make_shared<const TiffLevelReader>(path_, 0, width, height, static_cast<int>(i)));
    levels_.push_back(Level{width, height, downsample});
  }
}

void Slide::read_subifd_region(int level, int64_t x, int64_t y, int64_t width, int64_t height,
                               Rgb background, uint8_t* rgb) const {
  const Level& size = this->level(level);
  for (int64_t i = 0; i < width * height; ++i) {
    rgb[3 * i] = background.r;
    rgb[3 * i + 1] = background.g;
    rgb[3 * i + 2] = background.b;
  }
  const int64_t x0 = std::max<int64_t>(x, 0), x1 = std::min(x + width, size.width);
  const int64_t y0 = std::max<int64_t>(y, 0), y1 = std::min(y + height, size.height);
  if (x0 >= x1 || y0 >= y1) return;
  std::vector<uint8_t> inside(static_cast<size_t>(3 * (x1 - x0) * (y1 - y0)));
  subifd_readers_[static_cast<size_t>(level - openslide_levels_)]->read_into(
      x0, y0, x1 - x0, y1 - y0, inside.data());
  for (int64_t row = y0; row < y1; ++row) {
    std::copy_n(inside.data() + 3 * (row - y0) * (x1 - x0), 3 * (x1 - x0),
                rgb + 3 * ((row - y) * width + (x0 - x)));
  }
}

void Slide::Close::operator()(openslide_t* handle) const noexcept { openslide().close(handle); }

openslide_t* Slide::handle() const {
  if (!handle_) throw Error("slide " + path_.string() + " was moved from");
  return handle_.get();
}

const Level& Slide::level(int index) const {
  if (index < 0 || index >= level_count()) {
    throw Error("slide " + path_.string() + " has no level " + std::to_string(index) +
                " (levels 0.." + std::to_string(level_count() - 1) + ")");
  }
  return levels_[static_cast<size_t>(index)];
}

std::optional<std::string> Slide::property(const std::string& name) const {
  const auto it = properties_.find(name);
  if (it == properties_.end()) return std::nullopt;
  return it->second;
}

void Slide::throw_if_failed(const std::string& what) const {
  if (const char* error = openslide().get_error(handle())) {
    // OpenSlide's words ("Bogus marker length") are a decoder's: the reader is told first what
    // they mean for the file and what to do.
    throw Error("slide " + path_.string() +
                ": its image data is damaged or incomplete; copy the file again or export it "
                "from the scanner again (OpenSlide failed " +
                what + ": " + one_line(error) + ")");
  }
}

std::pair<int64_t, int64_t> Slide::associated_image_size(const std::string& name) const {
  if (std::find(associated_names_.begin(), associated_names_.end(), name) ==
      associated_names_.end()) {
    throw Error("slide " + path_.string() + " has no associated image \"" + name + "\"");
  }
  int64_t width = -1, height = -1;
  openslide().get_associated_image_dimensions(handle(), name.c_str(), &width, &height);
  throw_if_failed("reading the size of associated image \"" + name + "\"");
  return {width, height};
}

RgbImage Slide::read_associated_image(const std::string& name, Rgb background) const {
  const auto [width, height] = associated_image_size(name);
  std::vector<uint32_t> argb(static_cast<size_t>(width * height));
  openslide().read_associated_image(handle(), name.c_str(), argb.data());
  throw_if_failed("reading associated image \"" + name + "\"");
  RgbImage image{width, height, std::vector<uint8_t>(static_cast<size_t>(3 * width * height))};
  rgb_from_premultiplied_argb(argb.data(), width * height, background, image.pixels.data());
  return image;
}

RgbImage Slide::read_region(int level, int64_t x, int64_t y, int64_t width, int64_t height,
                            Rgb background) const {
  RgbImage image{width, height, {}};
  if (width < 0 || height < 0) {
    throw Error("slide " + path_.string() + ": a region cannot have a negative size");
  }
  image.pixels.resize(static_cast<size_t>(3 * width * height));
  read_region_into(level, x, y, width, height, background, image.pixels.data());
  return image;
}

void Slide::read_region_into(int level, int64_t x, int64_t y, int64_t width, int64_t height,
                             Rgb background, uint8_t* rgb) const {
  const double downsample = this->level(level).downsample;
  if (width < 0 || height < 0) {
    throw Error("slide " + path_.string() + ": a region cannot have a negative size");
  }
  if (width == 0 || height == 0) return;
  if (level >= openslide_levels_) {
    read_subifd_region(level, x, y, width, height, background, rgb);
    return;
  }
  std::vector<uint32_t> argb(static_cast<size_t>(width * height));
  // OpenSlide places regions in level-0 coordinates. At levels whose downsample is not an
  // integer it resamples the sub-pixel remainder itself.
  const int64_t x0 = level == 0 ? x : std::llround(static_cast<double>(x) * downsample);
  const int64_t y0 = level == 0 ? y : std::llround(static_cast<double>(y) * downsample);
  openslide().read_region(handle(), argb.data(), x0, y0, level, width, height);
  throw_if_failed("reading level " + std::to_string(level) + " region x " + std::to_string(x) +
                  ", y " + std::to_string(y) + ", " + std::to_string(width) + "×" +
                  std::to_string(height));
  rgb_from_premultiplied_argb(argb.data(), width * height, background, rgb);
}

std::string slide_name(const std::filesystem::path& slide) {
  const std::filesystem::path p = slide.has_filename() ? slide : slide.parent_path();
  return p.filename().string();
}

std::string slide_stem(const std::filesystem::path& slide) {
  const std::filesystem::path p = slide.has_filename() ? slide : slide.parent_path();
  std::error_code ec;
  return std::filesystem::is_directory(p, ec) ? p.filename().string() : p.stem().string();
}

}  // namespace tessel::io
