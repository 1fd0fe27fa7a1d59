// One slide as the engine sees it in a run: read at the configured resolution (io/resolution.h),
// optionally cropped to the tissue's bounding box, through a view (augmentation). Shared by
// training, evaluation and heatmaps so all three see the same pixels.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "core/tile_source.h"
#include "io/resolution.h"
#include "io/slide.h"
#include "io/slide_tile_source.h"
#include "pipelines/train_config.h"
#include "pipelines/view_source.h"

namespace tessel::pipelines {

struct SlideInput {
  std::shared_ptr<const io::Slide> slide;
  io::ResolutionChoice choice;                  // level, scale, size at the run's resolution
  std::shared_ptr<io::SlideTileSource> pixels;  // the slide at that resolution
  core::Region crop;                            // the part the engine sees, in those pixels
  std::shared_ptr<core::TileSource> view;       // what the engine reads
  double level0_per_pixel = 1;                  // level-0 pixels per pixel of `pixels`
};

// Tissue bounding boxes found so far, by slide path (a mask is computed once per slide).
using TissueCropCache = std::map<std::string, core::Region>;

// Opens `slide` as `config` says (resolution, tissue_bbox) and applies `view`'s geometry and
// colour (its crop is replaced by the tissue crop when tissue_bbox is set). Throws tessel::Error.
SlideInput open_slide_input(const TrainConfig& config, const std::filesystem::path& slide,
                            View view = {}, TissueCropCache* tissue_crops = nullptr);

io::Resolution resolution_of(const TrainConfig& config);

}  // namespace tessel::pipelines
