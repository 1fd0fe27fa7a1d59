// Resolution as pathologists say it (--mpp 1.0, --magnification 10x, --level 2, with --base-mpp
// for slides whose file has no mpp), and the pure choice of the pyramid level to read and the
// scale to shrink it by so the image comes out at the asked resolution.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "io/slide.h"

namespace tessel::io {

// An mpp or magnification asked of a slide whose file gives no microns per pixel, with no base
// mpp given: the CLI's message says --base-mpp, the GUI's says Set mpp…. `asked` in a
// pathologist's words: "8 µm per pixel", "10× magnification".
class MissingMpp : public Error {
 public:
  MissingMpp(const std::string& message, std::string asked)
      : Error(message), asked_(std::move(asked)) {}
  const std::string& asked() const { return asked_; }

 private:
  std::string asked_;
};

// What the user asked for: one of a level, microns per pixel or a magnification, plus optionally
// the mpp of level 0 (overrides the file's, and is the only way to use mpp or magnification on a
// slide without one).
struct Resolution {
  enum class Kind { kLevel, kMpp, kMagnification };
  Kind kind = Kind::kLevel;
  double value = 0;  // the level index, microns per output pixel, or magnification (10 for 10×)
  std::optional<double> base_mpp;

  static Resolution at_level(int level) { return {Kind::kLevel, static_cast<double>(level), {}}; }
  static Resolution at_mpp(double mpp) { return {Kind::kMpp, mpp, {}}; }
  static Resolution at_magnification(double magnification) {
    return {Kind::kMagnification, magnification, {}};
  }
  Resolution& with_base_mpp(double mpp) {
    base_mpp = mpp;
    return *this;
  }
};

std::string to_string(const Resolution& resolution);  // "--mpp 1", "--magnification 10x", ...
std::ostream& operator<<(std::ostream& out, const Resolution& resolution);

// The CLI strings. mpp: a positive number, optionally followed by "mpp" ("1.0", "0.5mpp").
// Magnification: a positive number, optionally followed by "x" or "X" ("10x", "20X", "2.5x", "40").
// Throws tessel::Error naming the option and the text.
double parse_mpp(const std::string& text);
double parse_magnification(const std::string& text);

// A level within this relative distance of the asked mpp is read as it is: scanners' downsamples
// are not exact (TCGA level 1: 2.0005), and a 2% difference in scale is below what a network or
// a pathologist notices, while resampling would blur the pixels for nothing.
inline constexpr double kMppTolerance = 0.02;

// What the pyramid offers; a slide gives it through pyramid_of(slide).
struct Pyramid {
  std::string name;           // the file, for messages
  std::vector<Level> levels;  // level 0 first
  std::optional<double> mpp;  // microns per level-0 pixel, if the file says
  std::optional<double> objective_power;
};
Pyramid pyramid_of(const Slide& slide);  // mpp: the slide's x mpp (scanners' pixels are square)

// Where the pixels come from: output pixel (x, y) is the mean of the level's area
// [x·scale, (x+1)·scale) × [y·scale, (y+1)·scale).
struct ResolutionChoice {
  int level = 0;
  double scale = 1.0;         // level pixels per output pixel, ≥ 1 (1: the level as it is)
  std::optional<double> mpp;  // effective microns per output pixel, when the mpp is known
  // floor(level size / scale), so every output pixel's area lies inside the level (no partial
  // pixels of background at the right and bottom edges); at least 1.
  int64_t width = 0;
  int64_t height = 0;
  bool operator==(const ResolutionChoice&) const = default;
};

std::string to_string(const ResolutionChoice& choice);
std::ostream& operator<<(std::ostream& out, const ResolutionChoice& choice);

// The level to read and its scale. An exact match (within kMppTolerance) reads a level as it
// is; otherwise the coarsest level finer than the asked mpp is shrunk to it (never upsampled).
// Magnification m becomes mpp base_mpp · objective_power / m. Throws tessel::Error naming the
// file when: the level is out of range; mpp or magnification is asked of a slide without mpp and
// no base_mpp is given (MissingMpp); magnification is asked without an objective power in the file;
// the asked mpp is finer than level 0 (beyond the tolerance); the value is not positive.
ResolutionChoice choose_resolution(const Pyramid& pyramid, const Resolution& resolution);

}  // namespace tessel::io
