// What a segment's scheme adds to the planner's price beyond its tiles (engine-internal): the
// barriers' statistic passes and rounds of sums, sub-segments' rebuilt and dropped inner
// checkpoints, the bytes a segment run as sub-segments holds in its backward, shared rows' joins.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "core/plan/tile_cost.h"

namespace tessel::core::planning {

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
// leaves and its gradient again), priced at PlanOptions::flops_per_byte_moved when `offloaded`.
// Rounds in a chain of dropped ones reread the same leaves: resnet50's layer1 with every barrier
// input dropped read each 1 GiB block output 8 times a step. A dropped fork is computed by each
// of its k readers instead of once: (k − 1) more forwards, recomputes and backwards (two
// forwards' worth) of its sub-segment, and its leaves read (k − 1) more times each way.
PlanCost dropped_cost(const Analysis& a, const Segment& s, bool offloaded);

// What a segment's barriers add (core/exec/barrier.h): in the forward, each barrier's statistic
// pass recomputes its input over the shares of the forward tiles; in the backward, each round
// of sums recomputes the segment's tiles and takes the gradient back to its barriers. Steers the
// search to checkpoints that split chains of barriers.
PlanCost barrier_cost(const Analysis& a, const Segment& s);

// What a segment run as sub-segments holds beyond its tiles in its backward at its fullest
// (the executor's SubSegmentsRun::backward): the inner checkpoints not yet passed, and the
// gradients of those a later sub-segment has added into, each from the first addition until its own
// sub-segment has run; an inner checkpoint goes once its correction is added, before its
// sub-segment (which reads only those before it).
int64_t inner_backward_bytes(const Analysis& a, const Segment& s);

// Whether segment `s` holds a barrier: unless it runs as one tile (WholeBarriers),
// its tiles run in several passes (core/exec/barrier.h), so the backward recomputes them and keeps
// no graph.
bool has_barrier(const Graph& graph, const Segment& s);

// The bytes shared rows' concatenations copy in one pass over segment `s`. A row joins no
// activation whole (core/exec/shared_row.h): it copies the rows it inherits into one piece with
// the rows computed from them, the seam its consumers read across its two pieces, and the rows it
// keeps for the next (about three times the kept rows, over all rows), and joins its output's
// rows once.
double joined_bytes(const Analysis& a, const Segment& s);

}  // namespace tessel::core::planning
