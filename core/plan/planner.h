// The planner: segments, checkpoints and tile partitions under a memory budget, with a predicted
// peak by category (SFT §4.2 Listing 3 for segments; LR-CNN §III-C for separate forward and
// backward tile counts). Pure and fast: no tensors are allocated.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "core/graph/cells.h"
#include "core/graph/graph.h"
#include "core/plan/plan.h"

namespace tessel::core {

// A plan request's options, grouped by who sets them: the request (every caller, from its
// configuration), the cost model's prices (guessed here, measured where asked), and overrides
// of the planner's own choices (tests, benchmarks, the CLI's expert flags).
struct PlanOptions {
  // Offload (core/store/tile_store.h): kAuto moves checkpoints out of the budget when no plan with
  // every checkpoint resident fits (any checkpoint set), keeping as many resident as fit, or,
  // with measured prices, when the resident plan recomputes much and an offloading plan costs
  // less and fits the scratch directory (make_plan's bounded search); among offloading plans
  // the cheapest wins, moved bytes priced below; kHost and kDisk move
  // every checkpoint a later segment reads (tests, `tessel gradcheck --offload disk`).
  enum class Offload { kNever, kAuto, kHost, kDisk };
  // DELTA per inner checkpoint (SubSegments::dropped). kPriced: an offloaded inner checkpoint
  // is dropped, and recomputed by the sub-segments that read it, where that costs less than
  // moving it at the prices; kNever: every one kept; kAlways: every one a plan may drop
  // (misplaced_drops), resident or offloaded (tests).
  enum class DropInner { kPriced, kNever, kAlways };

  // --- The request ---
  Strategy strategy = Strategy::kAuto;
  int64_t element_bytes = 4;             // float32; 8 for float64
  double optimizer_state_per_param = 1;  // SGD with momentum 1, Adam 2, plain SGD 0
  bool input_gradient = false;           // a gradient for the image is kept (saliency)
  bool streaming_reduction = true;       // a global pool after the last tiled op closes it
  Offload offload = Offload::kAuto;
  Tier auto_tier = Tier::kDisk;  // where kAuto offloads: disk on CPU builds
  // Plans aim at budget × (1 − headroom), for allocator effects the model does not capture
  // (within 4% on vgg-mini 1024²–4096²). Below a few MiB a fixed slack of up to ~0.4 MiB
  // dominates instead, so budgets under ~4 MiB are exceeded by that much (bench/NOTES.md,
  // session 41).
  double headroom = 0.08;
  // The image's uniform positions (TileSource::background's cells), where it has a background:
  // the search prices glass tiles as not run (core/plan/glass.h), and the plan reports them.
  std::shared_ptr<const CellMask> background;
  // Slide-parallel (core/plan/split.h): the step's tiles are split over this many ranks, each
  // under the whole budget. Every segment gets at least one tile per rank in each pass, and the
  // search leaves out what a split cannot run yet (a request for it is refused): shared rows,
  // offloaded inner checkpoints (they stay resident). Checkpoints between segments are offloaded
  // as for one rank, each rank's store holding its own tiles' blocks and what its tiles read of
  // the others'; the plan's offload figures are one rank's whole step (a rank moves less).
  int ranks = 1;

  // --- The cost model's prices, in FLOPs of recompute ---
  struct Prices {
    // A byte moved to the offload tier and back (a CPU's ~100 GFLOP/s against a disk's ~1 GB/s),
    // comparing offloading plans with each other. Offloading is priced against resident plans
    // only at measured prices (measure): with this guess it put plans on disk that fit resident
    // (bench/NOTES.md, session 41).
    double per_byte_moved = 100;
    // A tile beyond its FLOPs: reading and cropping its inputs, oneDNN's primitives for a new
    // shape, a small tile's poorer use of the caches (~3 ms a tile on 2 cores, bench/NOTES.md
    // session 14). It keeps the search from buying a few bytes with thousands of tiles.
    double per_tile = 2e8;
    // A byte shared rows' concatenations copy (memory speed against compute: 5–13 FLOPs a byte
    // measured on 2 EPYC cores, bench/NOTES.md session 30).
    double per_byte_copied = 10;
    // The machine's measured prices (core/store/offload_prices.h), asked for once, only when
    // offloading is priced (no plan with every checkpoint resident fits, or the resident one
    // recomputes much; see make_plan): they replace per_byte_moved's guess, and each checkpoint
    // the plan would offload is kept in the tier or dropped and recomputed, whichever costs less
    // (DELTA). Empty: the guess, as 100 GFLOP/s against per_byte_moved.
    std::function<OffloadPrices()> measure;
  };
  Prices prices;

  // --- Overrides of the planner's own choices ---
  struct Overrides {
    // Fixed partitions instead of the budget search: a tile size in output pixels of each
    // segment, or a count of tiles per axis.
    std::optional<int64_t> tile_size;
    std::optional<int64_t> tiles_y, tiles_x;
    // Checkpoints at these nodes instead of the search (each must be a valid cut point).
    std::optional<std::vector<NodeId>> checkpoints;
    // Segments whose tiles' autograd graphs fit what the budget leaves free keep them from the
    // forward to the backward instead of recomputing (latest segments first; budgeted plans
    // only); false: never.
    bool keep_graphs = true;
    // Segments with barriers keep their barriers' inputs whole (inner checkpoints, resident)
    // where the budget has room, and run as sub-segments (core/plan/plan.h); false: they always
    // recompute.
    bool inner_checkpoints = true;
    // Where inner checkpoints live. Unset: resident where the budget has room; in a plan that
    // offloads (kAuto's offloading search), in auto_tier where it has not (else the segment
    // recomputes in rounds). Set: there always (kResident: never offloaded).
    std::optional<Tier> inner_tier;
    DropInner drop_inner = DropInner::kPriced;
    // A segment with barriers that fits as one tile in both passes runs them whole, as plain
    // LibTorch does (WholeBarriers); false: such a segment runs the tiled schemes with its one
    // tile.
    bool whole_barriers = true;
    // The tile store's read-ahead and write-behind. 0: the planner picks 1/4, 1/8 or 1/16 of
    // the budget (core/plan/planner.cpp), or 64 MiB without a budget.
    int64_t window_bytes = 0;
    int64_t block_bytes = 0;  // the store's unit; 0: window / 16, 1 MiB to window / 4
  };
  Overrides overrides;
};

// DELTA's offload-or-recompute choice for one checkpoint, at `prices`: offload when moving
// `moved_bytes` per step costs no more than recomputing `recompute_flops` (-1: cannot drop).
OffloadDecision decide_offload(NodeId checkpoint, int64_t moved_bytes, int64_t recompute_flops,
                               const OffloadPrices& prices);

// The tile store's write-behind in each pass of an offloading plan (Segment::forward_write_behind):
// half the bytes `target` leaves free in the pass, at least Plan::write_behind_bytes (the
// executor drains the writes beyond the next pass's before it starts: TileStore::
// set_write_behind). make_plan calls it with the budget less the headroom.
void size_write_behind(Plan& plan, int64_t target);

// Makes a plan for `graph` on an input of `input` (C×H×W) within `budget_bytes` (0: no limit).
// Throws tessel::Error naming the node for an invalid graph or input, and, when no plan fits,
// one that states the smallest budget that would fit and what dominates it.
Plan make_plan(const Graph& graph, const Shape& input, int64_t budget_bytes,
               const PlanOptions& options = {});

// Nodes where a segment may end: spatial nodes that no edge skips over (so a residual block
// stays inside one segment), excluding nodes whose only consumer is pointwise.
std::vector<NodeId> checkpoint_candidates(const Graph& graph);

}  // namespace tessel::core
