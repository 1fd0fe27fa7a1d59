// `--slide S [--roi R] [key=value ...]` on `tessel plan`, `gradcheck` and `bench step`: one slide
// as a training run sees it (resolution, tissue box, tissue_fill's glass), the run's settings
// given as key=value words (docs/train-config.md). Full build only (io/ reads the slide).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pipelines/slide_input.h"
#include "pipelines/train_config.h"

namespace tessel::app {

struct SlideArgs {
  std::string slide, roi;
  std::vector<std::string> overrides;  // key=value
};

// Adds --slide, --roi and the positional key=value settings to `cmd`; `what` says what the
// slide is for in --slide's help, `settings` what the settings set.
void add_slide_options(CLI::App* cmd, SlideArgs& args, const std::string& what,
                       const std::string& settings);

// The settings that say how a slide is read (its resolution, tissue box, tissue_fill's glass):
// all that `bench step --slide` and `gradcheck --slide` take from them, the rest of the step from
// their flags.
inline const char* const kSlideReadKeys =
    "mpp, magnification, level, base_mpp, tissue_bbox, tissue_fill, glass";

// Throws tessel::Error, naming the key and the flag to use, for a setting that is not one of
// kSlideReadKeys: `command` (`bench step`, `gradcheck`) would not read it.
void refuse_unread_settings(const SlideArgs& args, const std::string& command);

// `tessel plan --slide` plans as training does, from the settings: throws tessel::Error for any
// of `flags` given on `cmd`, naming the setting to write instead (flag → key; an empty key: the
// flag has none, and goes without --slide).
void refuse_flags_with_slide(const CLI::App& cmd,
                             const std::vector<std::pair<std::string, std::string>>& flags);

// The settings as training reads them (no manifest is read; the config's own check requires
// one, so a placeholder stands in). Throws tessel::Error for a bad key or value.
pipelines::TrainConfig slide_config(const SlideArgs& args);

// With --slide (else nullopt): the slide's whole image, read into memory
// (pipelines::read_slide_image), at most `max_pixels`; its description goes to standard error.
// Throws tessel::Error for --size given with --slide, or settings or --roi without it.
std::optional<pipelines::SlideImage> slide_image(const SlideArgs& args, const CLI::App& cmd,
                                                 int64_t max_pixels);

}  // namespace tessel::app
