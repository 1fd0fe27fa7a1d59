#include "io/resolution.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace tessel::io {
namespace {

// "1.0" → 1; with `suffixes` ("mpp"; "x", "X") allowed once at the end. Positive and finite.
double parse_positive(const std::string& text, const std::string& option,
                      const std::vector<std::string>& suffixes, const std::string& example) {
  std::string number = text;
  for (const std::string& suffix : suffixes) {
    if (number.size() > suffix.size() && number.ends_with(suffix)) {
      number.resize(number.size() - suffix.size());
      break;
    }
  }
  double value = 0;
  size_t used = 0;
  try {
    value = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != number.size() || !std::isfinite(value) || value <= 0) {
    throw Error(option + " " + text + ": expected a positive number, e.g. " + example);
  }
  return value;
}

std::string number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace

std::string to_string(const Resolution& resolution) {
  std::string text;
  switch (resolution.kind) {
    case Resolution::Kind::kLevel:
      text = "--level " + number(resolution.value);
      break;
    case Resolution::Kind::kMpp:
      text = "--mpp " + number(resolution.value);
      break;
    case Resolution::Kind::kMagnification:
      text = "--magnification " + number(resolution.value) + "x";
      break;
  }
  if (resolution.base_mpp) text += " --base-mpp " + number(*resolution.base_mpp);
  return text;
}

std::ostream& operator<<(std::ostream& out, const Resolution& resolution) {
  return out << to_string(resolution);
}

double parse_mpp(const std::string& text) {
  return parse_positive(text, "--mpp", {"mpp"}, "--mpp 0.5 or --mpp 0.5mpp");
}

double parse_magnification(const std::string& text) {
  return parse_positive(text, "--magnification", {"x", "X"}, "--magnification 10x");
}

Pyramid pyramid_of(const Slide& slide) {
  return {slide.path().string(), slide.levels(), slide.mpp_x(), slide.objective_power()};
}

std::string to_string(const ResolutionChoice& choice) {
  std::ostringstream out;
  out << "level " << choice.level << " × 1/" << choice.scale << " → " << choice.width << " × "
      << choice.height << " px";
  if (choice.mpp) out << " at " << *choice.mpp << " mpp";
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const ResolutionChoice& choice) {
  return out << to_string(choice);
}

ResolutionChoice choose_resolution(const Pyramid& pyramid, const Resolution& resolution) {
  const std::string name = pyramid.name + ": ";
  if (pyramid.levels.empty()) throw Error(name + "the slide has no levels");
  if (resolution.base_mpp && !(*resolution.base_mpp > 0 && std::isfinite(*resolution.base_mpp))) {
    throw Error(name + "--base-mpp must be a positive number of microns per level-0 pixel");
  }
  const std::optional<double> base_mpp = resolution.base_mpp ? resolution.base_mpp : pyramid.mpp;
  const int level_count = static_cast<int>(pyramid.levels.size());
  const auto mpp_of = [&](int level) -> std::optional<double> {
    if (!base_mpp) return std::nullopt;
    return *base_mpp * pyramid.levels[static_cast<size_t>(level)].downsample;
  };
  const auto as_is = [&](int level) {
    const Level& info = pyramid.levels[static_cast<size_t>(level)];
    return ResolutionChoice{level, 1.0, mpp_of(level), info.width, info.height};
  };

  if (resolution.kind == Resolution::Kind::kLevel) {
    const double index = resolution.value;
    if (index != std::floor(index) || index < 0 || index >= level_count) {
      throw Error(name + "no level " + number(index) + ": the slide has levels 0 to " +
                  std::to_string(level_count - 1) + " (see tessel inspect)");
    }
    return as_is(static_cast<int>(index));
  }

  const std::string asked = to_string(resolution);
  if (!(resolution.value > 0 && std::isfinite(resolution.value))) {
    throw Error(name + asked + ": must be a positive number");
  }
  if (!base_mpp) {
    throw MissingMpp(
        name + "the file gives no microns per pixel, so " + asked +
            " cannot be resolved; use --level, or give --base-mpp (the mpp of level 0)",
        resolution.kind == Resolution::Kind::kMpp ? number(resolution.value) + " µm per pixel"
                                                  : number(resolution.value) + "× magnification");
  }
  double mpp = resolution.value;
  if (resolution.kind == Resolution::Kind::kMagnification) {
    if (!pyramid.objective_power) {
      throw Error(name + "the file gives no objective power, so " + asked +
                  " cannot be resolved; use --mpp or --level instead");
    }
    mpp = *base_mpp * *pyramid.objective_power / resolution.value;
  }

  // The closest level within the tolerance, read as it is.
  int best = -1;
  double best_distance = kMppTolerance;
  for (int level = 0; level < level_count; ++level) {
    const double distance = std::abs(*mpp_of(level) / mpp - 1.0);
    if (distance <= best_distance) {
      best = level;
      best_distance = distance;
    }
  }
  if (best >= 0) return as_is(best);

  // Otherwise the coarsest level that is still finer, shrunk: never upsample.
  int source = -1;
  for (int level = 0; level < level_count; ++level) {
    if (*mpp_of(level) < mpp && (source < 0 || *mpp_of(level) > *mpp_of(source))) source = level;
  }
  if (source < 0) {
    throw Error(name + asked + " (" + number(mpp) + " µm per pixel) is finer than level 0 (" +
                number(*mpp_of(0)) + " µm per pixel); Tessel does not upsample");
  }
  const Level& info = pyramid.levels[static_cast<size_t>(source)];
  const double scale = mpp / *mpp_of(source);
  // floor: the last output pixel's area ends inside the level. The relative 1e-9 keeps a size
  // that divides exactly (10000 px by 2 / 1.0004 is 5002) from rounding down to one less.
  const auto out_size = [&](int64_t size) {
    const double exact = static_cast<double>(size) / scale;
    return std::max<int64_t>(1, static_cast<int64_t>(std::floor(exact * (1 + 1e-9))));
  };
  return {source, scale, mpp, out_size(info.width), out_size(info.height)};
}

}  // namespace tessel::io
