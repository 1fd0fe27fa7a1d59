// Building one candidate plan from a checkpoint set (engine-internal): each segment's scheme and
// partitions under the budget (SegmentBuild, in segment_build.cpp), its passes' bytes, its price;
// then the segments that keep their autograd graphs (keep_graphs.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/plan/offload_sizing.h"
#include "core/plan/tile_cost.h"

namespace tessel::core::planning {

struct Candidate {
  Plan plan;
  double cost = kNever;   // FLOPs of forward + recompute + backward, halo included
  double flops = kNever;  // the same without the price of moved bytes
  Strategy strategy = Strategy::kAuto;
  std::vector<NodeId> set;  // the checkpoint set it was built from, and its tiers
  std::vector<Tier> tiers;
  std::vector<MemoryBreakdown> passes;  // each pass at its peak (see build)
  int64_t needed = kUnfit;              // smallest budget this segmentation could ever fit
  std::string dominant;
};

// The pass that holds most, and what it holds.
std::pair<int64_t, MemoryBreakdown> highest(const std::vector<MemoryBreakdown>& passes);

// A plan from checkpoint set `checkpoints` with `strategy`: every segment's scheme and
// partitions under the request's target, its price and its passes' peaks. `tiers[i]`: where segment
// i's output checkpoint lives (the last segment's stays resident).
Candidate build(const Analysis& a, Strategy strategy, const std::vector<NodeId>& checkpoints,
                const std::vector<Tier>& tiers = {}, const Offloading& off = {});

// Kept graphs: a segment whose tiles' autograd graphs fit the budget its passes leave free runs
// its forward with autograd and keeps every tile's graph, so its backward recomputes nothing
// (what torch.utils.checkpoint_sequential does for its last segment, here for as many segments
// as fit). A kept graph lives from the segment's forward to its backward: the passes of this
// segment and every later one. Lifetimes nest, so the latest segments go first (their graphs
// live through the fewest passes). Segments that
// read or write the tile store are left as they are (their blocks follow their partitions).
// The backward then runs the forward's tiles. `passes`: as in build, updated. Returns what the
// kept graphs save at the cost model's prices: each such segment's recompute.
PlanCost keep_graphs(const Analysis& a, Plan& plan, std::vector<MemoryBreakdown>& passes,
                     int64_t budget);

}  // namespace tessel::core::planning
