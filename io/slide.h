// A whole-slide image opened with OpenSlide: levels, microns per pixel, properties, associated
// images and region reads as RGB. Errors throw tessel::Error naming the file; pixels are never
// silently zero-filled (a blank tile in training is a wrong gradient).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

// OpenSlide's opaque handle (openslide.h), declared here so callers need not include it.
typedef struct _openslide openslide_t;  // NOLINT(modernize-use-using): must match openslide.h

namespace tessel::io {

class TiffLevelReader;

struct Rgb {
  uint8_t r = 255, g = 255, b = 255;  // white: the glass of a slide
  bool operator==(const Rgb&) const = default;
};

// Interleaved 8-bit RGB, row-major: pixel (x, y) starts at pixels[3 * (y * width + x)].
struct RgbImage {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;
};

struct Level {
  int64_t width = 0;
  int64_t height = 0;
  double downsample = 1.0;  // level-0 pixels per pixel of this level
};

class Slide {
 public:
  // `path` is a slide file, or a folder holding the DICOM files of one DICOM whole-slide image
  // (io/dicom_folder.h; path() stays the folder). Throws tessel::Error when the file is missing,
  // is not a format OpenSlide supports, or is a slide OpenSlide recognises but cannot open
  // (broken); the message says which.
  explicit Slide(const std::filesystem::path& path);
  // Moves leave the source without a handle; its reads then throw. Copies would share a handle.
  Slide(Slide&&) noexcept = default;
  Slide& operator=(Slide&&) noexcept = default;
  Slide(const Slide&) = delete;
  Slide& operator=(const Slide&) = delete;
  ~Slide() = default;

  const std::filesystem::path& path() const { return path_; }
  const std::string& vendor() const { return vendor_; }
  int level_count() const { return static_cast<int>(levels_.size()); }
  const Level& level(int index) const;  // throws on a level outside [0, level_count)
  const std::vector<Level>& levels() const { return levels_; }
  std::optional<double> mpp_x() const { return mpp_x_; }  // microns per level-0 pixel
  std::optional<double> mpp_y() const { return mpp_y_; }
  std::optional<double> objective_power() const { return objective_power_; }
  const std::map<std::string, std::string>& properties() const { return properties_; }
  std::optional<std::string> property(const std::string& name) const;

  // Associated images ("label", "macro", "thumbnail", ... as the vendor names them).
  const std::vector<std::string>& associated_image_names() const { return associated_names_; }
  std::pair<int64_t, int64_t> associated_image_size(const std::string& name) const;  // w, h
  RgbImage read_associated_image(const std::string& name, Rgb background = {}) const;

  // Pixels [x, x + width) × [y, y + height) of `level`, in that level's coordinates (unlike
  // openslide_read_region, which takes level-0 coordinates). Parts outside the level, and
  // transparent pixels, come out as `background`. Safe to call from several threads at once.
  RgbImage read_region(int level, int64_t x, int64_t y, int64_t width, int64_t height,
                       Rgb background = {}) const;
  // The same into `rgb`, which holds 3 * width * height bytes.
  void read_region_into(int level, int64_t x, int64_t y, int64_t width, int64_t height,
                        Rgb background, uint8_t* rgb) const;

 private:
  struct Close {
    void operator()(openslide_t* handle) const noexcept;
  };
  openslide_t* handle() const;  // throws when moved from
  void read_ome_xml(const std::string& prefix);
  void read_subifd_region(int level, int64_t x, int64_t y, int64_t width, int64_t height,
                          Rgb background, uint8_t* rgb) const;
  void throw_if_failed(const std::string& what) const;

  std::filesystem::path path_;
  // First member after path_: closed even when the constructor throws after opening.
  std::unique_ptr<openslide_t, Close> handle_;
  std::string vendor_;
  std::vector<Level> levels_;
  std::optional<double> mpp_x_, mpp_y_, objective_power_;
  std::map<std::string, std::string> properties_;
  std::vector<std::string> associated_names_;
  // An OME-TIFF's smaller levels kept in SubIFDs, which OpenSlide does not list: levels
  // openslide_levels_, openslide_levels_ + 1, ..., read with libvips.
  int openslide_levels_ = 0;
  std::vector<std::shared_ptr<const TiffLevelReader>> subifd_readers_;
};

// OpenSlide's premultiplied ARGB (one uint32 per pixel, as openslide_read_region writes it) to
// RGB composited over `background`: un-premultiplied colour c with alpha a over background b is
// c·a + b·(1 − a), and c·a is the premultiplied value itself, so out = p + b·(255 − a)/255.
void rgb_from_premultiplied_argb(const uint32_t* argb, int64_t count, Rgb background, uint8_t* rgb);

// A slide's name for the files written for it and for messages: its file's name, or its folder's
// for a DICOM slide given as a folder, also with a trailing slash ("dicom/cmu-1/" is "cmu-1", not
// ""); slide_stem without a file's extension (a folder's name whole).
std::string slide_name(const std::filesystem::path& slide);
std::string slide_stem(const std::filesystem::path& slide);

}  // namespace tessel::io
