#include "core/plan/split.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/error.h"
#include "core/plan/geometry.h"
#include "core/plan/rank_tiles.h"
#include "core/plan/tile_cost.h"

namespace tessel::core {

namespace {

int64_t activation_bytes(const Plan& plan, NodeId v) {
  const Shape& s = plan.shapes.at(static_cast<size_t>(v));
  return s.channels * s.height * s.width * plan.element_bytes;
}

std::string segment_words(const Graph& graph, const Plan& plan, size_t i) {
  const Segment& s = plan.segments[i];
  return "segment " + std::to_string(i) + " (" + graph.node(s.input + 1).name + " … " +
         graph.node(s.output).name + ")";
}

}  // namespace

TileRange rank_tiles(int64_t tiles, int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks) {
    throw Error("internal: rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  }
  return {tiles * rank / ranks, tiles * (rank + 1) / ranks};
}

std::vector<Region> rank_regions(const Partition& part, int rank, int ranks,
                                 const std::function<Region(int64_t)>& region_of) {
  const TileRange range = rank_tiles(part.tiles(), rank, ranks);
  std::vector<Region> regions;
  for (int64_t t = range.begin; t < range.end; ++t) {
    const Region r = region_of(t);
    if (!r.empty()) regions.push_back(r);
  }
  return regions;
}

namespace {

// What the busiest rank gives to an all-gather of activation `v`: its rank_regions, packed.
int64_t gathered_bytes(const Plan& plan, NodeId v, const Partition& part, int ranks,
                       const std::function<Region(int64_t)>& region_of) {
  int64_t longest = 0;
  for (int q = 0; q < ranks; ++q) {
    int64_t area = 0;
    for (const Region& r : rank_regions(part, q, ranks, region_of)) area += r.area();
    longest = std::max(longest, area);
  }
  return longest * plan.shapes.at(static_cast<size_t>(v)).channels * plan.element_bytes;
}

// Sub-segments with barriers (the executor's SubSegmentsRun): each kept inner checkpoint
// gathered after the forward's pass (and the backward's rebuild), its gradient summed.
int64_t inner_bytes(const Graph& graph, const Plan& plan, const Segment& s, int ranks) {
  const int64_t passes = s.keeps_inner() ? 1 : 2;
  const Shape& out = plan.shapes.at(static_cast<size_t>(s.output));
  int64_t bytes = 0;
  for (NodeId v : kept_inner(graph, s)) {
    const Shape& at = plan.shapes.at(static_cast<size_t>(v));
    const auto share = [&](int64_t t) { return barrier_share(s.forward.tile(t), out, at); };
    bytes += passes * gathered_bytes(plan, v, s.forward, ranks, share) + activation_bytes(plan, v);
  }
  return bytes;
}

}  // namespace

SplitBytes split_bytes(const Graph& graph, const Plan& plan, int ranks, bool training) {
  SplitBytes b;
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    if (s.reduction < 0) {
      const auto tile = [&](int64_t t) { return s.forward.tile(t); };
      b.checkpoints += gathered_bytes(plan, s.output, s.forward, ranks, tile);
    } else {
      b.checkpoints += graph.node(s.output).channels * plan.element_bytes;  // the average's sums
    }
    if (i > 0 || plan.input_gradient) b.input_gradients += activation_bytes(plan, s.input);
    if (s.is<SubSegments>() && !barrier_rounds(graph, s.input, s.output, training).empty()) {
      b.inner_checkpoints += inner_bytes(graph, plan, s, ranks);
    }
  }
  b.parameter_gradients = plan.predicted.gradients;
  return b;
}

std::string split_refusal(const Graph& graph, const Plan& plan) {
  if (plan.segments.empty()) return "the plan runs the whole image as one piece (no tiles)";
  if (plan.offloads()) return "the plan offloads checkpoints to the host or disk";
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    if (s.is<SharedRows>()) return segment_words(graph, plan, i) + " runs as shared rows";
    if (s.reduction >= 0 && graph.node(s.reduction).kind != OpKind::kGlobalAvgPool) {
      return segment_words(graph, plan, i) + " streams " + graph.node(s.reduction).name +
             " (only a global average)";
    }
  }
  return "";
}

std::string split_summary(const Graph& graph, const Plan& plan, int ranks) {
  std::string out = "split over " + std::to_string(ranks) + " ranks (slide-parallel): ";
  const std::string why = split_refusal(graph, plan);
  if (!why.empty()) return out + "not yet: " + why + "\n";
  // The busiest rank's tiles: each pass's tiles in contiguous runs (core/exec/ranks.h).
  int64_t busiest = 0, all = 0;
  for (const Segment& s : plan.segments) {
    for (const Partition* p : {&s.forward, &s.backward}) {
      busiest += (p->tiles() + ranks - 1) / ranks;
      all += p->tiles();
    }
  }
  const SplitBytes b = split_bytes(graph, plan, ranks);
  return out + "the busiest rank runs " + std::to_string(busiest) + " of " + std::to_string(all) +
         " tile passes; each rank gives " + format_bytes(b.total()) +
         " a step to the exchanges with the others (checkpoints " + format_bytes(b.checkpoints) +
         ", input gradients " + format_bytes(b.input_gradients) +
         (b.inner_checkpoints > 0 ? ", inner checkpoints " + format_bytes(b.inner_checkpoints)
                                  : std::string()) +
         ", parameter gradients " + format_bytes(b.parameter_gradients) +
         "), each within the whole budget\n";
}

int64_t fewest_count_for_ranks(Strategy strategy, int ranks) {
  if (ranks <= 1) return 1;
  if (planning::row_strategy(strategy)) return ranks;
  return static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(ranks)) - 1e-9));
}

}  // namespace tessel::core
