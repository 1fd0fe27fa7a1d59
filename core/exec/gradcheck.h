// The engine's first law, checked: one step tiled and one plain on the same image and weights,
// every output and gradient compared by relative error (`tessel gradcheck`, the core tests,
// gpu-check). A check must be able to fail: NaN or infinity anywhere, a quantity on one side
// only, or a plan that does not tile is never a pass.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "core/exec/executor.h"
#include "core/graph/graph.h"
#include "core/plan/planner.h"
#include "core/tile_source.h"

namespace tessel::core {

// One compared quantity of a step: its loss, its output, the image's gradient, one parameter's
// gradient, or one buffer after the step (batch norm's running statistics).
struct Quantity {
  std::string name;  // "loss", "output", "input gradient", "gradient of NAME", "buffer NAME"
  // max |a − b| / scale, where scale is max |b|, raised to `floor` where that is larger: a
  // reference that is (near) zero (a dead unit's bias gradient, a loss whose terms cancel) is
  // judged against the step's scale, not its own rounding noise.
  double max_error = 0;
  // ‖a − b‖₂ / max(‖b‖₂, floor × √n): the reduced precisions' measure.
  double norm_error = 0;
  double floor = 0;      // the scale the error was raised to (0: none)
  bool floored = false;  // max |b| < floor: judged against the floor
  // Why the quantity fails whatever the bar: "NaN in the tiled step", "inf in the plain step",
  // "only in the tiled step", "shapes differ". Empty when the errors are meaningful.
  std::string fault;
  bool ok() const { return fault.empty(); }
};

struct Comparison {
  std::vector<Quantity> quantities;  // loss, output, input gradient, parameters, buffers
  int64_t offload_bytes = 0;         // the tiled step's bytes to and from the host or disk tier
  // The tiled step's glass tiles, not run (core/exec/glass.h): the check of glass checks them.
  int64_t glass_forward_tiles = 0, glass_backward_tiles = 0;
  int64_t glass_filled = 0;  // node tiles computed over a box, the rest filled
  int64_t summed_bytes = 0;  // a step split over ranks: what this rank gave to the sums

  // The largest max_error; +infinity where any quantity has a fault or a NaN error (a NaN never
  // compares below a bar, and neither does this).
  double worst() const;
  // The quantity behind worst() (the first with a fault, else the largest error); null if none.
  const Quantity* worst_quantity() const;
  const Quantity* find(const std::string& name) const;
  // Every fault, one per line, with the quantity named ("" when none).
  std::string faults() const;
  std::string to_string() const;
};

// The floor below which a gradient's reference counts as (near) zero, as a share of the step's
// largest gradient (the largest |b| over every parameter gradient and the image's): a float64
// step's rounding is ~1e-16 of it, a one-pixel tiling error many orders more.
constexpr double kZeroScale = 1e-3;

// Whether a tiled step in `precision` (float32 weights) rounds like the plain one, from `c`
// (tiled against plain) and the two steps' own rounding, quantity by quantity: `floor` (plain
// against plain float64, PrecisionCheck::plain_floor) and, where given, `tiled_floor` (tiled
// against the same plan in float64). |tiled − plain| ≤ |tiled − tiled64| + |tiled64 − plain64| +
// |plain64 − plain|, the middle term the float64 first law's (checked on its own:
// PrecisionCheck), so each quantity's error must lie within max(least, 2 × the larger floor):
// float32 its max_error, with least 1e-4; tf32 and bf16 its norm_error, with least 4 unit
// roundoffs (2^-11, 2^-8). The tiled floor may exceed plain's (a weight gradient summed over
// tiles cancels where plain's does not: resnet18 with train-mode batch norm in float32 rounds
// up to ~10× plain's), but by at most kTiledRounding, so a fault of the reduced precision's own
// path cannot raise its bar. Any fault, or a quantity the floor lacks, fails.
bool within_rounding(const Comparison& c, const Comparison& floor, Precision precision,
                     const Comparison& tiled_floor = {});
constexpr double kTiledRounding = 32;
// The least bar within_rounding applies to each quantity: 1e-4, 4 × 2^-11, 4 × 2^-8.
double least_tolerance(Precision precision);
// The bar within_rounding applies to quantity `q` of a comparison against `floor`; the error
// it judges is bar_error(q, precision).
double bar_for(const Quantity& q, const Comparison& floor, Precision precision,
               const Comparison& tiled_floor = {});
double bar_error(const Quantity& q, Precision precision);
// The quantity furthest over (or nearest) its bar: the largest bar_error / bar_for.
const Quantity* tightest(const Comparison& c, const Comparison& floor, Precision precision,
                         const Comparison& tiled_floor = {});

// ‖a − b‖₂ / max(‖b‖₂, 1e-30) over the tensors as one vector, in float64 (NaN where either
// holds one).
double norm_relative_error(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b);

// max |a - b| / max(max |b|, 1e-30) (NaN where either holds one).
double relative_error(const at::Tensor& a, const at::Tensor& b);

// Random weights of the parameters' dtype (frozen batch norm statistics too) from `seed`.
void randomise(Graph& graph, uint64_t seed);

// One step of `plan` and one plain step on `image` (1×C×H×W), same weights and running
// statistics; the loss is a fixed random projection of the output (linear, so no gradient
// vanishes or saturates). Both steps run as `plan` was made: with the image's gradient exactly
// where plan.input_gradient says (training's step has none); options.input_gradient must not
// ask for more. options.inject, if any, goes to the tiled step only.
// `background`, when given, is the image's constant region, declared to the tiled step's source
// (TileSource::background; the plain step reads the same pixels). The image's gradient is then
// compared pixel by pixel off it and as a sum per channel over it (where a max pool's window
// inside it holds ties, plain and tiled may route to different positions in it, both exact).
Comparison compare_with_plain(Graph& graph, const Plan& plan, const at::Tensor& image,
                              uint64_t seed, const StepOptions& options = {},
                              const Background* background = nullptr);

// The step split over ranks (StepOptions::ranks; docs/slide-parallel.md), as threads of this
// process (LocalRanks), one rank per replica: each the same network with the same weights and
// running statistics. Against one plain step on replicas[0]: a comparison per rank, since every
// rank must end with the whole image's gradients. A rank's failure is rethrown (the first).
// `background`, as compare_with_plain's, declared to every rank's source.
std::vector<Comparison> compare_split_with_plain(const std::vector<Graph*>& replicas,
                                                 const Plan& plan, const at::Tensor& image,
                                                 uint64_t seed, const StepOptions& options = {},
                                                 const Background* background = nullptr);

// One rank's part of the same check where each rank is a process (options.ranks, from a
// process group): the split step, collective with the other ranks, then a plain step here.
Comparison compare_rank_with_plain(Graph& graph, const Plan& plan, const at::Tensor& image,
                                   uint64_t seed, const StepOptions& options,
                                   const Background* background = nullptr);

// A check in a reduced precision (float32, tf32, bf16: the graph's dtype and options.precision):
// four steps from the same weights and running statistics, tiled and plain, each also in
// float64. `exact` is the float64 first law on the same plan (within 1e-10 whatever the
// precision: the reduced precision's rounding hides no tiling error behind its own noise); the
// floors are each step's own rounding against its float64 run, and `tiled_vs_plain` is judged
// by within_rounding against them. The graph comes back in its dtype with its weights and
// running statistics as it found them.
struct PrecisionCheck {
  Comparison tiled_vs_plain, plain_floor, tiled_floor, exact;
  bool passed(Precision precision, double exact_bar) const {
    return exact.worst() <= exact_bar &&
           within_rounding(tiled_vs_plain, plain_floor, precision, tiled_floor);
  }
};
PrecisionCheck check_in_precision(Graph& graph, const Plan& plan, const at::Tensor& image,
                                  uint64_t seed, const StepOptions& options = {},
                                  const Background* background = nullptr);

// A seeded background over an image of `shape` for checks and benchmarks (`gradcheck
// --background F`, `bench step --background F`): cells of `cell` pixels, about `fraction` of
// them constant, as blobs with holes (a smooth random field's level set) crossed by bridges one
// cell wide (tissue through glass and glass through tissue: regions narrower than a receptive
// field). Fraction 0: none; 1: every cell. Its colour a seeded value per channel.
Background synthetic_background(const Shape& shape, int64_t cell, double fraction, uint64_t seed);
// The pixels of `background`'s cells (1×1×H×W bool, on the CPU).
at::Tensor background_pixels(const Background& background);
// `image` (1×C×H×W) with `background`'s cells painted its colour.
at::Tensor paint_background(const at::Tensor& image, const Background& background);

// Whether some segment of `plan` runs as more than one tile: a plan that does not compares plain
// with plain, and a check of it cannot fail.
bool tiles(const Plan& plan);

}  // namespace tessel::core
