// One slide as the engine sees it in a run: read at the configured resolution (io/resolution.h),
// optionally cropped to the tissue's bounding box, through a view (augmentation). Shared by
// training, evaluation and heatmaps so all three see the same pixels.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "core/plan/plan.h"
#include "core/plan/planner.h"
#include "core/plan/split.h"
#include "core/tile_source.h"
#include "io/resolution.h"
#include "io/slide.h"
#include "io/slide_tile_source.h"
#include "io/tissue.h"
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

// What a manifest row may add for its slide (columns `mpp` and `roi`).
struct SlideOptions {
  std::optional<double> base_mpp;  // µm per level-0 pixel, over the file's and the config's
  std::filesystem::path roi;       // GeoJSON (QuPath export): train on its polygons
};
// Reads the optional `mpp` and `roi` columns of a manifest row (`roi` relative to the CSV).
// Throws tessel::Error naming the CSV line for a value that is not a positive number.
SlideOptions slide_options(const std::map<std::string, std::string>& metadata,
                           const std::filesystem::path& manifest, int line);

// Tissue masks made so far, by slide path: a run makes each slide's mask once, for both the
// bounding box and the fill, not once per epoch.
using TissueMaskCache = std::map<std::string, std::shared_ptr<const io::TissueMask>>;

// Opens `slide` as `config` says (resolution; tissue_bbox, tissue_fill) and the row's options say
// (base mpp; ROI), and applies `view`'s geometry and colour over the level-0 training region
// (tissue box ∩ ROI box, mapped to the resolution's pixels). Glass under tissue_fill and what
// lies outside the ROI's polygons (their holes included) read as empty glass's colour, declared
// as the image's background (MaskedTileSource). Throws tessel::Error.
SlideInput open_slide_input(const TrainConfig& config, const std::filesystem::path& slide,
                            const SlideOptions& options = {}, View view = {},
                            TissueMaskCache* tissue_masks = nullptr);

io::Resolution resolution_of(const TrainConfig& config);

// The image regions `plan`'s first segment reads in a training step's forward over `source`, tile
// by tile in order, its glass tiles (which read nothing; `glass` on and the source's background)
// left out: what the step will ask of the source first, to read ahead (TileSource::will_read).
// A scheme may read a little more (sub-segments' inner checkpoints), which the step's own
// schedule then adds. A step split over `ranks` ranks: rank `rank`'s tiles only (rank_tiles).
std::vector<core::Region> first_reads(const core::Graph& graph, const core::Plan& plan,
                                      const core::TileSource& source, bool glass, int rank = 0,
                                      int ranks = 1);

// `tessel plan --slide`: the plan training makes for one slide as `config` says (resolution,
// tissue_bbox, tissue_fill and glass, model, head and budget) and the ROI in `options`: the
// image the engine sees and, where tissue_fill gives it a background, its glass (core::Plan::
// glass). Throws tessel::Error naming the slide.
struct SlidePlan {
  core::Plan plan;
  std::string table;        // core::to_string(plan)
  std::string description;  // the slide, its level and scale, the image's size, its background
};
// `ranks`: the plan for a step split over that many ranks (parallel: slide or hybrid,
// docs/slide-parallel.md): a tile per rank of every pass, and dense (a split step computes its
// glass as tissue); the table then ends with what each rank runs and exchanges, and the step's
// time with its exchanges at `link_bytes_per_second`.
SlidePlan plan_slide(const TrainConfig& config, const std::filesystem::path& slide,
                     const SlideOptions& options = {}, int ranks = 1,
                     double link_bytes_per_second = core::kLoopbackBytesPerSecond);

// The planner's options of a training run with `config` (strategy, the optimizer's state per
// parameter): `tessel plan --slide` plans as training does. The offload prices' measurement is
// the caller's.
core::PlanOptions training_plan_options(const TrainConfig& config);

// `tessel gradcheck --slide` and `tessel bench step --slide`: the whole image training sees of
// one slide (open_slide_input as `config` says: resolution, tissue box, tissue_fill), read into
// memory, with its background where tissue_fill gives it one and `config.glass` is on. Throws
// tessel::Error naming the slide when the image has more than `max_pixels` pixels (these
// commands hold it whole; plain autograd runs over all of it).
struct SlideImage {
  at::Tensor pixels;                           // float 1×C×H×W, normalised as training's
  std::optional<core::Background> background;  // tissue_fill's glass
  std::string description;                     // as SlidePlan's
};
SlideImage read_slide_image(const TrainConfig& config, const std::filesystem::path& slide,
                            int64_t max_pixels, const SlideOptions& options = {});

// Throws tessel::Error when `height`×`width` pixels (a slide or ROI at `config`'s resolution) are
// too small for `graph`: the size, the resolution and the smallest size the network takes, not
// the first layer whose kernel outgrew its input.
void check_input_size(const core::Graph& graph, const TrainConfig& config, int64_t height,
                      int64_t width);

}  // namespace tessel::pipelines
