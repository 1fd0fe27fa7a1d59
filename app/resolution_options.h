// The four resolution options (--mpp, --magnification, --level, --base-mpp; io/resolution.h),
// added the same way to every subcommand that reads slides (inspect now, train and heatmap later)
// so they parse and mean the same everywhere.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "io/resolution.h"

namespace tessel::app {

struct ResolutionOptions {
  std::string mpp;            // "" when not given
  std::string magnification;  // "" when not given
  int level = -1;             // -1 when not given
  double base_mpp = 0;        // 0 when not given
};

// Adds the options to `cmd`: at most one of --mpp, --magnification, --level; malformed values
// are command-line errors (exit code 2).
void add_resolution_options(CLI::App& cmd, ResolutionOptions& options);

// What the options ask for; nullopt when none was given. With only --base-mpp: level 0.
std::optional<io::Resolution> resolution_of(const ResolutionOptions& options);

}  // namespace tessel::app
