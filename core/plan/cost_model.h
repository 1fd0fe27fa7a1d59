// The cost model's part that depends on a segment's scheme (engine-internal): what each
// scheme adds to the planner's price beyond its tiles (scheme_cost, one overload per
// alternative of Scheme, each in the scheme's own file in plan/schemes/), and the pieces of a
// scheme's arithmetic the rest of the planner reads (sub-segments' work, rounds and backward
// bytes; shared rows' joins).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <variant>
#include <vector>

#include "core/plan/tile_cost.h"

namespace tessel::core::planning {

// A pass of a segment with barriers beyond its output's forward and backward (a sub-segment's
// inner pass, a round of sums, a recompute round's round), in PlanOptions::Prices::per_tile: each
// runs every tile again with its barriers' corrections and sums. Measured (bench/NOTES.md,
// session 58; 2 EPYC cores): resnet50 train-mode BN 1024² in 1 GiB, a 4×4 sub-segments segment
// of layer1 ran its 48 tile passes 1.14 s beyond the same layers as two whole segments, about
// 24 ms a pass against per_tile's 2 ms. Priced at one tile, the search preferred such segments
// to whole ones wherever glass made their checkpoints smaller (1.14× the dense step at 10%
// tissue); at ten, 1.04×, and resnet50 group norm 1000×777 in 400 MiB 0.94× (rounds
// coarser), no measured plan slower beyond noise.
inline constexpr double kBarrierPassTiles = 10;

// What segment `s`'s scheme adds to its price beyond its tiles' forward, recompute and backward.
PlanCost scheme_cost(const Analysis& a, const Segment& s);

// Per scheme. Plain tiles: nothing beyond the tiles. A kept graph: its saving is priced where
// the segment keeps it (keep_graphs, plan/schemes/kept_graph.cpp). Whole barriers: one tile
// each way, as LibTorch runs them.
inline PlanCost scheme_cost(const Analysis&, const Segment&, const PlainTiles&) { return {}; }
inline PlanCost scheme_cost(const Analysis&, const Segment&, const KeptGraph&) { return {}; }
inline PlanCost scheme_cost(const Analysis&, const Segment&, const WholeBarriers&) { return {}; }
// Shared rows (plan/schemes/shared_rows.cpp): the kept rows moved to the store and back where
// they are not resident (SharedRows::kept_bytes), the joins' copies (joined_bytes).
PlanCost scheme_cost(const Analysis& a, const Segment& s, const SharedRows& rows);
// Sub-segments (plan/schemes/sub_segments.cpp): the backward rebuilds the inner checkpoints
// (about one more forward), the dropped ones' passes (dropped_cost), and each inner pass's tiles
// (sub_segment_runs, each kBarrierPassTiles tiles).
PlanCost scheme_cost(const Analysis& a, const Segment& s, const SubSegments& sub);
// The tiles segment `s`'s inner passes run beyond the output's forward and backward tiles: each
// inner checkpoint's pass in the forward (and the rebuild), each kept one's sub-segment and each
// round of sums in the backward.
double sub_segment_runs(const Analysis& a, const Segment& s);
// Recompute rounds (plan/schemes/recompute_rounds.cpp): in the forward, each barrier's
// statistic pass recomputes its input over the shares of the forward tiles; in the backward,
// each round of sums recomputes the segment's tiles and takes the gradient back to its
// barriers. Steers the search to checkpoints that split chains of barriers.
PlanCost scheme_cost(const Analysis& a, const Segment& s, const RecomputeRounds&);

// --- Sub-segments' arithmetic (plan/schemes/sub_segments.cpp) ---

// The FLOPs of the nodes (after, target] that the sub-segment computing all of `target` from
// `leaves` runs (a leaf is read, not computed), and the bytes of the inner checkpoints among
// its leaves that it reads (`leaves` less the segment's input).
struct SubSegmentWork {
  double flops = 0, leaf_bytes = 0;
};

SubSegmentWork sub_segment_work(const Analysis& a, const Segment& s,
                                const std::vector<NodeId>& leaves, NodeId target, NodeId after);

// The barriers of segment `s` that read its dropped inner checkpoints (SubSegments::dropped),
// counted by the sub-segment that recomputes them (dropped_readers): the rounds of sums it runs
// before its backward. (A fork has no barrier; a barrier input read by several is never run.)
std::map<NodeId, int> sums_rounds(const Analysis& a, const Segment& s);

// The regions of `adds` (grad_additions' passes), in order, each pass once more for each round
// of sums its sub-segment runs first (sums_rounds): what those passes read.
std::vector<Region> reads_with_rounds(const Analysis::Additions& adds,
                                      const std::map<NodeId, int>& rounds);

// What recomputing segment `s`'s dropped inner checkpoints adds: each one's statistic pass in the
// forward (its sub-segment from the leaves, once more), and for each of its barriers a round of
// sums before its owner's backward (the owner's sub-segment recomputed, and its backward from
// the owner down to the barrier, priced as that part's forward). `compute` in FLOPs; `moved`:
// the bytes those passes read of offloaded inner checkpoints (each round reads the owner's
// leaves and its gradient again), priced at PlanOptions::Prices::per_byte_moved when `offloaded`.
// Rounds in a chain of dropped ones reread the same leaves: resnet50's layer1 with every barrier
// input dropped read each 1 GiB block output 8 times a step. A dropped fork is computed by each
// of its k readers instead of once: (k − 1) more forwards, recomputes and backwards (two
// forwards' worth) of its sub-segment, and its leaves read (k − 1) more times each way.
PlanCost dropped_cost(const Analysis& a, const Segment& s, bool offloaded);

// What a segment run as sub-segments holds beyond its tiles in its backward at its fullest
// (the executor's SubSegmentsRun::backward): the inner checkpoints not yet passed, and the
// gradients of those a later sub-segment has added into, each from the first addition until its own
// sub-segment has run; an inner checkpoint goes once its correction is added, before its
// sub-segment (which reads only those before it).
// `bytes`: what each inner checkpoint and its gradient hold (split over ranks, a rank's part).
int64_t inner_backward_bytes(const Graph& graph, const std::vector<Shape>& shapes, const Segment& s,
                             const std::function<int64_t(NodeId)>& bytes);
int64_t inner_backward_bytes(const Analysis& a, const Segment& s);

// --- Shared by the schemes (cost_model.cpp) ---

// Whether segment `s` holds a barrier: unless it runs as one tile (WholeBarriers),
// its tiles run in several passes (core/exec/barrier.h), so the backward recomputes them and keeps
// no graph.
bool has_barrier(const Graph& graph, const Segment& s);

// --- Shared rows' arithmetic (plan/schemes/shared_rows.cpp) ---

// The bytes shared rows' concatenations copy in one pass over segment `s`. A row joins no
// activation whole (core/exec/shared_row.h): it copies the rows it inherits into one piece with
// the rows computed from them, the seam its consumers read across its two pieces, and the rows it
// keeps for the next (about three times the kept rows, over all rows), and joins its output's
// rows once.
double joined_bytes(const Analysis& a, const Segment& s);

}  // namespace tessel::core::planning
