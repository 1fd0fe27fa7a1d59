// Kept graphs (KeptGraph, plan/plan.h; and the keep_graph flags of shared rows and whole
// barriers) in the planner: which segments keep their tiles' autograd graphs, and what that
// saves (declared in segment_build.h). The executor's side is exec/schemes/plain_tiles.cpp.
#include "core/plan/segment_build.h"

#include <algorithm>

#include "core/plan/cost_model.h"
#include "core/plan/geometry.h"
#include "core/plan/glass.h"

namespace tessel::core::planning {

namespace {

// A segment whose barriers run in passes keeps no graph, but its resident inner checkpoints may
// stay from this forward to this backward (which already count them) where the passes between
// have room; true when they do.
bool keep_inner(const Analysis& a, Segment& s, size_t i, std::vector<MemoryBreakdown>& passes,
                int64_t budget) {
  if (!s.is<SubSegments>() || s.inner_tier() != Tier::kResident) return false;
  int64_t inner_bytes = 0;
  for (NodeId v : kept_inner(a.graph, s)) inner_bytes += a.bytes(v);
  std::vector<MemoryBreakdown> after = passes;
  for (size_t p = 2 * i + 2; p < passes.size(); ++p) {
    after[p].checkpoints += inner_bytes;
    if (after[p].total() > budget) return false;
  }
  passes = std::move(after);
  s.as<SubSegments>()->keep_inner = true;
  return true;
}

// What segment i's tiles' graphs keep in all (and each forward tile's), and the working set on
// top of them in its passes.
struct GraphBytes {
  int64_t kept = 0, working = 0;
  std::vector<int64_t> tiles;
};

// Adds one tile's graph (`tc`) to `g`: what it keeps beyond the input it views in a resident
// checkpoint and the output that is the checkpoint; returns that.
int64_t add_tile(GraphBytes& g, const Analysis::TileCost& tc, bool input_view,
                 bool output_is_checkpoint) {
  const int64_t shared =
      (input_view ? tc.kept_input_bytes : 0) + (output_is_checkpoint ? tc.kept_output_bytes : 0);
  g.kept += tc.kept_bytes - shared;
  // The tile model frees the saved output and input as the gradient passes them; a
  // checkpoint they belong to stays (measured at vgg-mini 2048²: 64 MiB more in segment 4's
  // backward than modelled without this).
  g.working = std::max(g.working, tc.backward_bytes - tc.kept_bytes + shared);
  return tc.kept_bytes - shared;
}

// A graph that saves its input tile saves a view of a resident checkpoint (no new bytes); a
// one-tile segment's output is its checkpoint (the executor keeps no copy).
bool input_view(size_t i) { return i > 0; }
bool output_is_checkpoint(const Segment& s) { return s.forward.tiles() == 1 && s.reduction < 0; }

GraphBytes graph_bytes(const Analysis& a, const Segment& s, size_t i) {
  // Every tile's graph where they are few; where they are many (the search builds hundreds of
  // plans: counting every tile made the planner test for VGG-16 on a 200000² slide take 786 s,
  // 0.3 s sampled), the largest of the sampled tiles' times their count, which holds more.
  constexpr int64_t kCountedTiles = 64;
  const bool every = s.forward.tiles() <= kCountedTiles;
  std::vector<int64_t> counted;
  if (every) {
    for (int64_t t = 0; t < s.forward.tiles(); ++t) counted.push_back(t);
  } else {
    counted = sample_tiles(s.forward);
  }
  GraphBytes g;
  int64_t most = 0;
  for (int64_t t : counted) {
    const auto tc = s.is<SharedRows>() ? a.shared_cost(s.input, s.output, s.forward.tile(t).y)
                                       : a.tile_cost(s.input, s.output, s.forward.tile(t));
    g.tiles.push_back(add_tile(g, tc, input_view(i), output_is_checkpoint(s)));
    most = std::max(most, g.tiles.back());
  }
  if (!every) {
    g.kept = most * s.forward.tiles();
    g.tiles.assign(static_cast<size_t>(s.forward.tiles()), most);
  }
  return g;
}

// graph_bytes where the forward's tiles over `glass` (SegmentGlass) hold only what their
// consumers read of each node (held_regions), with what their boxes hold beside (boxed_copies),
// and its glass tiles run no graph: every tile counted, as glass makes them unalike.
GraphBytes glass_graph_bytes(const Analysis& a, const Segment& s, size_t i,
                             const SegmentGlass& glass) {
  GraphBytes g;
  g.tiles.assign(static_cast<size_t>(s.forward.tiles()), 0);
  for (int64_t t = 0; t < s.forward.tiles(); ++t) {
    if (glass.forward[static_cast<size_t>(t)] != 0) continue;
    const Region tile = s.forward.tile(t);
    BoxedTile b = boxed_tile(a, s, glass.input, tile);
    b.held[static_cast<size_t>(s.input)] = b.need[static_cast<size_t>(s.input)];
    g.tiles[static_cast<size_t>(t)] =
        add_tile(g, a.compute_cost(s.input, s.output, tile, b.held, nullptr, &b.copies),
                 input_view(i), output_is_checkpoint(s));
  }
  return g;
}

// What the later passes leave free, against what the graphs keep at least (the whole
// segment's, less its input and output: tiles add halos): most segments of most candidate
// plans in the search stop here, before the tile-by-tile count.
bool may_fit(const Analysis& a, const Segment& s, size_t i,
             const std::vector<MemoryBreakdown>& passes, int64_t budget) {
  int64_t later_free = budget;
  for (size_t p = 2 * i + 2; p < passes.size(); ++p) {
    later_free = std::min(later_free, budget - passes[p].total());
  }
  const Shape& out = a.shapes[static_cast<size_t>(s.output)];
  const auto whole = s.is<SharedRows>()
                         ? a.shared_cost(s.input, s.output, {0, out.height})
                         : a.tile_cost(s.input, s.output, Region{{0, out.height}, {0, out.width}});
  return whole.kept_bytes - whole.kept_input_bytes - whole.kept_output_bytes <= later_free;
}

// Segment `s` keeps its graphs: its backward takes the gradients through the forward's tiles.
// Returns what that saves: the backward recomputed its tiles' forward (build's 3× its FLOPs:
// recompute and gradient); now it takes the gradients through the forward's tiles (2× theirs).
// Shared rows no longer join their rows again in a recompute.
PlanCost keep_graph(const Analysis& a, Segment& s, int64_t working) {
  PlanCost saved;
  const double fwd = static_cast<double>(worst_tile(a, s, s.forward).flops) *
                     static_cast<double>(s.forward.tiles());
  const double bwd = static_cast<double>(worst_tile(a, s, s.backward).flops) *
                     static_cast<double>(s.backward.tiles());
  saved.compute += 3.0 * bwd - 2.0 * fwd;
  saved.tiles +=
      a.options.prices.per_tile * static_cast<double>(s.backward.tiles() - s.forward.tiles());
  if (s.is<SharedRows>()) saved.copies += a.options.prices.per_byte_copied * joined_bytes(a, s);
  if (auto* rows = s.as<SharedRows>()) {
    rows->keep_graph = true;
  } else if (auto* whole = s.as<WholeBarriers>()) {
    whole->keep_graph = true;
  } else {
    s.scheme = KeptGraph{};
  }
  s.backward = s.forward;
  s.backward_working_bytes = working;
  return saved;
}

}  // namespace

PlanCost keep_graphs(const Analysis& a, Plan& plan, std::vector<MemoryBreakdown>& passes,
                     int64_t budget) {
  const size_t n = plan.segments.size();
  PlanCost saved;
  for (size_t i = n; i-- > 0;) {
    Segment& s = plan.segments[i];
    const bool stored_in = i > 0 && plan.segments[i - 1].tier != Tier::kResident;
    const bool stored_out = s.tier != Tier::kResident && s.reduction < 0 && i + 1 < n;
    if (stored_in || stored_out) continue;
    // Shared rows keep their graphs with their kept rows in them (not in the store).
    if (s.is<SharedRows>() && s.shared_tier() != Tier::kResident && s.shared_bytes() > 0) continue;
    if (has_barrier(a.graph, s) && !s.is<WholeBarriers>()) {
      keep_inner(a, s, i, passes, budget);
      continue;
    }
    if (!may_fit(a, s, i, passes, budget)) continue;
    const GraphBytes g = graph_bytes(a, s, i);
    // The forward with autograd and the backward without recompute hold the kept graphs and
    // at most one tile's transients on top (its recompute-and-backward peak beyond its graph).
    std::vector<MemoryBreakdown> after = passes;
    bool fits = true;
    for (size_t p = 2 * i; p < passes.size() && fits; ++p) {
      after[p].checkpoints += g.kept;
      if (p == 2 * i || p == 2 * i + 1) after[p].working_set = g.working;
      fits = after[p].total() <= budget;
    }
    if (!fits) continue;
    passes = std::move(after);
    saved += keep_graph(a, s, g.working);
  }
  return saved;
}

void sparse_graphs(const Analysis& a, const Plan& plan, const std::vector<SegmentGlass>& glass,
                   std::vector<MemoryBreakdown>& passes) {
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    if (!s.is<KeptGraph>() || glass[i].input.none()) continue;
    const GraphBytes dense = graph_bytes(a, s, i);
    const GraphBytes sparse = glass_graph_bytes(a, s, i, glass[i]);
    for (size_t p = 2 * i; p < passes.size(); ++p)
      passes[p].checkpoints -= dense.kept - sparse.kept;
    passes[2 * i].working_set = passes[2 * i + 1].working_set = sparse.working;
  }
}

std::vector<int64_t> kept_graph_tiles(const Analysis& a, const Plan& plan, size_t i,
                                      const SegmentGlass* glass) {
  const Segment& s = plan.segments.at(i);
  if (!s.is<KeptGraph>()) return {};
  if (glass != nullptr && !glass->input.none()) return glass_graph_bytes(a, s, i, *glass).tiles;
  return graph_bytes(a, s, i).tiles;
}

}  // namespace tessel::core::planning
