// `tessel plan` and `tessel gradcheck` as pipeline calls: plan a model on an image size under a
// budget, and check the first law (tiled gradients = plain gradients) on random data.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/exec/gradcheck.h"
#include "core/plan/glass.h"
#include "core/plan/plan.h"
#include "core/plan/planner.h"
#include "core/plan/split.h"

namespace tessel::pipelines {

// A network the caller builds for `classes` (a checkpoint's, `--model NET.h5`: this library
// reads no files), used instead of the zoo's `model` when set.
using NetworkBuilder = std::function<core::Graph(int64_t classes)>;

struct PlanRequest {
  std::string model = "vgg16";  // a models/zoo.h name
  NetworkBuilder network;       // when set, instead of `model`
  int64_t height = 0, width = 0;
  int64_t budget_bytes = 0;
  core::Strategy strategy = core::Strategy::kAuto;
  int64_t classes = 2;
  std::string norm = "frozen";  // the zoo's batch norms: frozen, batch or group
  // Offload and recompute prices to plan at instead of this machine's measured ones (another
  // machine's: a GPU's, from its bench step JSON line; or fixed, to compare two planners).
  std::optional<core::OffloadPrices> prices;
  bool keep_inner =
      false;  // every inner checkpoint kept (core::PlanOptions::Overrides::drop_inner kNever)
  // A seeded synthetic background over about this fraction of the image (as gradcheck's):
  // the plan prices and reports its glass tiles.
  std::optional<double> background;
  // Slide-parallel: the step split over this many ranks (core::PlanOptions::ranks), its
  // exchanges priced at this link's speed (core::split_time).
  int ranks = 1;
  double link_bytes_per_second = core::kLoopbackBytesPerSecond;
};

struct PlanReport {
  core::Plan plan;
  std::string table;  // readable
  std::string json;   // machine-readable
};

PlanReport plan_model(const PlanRequest& request);

struct GradcheckRequest {
  std::string model = "random";  // a models/zoo.h name, or "random"
  NetworkBuilder network;        // when set, instead of `model`
  std::string norm = "frozen";   // the zoo's batch norms: frozen, batch or group
  // The zoo's head: "avg" or "max" (global pool) or "attention" (gated or not, one branch or
  // one per class). Random networks draw their own.
  std::string pool = "avg";
  bool gated = true;
  int64_t branches = 1;
  int64_t height = 0, width = 0;
  core::Strategy strategy = core::Strategy::kGrid;
  int64_t tile = 0;  // output pixels per tile of each segment; 0: 3 tiles per axis
  // The plan training makes under this budget (0: the fixed tiles above): its search picks
  // the schemes (kept graphs, barrier rounds, inner checkpoints recomputed or offloaded, partly
  // resident checkpoints), at `prices` where given, else this machine's.
  int64_t budget_bytes = 0;
  std::optional<core::OffloadPrices> prices;
  uint64_t seed = 1;
  bool float64 = true;
  // With float64 false: float32 (exact), tf32 or bf16 (core/device/precision.h), both steps alike.
  core::Precision precision = core::Precision::kFloat32;
  // kHost or kDisk: every checkpoint candidate becomes a checkpoint and moves to that tier, in
  // small blocks behind a small window, so the tile store's whole path is exercised.
  core::PlanOptions::Offload offload = core::PlanOptions::Offload::kNever;
  std::string scratch_dir;      // empty: the system's temporary directory
  std::string device = "auto";  // core::resolve_device: cpu, cuda, cuda:N, auto
  // Training's step has no image gradient; true checks the step that also returns it.
  bool input_gradient = false;
  core::Fault inject = core::Fault::kNone;  // a deliberate fault in the tiled step
  // The image with a seeded background covering about this fraction of it (0 to 1;
  // core::synthetic_background), declared to the tiled step, which skips its glass tiles.
  std::optional<double> background;
  // Pixels to check on instead of random ones (float 1×C×H×W, e.g. a slide's:
  // read_slide_image), with their own background where they have one (not with `background`);
  // height and width are the image's.
  at::Tensor image;
  std::optional<core::Background> image_background;
  // More than 1: the tiled step split over this many ranks (threads of this process, one network
  // replica each; docs/slide-parallel.md), every rank's gradients checked. Float64 only.
  int ranks = 1;
  // Instead: this process is one rank of a process group (`--distributed`), the step split over
  // the group's processes; this rank's gradients are checked against a plain step here.
  core::Ranks* group = nullptr;
};

struct GradcheckReport {
  core::Comparison comparison;
  // Float64: every quantity within 1e-10. Otherwise the float64 pair within 1e-10 and every
  // quantity within its rounding bar (core::PrecisionCheck, core::within_rounding).
  bool float64 = true;
  core::Precision precision = core::Precision::kFloat32;
  // Not in float64: the two steps' own rounding against float64 (core::PrecisionCheck), and the
  // float64 first law on the same plan, weights and image.
  core::Comparison floor, tiled_floor, exact;
  std::string plan_table;
  std::vector<std::string> schemes;  // core::schemes_of the plan checked
  int64_t tiled_barriers = 0;        // barrier nodes in segments of more than one tile
  std::string device;                // where both steps ran: "cpu", "cuda:0"
  int ranks = 1;                     // the ranks the tiled step was split over
  int worst_rank = 0;                // of those, the one whose comparison is reported
  bool processes = false;            // the ranks were processes (GradcheckRequest::group)
  // With a background: the share of the image it covers, and what the plan skips
  // (core::summarize: glass tiles, the forward's FLOPs).
  std::optional<core::GlassSummary> glass;  // as the plan says (core::Plan::glass)
  // The tiled step threw (an engine error during the check): a failure, with its message.
  std::string step_error;
  bool passed() const {
    if (!step_error.empty()) return false;
    if (float64) return comparison.worst() <= kFloat64Bar;
    return exact.worst() <= kFloat64Bar &&
           core::within_rounding(comparison, floor, precision, tiled_floor);
  }
  static constexpr double kFloat64Bar = 1e-10;
};

// The cells of a synthetic background (`--background F`) over an image: about 64 across its
// shorter side, at least 2 pixels.
int64_t background_cell(const core::Shape& image);

// Throws tessel::Error where the check cannot be made: a bad model or size, a plan that does
// not tile (it would compare plain with plain), a fault the network cannot take.
GradcheckReport gradcheck(const GradcheckRequest& request);

}  // namespace tessel::pipelines
