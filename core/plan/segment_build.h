// Building one candidate plan from a checkpoint set (engine-internal): each segment's scheme and
// partitions under the budget (SegmentBuild), its passes' bytes, its price; then the segments
// that keep their autograd graphs (keep_graphs, plan/schemes/kept_graph.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/plan/offload_sizing.h"
#include "core/plan/tile_cost.h"

namespace tessel::core {
struct SegmentGlass;
}  // namespace tessel::core

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

// One segment of build(), from checkpoint bounds[i] to bounds[i + 1]: the bytes each of its
// passes holds besides its tiles, the partitions that fit what the budget leaves, its scheme,
// and what it adds to the plan. `plan` holds the segments before it; `held` is the earlier
// checkpoints alive while it runs. What belongs to one scheme is in that scheme's file in
// plan/schemes/ (named at each member below); the rest is segment_build.cpp.
class SegmentBuild {
 public:
  // Where the candidate stands when segment i is built: the segments before it (`plan`), the
  // checkpoint bounds and their tiers (as build's), the earlier checkpoints held meanwhile.
  struct SoFar {
    const Plan& plan;
    const std::vector<NodeId>& bounds;
    const std::vector<Tier>& tiers;
    int64_t held = 0;
  };

  SegmentBuild(const Analysis& a, const Offloading& off, Strategy strategy, const SoFar& so_far,
               size_t i);

  // Chooses the forward's and backward's tile counts, placing the barriers (whole, as
  // sub-segments over inner checkpoints, or recomputed in rounds) and the shared rows' kept
  // rows (resident, else in the store); -1 in `nf` or `nb` where no partition fits.
  void choose_counts();
  bool fits_budget() const { return nf >= 0 && nb >= 0; }
  // The smallest a pass of this segment can hold: at the finest partition.
  int64_t finest_bytes() const;
  // Sets the partitions the counts chose (fixed ones where the options fix them), rows
  // balanced where that holds no more.
  void set_partitions();
  // Over `uniform`, the input's uniform positions (core/plan/glass.h): a finer grid (both
  // passes) where its glass tiles, not run, save more than its halos and tiles add (finer
  // tiles hold less, so the budget still holds). Grids the budget search chose only.
  void refine_for_glass(const CellMask& uniform);
  // Adds the segment's cost to `cost`; returns its forward's and backward's bytes at their
  // peaks (as build's passes) and fills the segment's FLOPs and the store's blocks.
  std::pair<MemoryBreakdown, MemoryBreakdown> account(PlanCost& cost);

  Segment s;
  int64_t out_bytes = 0;  // the output checkpoint's (0 for a reduction's)
  bool out_off = false;   // the output is offloaded
  StoreShare fwd_share, bwd_share;

 private:
  void count_store(const std::vector<NodeId>& bounds, const std::vector<Tier>& tiers);
  int64_t open_bytes(const Partition& p, bool exact) const;
  // Whether `n` tiles fit `avail` bytes; shared rows also hold what every row keeps for the
  // next (more with more rows: the search finds the fewest rows whose working set fits, then
  // checks them with it).
  bool fits(int64_t n, bool backward, int64_t avail, bool with_kept = false) const;
  int64_t choose(bool backward) const;
  int64_t ranks_count(int64_t n) const;
  Partition fixed_partition() const;
  void place_barriers();
  void balance_rows();

  // plan/schemes/sub_segments.cpp
  std::pair<int64_t, int64_t> inner_extra(Tier t) const;
  void try_sub_segments();
  void drop_inner();
  int64_t sub_segments_open_bytes(const Partition& p, bool exact) const;
  void sub_segments_blocks();

  // plan/schemes/shared_rows.cpp
  void store_kept_rows();
  int64_t shared_rows_count(int64_t lo, bool backward, int64_t avail) const;
  int64_t shared_rows_finest() const;
  void balance_shared_rows();

  const Analysis& a;
  const Offloading& off;
  const Strategy strategy;
  const int64_t budget;
  const Plan& plan;  // the segments before this one
  const size_t i;
  const int64_t held;
  Shape out;
  Tier in_tier = Tier::kResident;  // where the input checkpoint lives
  bool in_off = false;             // the input is on disk (the host tier is RAM: counted)
  int64_t cap = 0, out_fwd = 0, out_bwd = 0, in_bwd = 0, store_fwd = 0, store_bwd = 0;
  bool barriers = false;
  std::vector<NodeId> inner;
  int64_t inner_bytes = 0;
  // What each pass holds outside its tiles, and of that what inner checkpoints add.
  int64_t fwd_fixed = 0, bwd_fixed = 0, inner_fwd = 0, inner_bwd = 0;
  int64_t nf = -1, nb = -1;  // tile counts; 0: the options fix the partition
};

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

// Kept graphs over glass: a segment that keeps its graphs runs no graph for its glass tiles
// (`glass`: plan_glass's, by segment) and its other tiles' graphs hold only what their
// consumers read of each node (held_regions): what keep_graphs priced at every tile's whole
// needs is taken out of `passes` from the segment's forward on, and its passes' working set is
// its largest such tile's.
void sparse_graphs(const Analysis& a, const Plan& plan, const std::vector<SegmentGlass>& glass,
                   std::vector<MemoryBreakdown>& passes);

// Tile `tile` of segment `s` over the uniform positions of its input (`uniform`: its
// SegmentGlass's input), as the executor runs a tile that fills its glass: what each node needs
// (segment_needs), holds (held_regions), and what its boxes hold beside that (boxed_copies).
struct BoxedTile {
  std::vector<Region> need, held;
  std::vector<BoxCopies> copies;
};
BoxedTile boxed_tile(const Analysis& a, const Segment& s, const CellMask& uniform,
                     const Region& tile);

// What each forward tile of segment i keeps in its graph where the segment keeps its graphs
// (KeptGraph), as keep_graphs and sparse_graphs price them (over `glass`, its SegmentGlass, when
// given); empty for other schemes. A step split over ranks keeps only its own tiles' graphs on
// each rank (hold_split).
std::vector<int64_t> kept_graph_tiles(const Analysis& a, const Plan& plan, size_t i,
                                      const SegmentGlass* glass);

// Every segment's SegmentGlass over the request's background (PlanOptions::background, which
// must be set), the first over the image's and each next over the one before's output.
std::vector<SegmentGlass> plan_segments_glass(const Analysis& a, const Plan& plan);

}  // namespace tessel::core::planning
