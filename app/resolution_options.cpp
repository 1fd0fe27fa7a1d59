#include "app/resolution_options.h"

#include <functional>

#include "core/error.h"

namespace tessel::app {
namespace {

// A CLI11 validator from one of io's parsers: its tessel::Error message becomes the usage error,
// without the leading "--mpp abc: " (CLI11 names the option itself).
CLI::Validator checked_by(const std::function<double(const std::string&)>& parse,
                          const std::string& name) {
  return CLI::Validator(
      [parse](std::string& text) {
        try {
          parse(text);
          return std::string();
        } catch (const Error& e) {
          const std::string message = e.what();
          const auto colon = message.find(": ");
          return colon == std::string::npos ? message : text + ": " + message.substr(colon + 2);
        }
      },
      "", name);
}

}  // namespace

void add_resolution_options(CLI::App& cmd, ResolutionOptions& options) {
  auto* mpp = cmd.add_option("--mpp", options.mpp,
                             "Read at this many microns per pixel (e.g. 1.0 or 0.5mpp), shrinking "
                             "the next finer level when no level matches")
                  ->check(checked_by(io::parse_mpp, "MPP"));
  auto* magnification =
      cmd.add_option("--magnification", options.magnification,
                     "Read at this magnification (e.g. 10x), through the slide's objective power")
          ->check(checked_by(io::parse_magnification, "MAG"));
  auto* level = cmd.add_option("--level", options.level, "Read this pyramid level as it is")
                    ->check(CLI::NonNegativeNumber);
  cmd.add_option("--base-mpp", options.base_mpp,
                 "Microns per pixel of level 0, for slides whose file has none (overrides the "
                 "file's)")
      ->check(CLI::PositiveNumber);
  mpp->excludes(magnification)->excludes(level);
  magnification->excludes(level);
}

std::optional<io::Resolution> resolution_of(const ResolutionOptions& options) {
  std::optional<io::Resolution> resolution;
  if (!options.mpp.empty()) {
    resolution = io::Resolution::at_mpp(io::parse_mpp(options.mpp));
  } else if (!options.magnification.empty()) {
    resolution = io::Resolution::at_magnification(io::parse_magnification(options.magnification));
  } else if (options.level >= 0) {
    resolution = io::Resolution::at_level(options.level);
  } else if (options.base_mpp > 0) {
    resolution = io::Resolution::at_level(0);
  }
  if (resolution && options.base_mpp > 0) resolution->with_base_mpp(options.base_mpp);
  return resolution;
}

}  // namespace tessel::app
