// Recompute rounds (RecomputeRounds, plan/plan.h) in the planner: what recomputing the barriers'
// inputs in every pass adds to a segment's price. Chosen where sub-segments' inner checkpoints
// fit nowhere (SegmentBuild::place_barriers). The executor's side is
// exec/schemes/recompute_rounds.cpp.
#include "core/plan/cost_model.h"
#include "core/plan/geometry.h"

namespace tessel::core::planning {

PlanCost scheme_cost(const Analysis& a, const Segment& s, const RecomputeRounds&) {
  PlanCost c;
  const auto rounds = barrier_rounds(a.graph, s.input, s.output);
  if (rounds.empty()) return c;
  const Shape& out = a.shapes[static_cast<size_t>(s.output)];
  const Region mid = middle_tile(s.forward);
  double flops = 0;
  for (const auto& round : rounds) {
    for (NodeId b : round) {
      const NodeId in = a.graph.node(b).inputs[0];
      if (in == s.input) continue;
      const Region share = barrier_share(mid, out, a.shapes[static_cast<size_t>(in)]);
      if (share.empty()) continue;
      flops += static_cast<double>(a.tile_cost(s.input, in, share).flops) *
               static_cast<double>(s.forward.tiles());
    }
  }
  // Each round: the tiles' recompute and their backward to the barriers, priced as a whole
  // recompute and backward. Priced as two thirds of that, resnet50 at 4096² in 2 GiB chose 13
  // rounds over offloaded inner checkpoints at some measured prices: 867 s a step against
  // 317 s (bench/NOTES.md, session 22).
  const auto back = a.tile_cost(s.input, s.output, middle_tile(s.backward));
  flops += 3.0 * static_cast<double>(back.flops) * static_cast<double>(s.backward.tiles()) *
           static_cast<double>(rounds.size());
  c.compute = flops;
  // Each round's tiles again, with their corrections and sums: kBarrierPassTiles each.
  c.tiles = kBarrierPassTiles * a.options.prices.per_tile *
            static_cast<double>(rounds.size() * (s.forward.tiles() + s.backward.tiles()));
  return c;
}

}  // namespace tessel::core::planning
