#include "core/plan/planner.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/error.h"
#include "core/plan/cost_model.h"
#include "core/plan/search.h"
#include "core/plan/split.h"

namespace tessel::core {

using namespace planning;  // NOLINT(google-build-using-namespace): the planner's own internals

namespace {

// The last spatial node (everything after it is the head, which must not reach back past it)
// and the global pool that closes the last segment as a streaming reduction, if any (-1).
std::pair<NodeId, NodeId> head_of(const Graph& graph, const PlanOptions& options) {
  NodeId last = 0;
  for (NodeId v = 0; v < graph.size(); ++v) {
    if (graph.node(v).spatial()) last = v;
  }
  for (NodeId v = last + 1; v < graph.size(); ++v) {
    for (NodeId p : graph.node(v).inputs) {
      if (p < last) {
        throw Error(graph.node(v).name + " reads " + graph.node(p).name +
                    ", an activation before the last tiled layer " + graph.node(last).name +
                    "; the head may only read the last tiled layer");
      }
    }
  }
  NodeId reduction = -1;
  const auto& last_consumers = graph.consumers()[static_cast<size_t>(last)];
  if (options.streaming_reduction && last_consumers.size() == 1) {
    const OpKind k = graph.node(last_consumers[0]).kind;
    if (k == OpKind::kGlobalAvgPool || k == OpKind::kGlobalMaxPool || k == OpKind::kAttentionPool) {
      reduction = last_consumers[0];
    }
  }
  return {last, reduction};
}

// What every pass holds whatever the tiling: parameters, their gradients, the optimizer's
// state, and the head's activations and gradients.
MemoryBreakdown model_state_bytes(const Analysis& a) {
  const Graph& graph = a.graph;
  const NodeId last = a.last, reduction = a.reduction;
  MemoryBreakdown fixed;
  int64_t params = 0;
  for (const Node& n : graph.nodes()) params += parameter_elements(n);
  fixed.parameters = params * a.eb;
  fixed.gradients = params * a.eb;
  fixed.optimizer = static_cast<int64_t>(a.options.optimizer_state_per_param *
                                         static_cast<double>(params * a.eb));
  for (NodeId v = last + 1; v < graph.size(); ++v) {
    fixed.tail += 3 * a.bytes(v);
    // An attention pool run whole in the head (not streamed): its input flattened, and its
    // weights with their gradients per branch and position.
    const Node& n = graph.node(v);
    if (n.kind == OpKind::kAttentionPool && v != reduction) {
      const Shape& in = a.shapes[static_cast<size_t>(n.inputs[0])];
      fixed.tail += (in.channels + 4 * n.branches) * in.height * in.width * a.eb;
    }
  }
  return fixed;
}

// What the request fixes, in the plan it gets.
void stamp_request(const Analysis& a, const Shape& input, int64_t budget, int64_t plain_flops,
                   Plan& plan) {
  plan.input = input;
  plan.input_gradient = a.options.input_gradient;
  plan.shapes = a.shapes;
  plan.element_bytes = a.eb;
  plan.budget_bytes = budget;
  plan.plain_flops = plain_flops;
}

// Strategy::kNone: plain autograd keeps every activation (and max pool indices) of the whole
// image; refused over the budget.
Plan plain_plan(const Analysis& a, const Shape& input, int64_t budget, int64_t plain_flops) {
  const NodeId last = a.last;
  Plan plan;
  plan.strategy = Strategy::kNone;
  stamp_request(a, input, budget, plain_flops, plan);
  plan.tail_input = last;
  plan.tiled_flops = plain_flops;
  const Shape& out = a.shapes[static_cast<size_t>(last)];
  const auto whole = a.tile_cost(0, last, Region{{0, out.height}, {0, out.width}});
  plan.predicted = a.fixed;
  plan.predicted.working_set = whole.backward_bytes;
  if (a.target > 0 && plan.predicted.total() > a.target) {
    throw Error("plain training needs " + format_bytes(plan.predicted.total()) + " for a " +
                to_string(input) + " image, over the budget of " + format_bytes(budget) +
                "; use --strategy auto (tiled) or a larger budget");
  }
  return plan;
}

// The request: the shapes, the head, the model's state, the budget plans aim at (the budget
// less the headroom: allocator effects the model does not capture).
Analysis analyse(const Graph& graph, const Shape& input, int64_t budget,
                 const PlanOptions& options) {
  Analysis a{graph, graph.shapes(input), options, options.element_bytes, {}, {}, {}, {}, {}, {},
             false};
  // At least one byte: a budget of a few bytes is a budget nothing fits, not "no budget" (0).
  a.target = budget > 0 ? std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(budget) *
                                                                    (1.0 - options.headroom)))
                        : 0;
  std::tie(a.last, a.reduction) = head_of(graph, options);
  if (a.reduction >= 0 && graph.node(a.reduction).kind == OpKind::kAttentionPool) {
    a.reduction_input = a.last;
    a.reduction_bytes_per_position =
        (graph.node(a.last).channels + 4 * graph.node(a.reduction).branches) * 8;
  }
  a.fixed = model_state_bytes(a);
  return a;
}

// The whole image's FLOPs through the tiled layers, as plain LibTorch runs them.
int64_t plain_flops_of(const Analysis& a) {
  int64_t n = 0;
  for (NodeId v = 1; v <= a.last; ++v) {
    const Shape& s = a.shapes[static_cast<size_t>(v)];
    n += flops(a.graph.node(v), Region{{0, s.height}, {0, s.width}});
  }
  return n;
}

// A plan whose barriers recompute in rounds may cost more than offloading a few checkpoints so
// that every segment runs as sub-segments: then offloading is priced too.
bool recomputes_barriers(const Graph& graph, const Plan& plan) {
  return std::any_of(plan.segments.begin(), plan.segments.end(), [&](const Segment& s) {
    return !s.is<SubSegments>() && !s.is<WholeBarriers>() && has_barrier(graph, s);
  });
}

// The guess until the offloading search asks for measured prices.
constexpr double kGuessedSecondsPerFlop = 1e-11;  // 100 GFLOP/s

// A resident plan that fits but recomputes much (its halos and recompute over kRecomputeWorth
// × the four forwards' worth of FLOPs a step costs without them: one forward, the backward's
// two and one recompute) may cost more than offloading checkpoints that let the tiles grow:
// then offloading is priced too, at measured prices, in a bounded search (the resident best's
// strategy, one window, checkpoints brought back only for the cheapest set; bench/NOTES.md,
// session 29).
constexpr double kRecomputeWorth = 1.05;

// The plan make_plan chooses, the store's settings it was found with, and the offload prices.
struct Choice {
  Candidate best;
  Offloading off;
  OffloadPrices prices;
};

// The offloading search's prices: measured when the caller can measure them, and the analysis
// priced at them (a moved byte and a tile in FLOPs). The resident best is rebuilt at them: the
// tile's price just changed, and a cost at the guess against one at the measured prices would
// compare two units.
void measure_prices(Analysis& a, const PlanOptions& options, Choice& c) {
  if (!options.prices.measure) return;
  const OffloadPrices measured = options.prices.measure();
  if (measured.seconds_per_byte_moved <= 0 || measured.seconds_per_flop <= 0) return;
  c.prices = measured;
  a.options.prices.per_byte_moved = c.prices.seconds_per_byte_moved / c.prices.seconds_per_flop;
  a.options.prices.per_tile =
      options.prices.per_tile * kGuessedSecondsPerFlop / c.prices.seconds_per_flop;
  if (c.best.cost != kNever) c.best = build(a, c.best.strategy, c.best.set, c.best.tiers, c.off);
}

// First every checkpoint set all resident; offload when none of them fits, or when the resident
// best recomputes barriers in rounds or recomputes much (kRecomputeWorth). Pricing offload
// against recompute for every set made planning VGG-16 on a 200000² slide take 25 s instead of
// 0.4 s, and the price of a moved byte is a guess until it is measured (DELTA).
Choice choose(Analysis& a, const PlanOptions& options, Search& search, int64_t plain_flops) {
  using Offload = PlanOptions::Offload;
  // Auto prices the three tiled strategies against each other: grid, LR-CNN's overlapping rows
  // (OverL) and its two-phase sharing (2PS, shared rows).
  const std::vector<Strategy> strategies =
      options.strategy != Strategy::kAuto ? std::vector<Strategy>{options.strategy}
      : options.ranks > 1
          ? std::vector<Strategy>{Strategy::kRows, Strategy::kGrid}
          : std::vector<Strategy>{Strategy::kRows, Strategy::kGrid, Strategy::kRowsShared};
  const std::vector<std::vector<NodeId>> sets = checkpoint_sets(a, search.candidates());
  const std::vector<int64_t> windows = store_windows(options, a.target);
  Choice c{Candidate{}, offloading_with(options, windows.back(), false),
           OffloadPrices{options.prices.per_byte_moved * kGuessedSecondsPerFlop,
                         kGuessedSecondsPerFlop, false}};
  for (const bool offloading : {false, true}) {
    const bool resident_fits = c.best.cost != kNever && !recomputes_barriers(a.graph, c.best.plan);
    const bool bounded =
        offloading && resident_fits && options.prices.measure &&
        c.best.plan.cost.compute > kRecomputeWorth * 4.0 * static_cast<double>(plain_flops);
    if (offloading && ((resident_fits && !bounded) || options.offload != Offload::kAuto)) {
      break;
    }
    if (offloading) measure_prices(a, options, c);
    // Every window where the plan offloads (a resident search has no use for one); the
    // bounded search keeps the resident best's strategy (the rows strategies' row balancing is
    // most of a build's time on large slides).
    const bool forced = options.offload == Offload::kHost || options.offload == Offload::kDisk;
    const std::vector<int64_t> tried = bounded ? std::vector<int64_t>{windows.front()}
                                       : offloading || forced
                                           ? windows
                                           : std::vector<int64_t>{windows.back()};
    auto [found, found_off] =
        search.search_windows(bounded ? std::vector<Strategy>{c.best.strategy} : strategies, sets,
                              offloading, bounded, tried, c.prices);
    if (found.cost != kNever && found.cost < c.best.cost) {
      c.best = std::move(found);
      c.off = found_off;
    }
  }
  return c;
}

// Split over ranks, what each forward tile of each segment that keeps its graphs keeps in them
// (kept_graph_tiles): a rank keeps its own tiles' only (hold_split).
std::vector<std::vector<int64_t>> split_graphs(const Analysis& a, const Plan& plan) {
  std::vector<std::vector<int64_t>> graphs;
  if (a.options.ranks < 2) return graphs;
  std::vector<SegmentGlass> glass;
  if (a.options.background) glass = plan_segments_glass(a, plan);
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    graphs.push_back(kept_graph_tiles(a, plan, i, glass.empty() ? nullptr : &glass[i]));
  }
  return graphs;
}

// The chosen candidate as the plan make_plan returns: DELTA's decisions, the write-behind, the
// request's facts; every segment's scheme checked.
Plan finish(const Analysis& a, Choice c, const Shape& input, int64_t budget, int64_t plain_flops) {
  std::vector<OffloadDecision> decisions = offload_or_recompute(a, c.best, c.off, c.prices);
  if (spdlog::should_log(spdlog::level::debug)) {
    for (size_t i = 0; i < c.best.passes.size(); ++i) {
      const MemoryBreakdown& m = c.best.passes[i];
      spdlog::debug("plan: segment {} {} predicted {} (checkpoints {}, working set {})", i / 2,
                    i % 2 ? "backward" : "forward", format_bytes(m.total()),
                    format_bytes(m.checkpoints), format_bytes(m.working_set));
    }
  }
  Plan plan = std::move(c.best.plan);
  plan.passes = c.best.passes;
  size_write_behind(plan, a.target);
  plan.prices = c.prices;
  plan.decisions = std::move(decisions);
  stamp_request(a, input, budget, plain_flops, plan);
  // Split over ranks, each rank holds its part of each resident checkpoint (Step::held).
  std::vector<int64_t> counted;
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const bool last = i + 1 == plan.segments.size();
    counted.push_back(
        a.held_bytes(plan.segments[i].output, last ? NodeId{-1} : plan.segments[i + 1].output));
  }
  hold_split(a.graph, plan, a.options.ranks, counted, split_graphs(a, plan));
  for (const Segment& segment : plan.segments) check_scheme(a.graph, segment);
  return plan;
}

// A split over ranks (PlanOptions::ranks) refuses what it cannot run, in words.
void check_ranks(const PlanOptions& options) {
  if (options.ranks < 1) throw Error("the number of ranks must be at least 1");
  if (options.ranks == 1) return;
  const std::string why = "; a step split over ranks (slide-parallel) cannot run it yet";
  if (options.strategy == Strategy::kNone) throw Error("strategy none has no tiles to split" + why);
  if (options.strategy == Strategy::kRowsShared) throw Error("shared rows were asked for" + why);
  if (options.overrides.inner_tier && *options.overrides.inner_tier != Tier::kResident) {
    throw Error("inner checkpoints offloaded to the host or disk were asked for" + why);
  }
}

}  // namespace

OffloadDecision decide_offload(NodeId checkpoint, int64_t moved_bytes, int64_t recompute_flops,
                               const OffloadPrices& prices) {
  OffloadDecision d;
  d.checkpoint = checkpoint;
  d.moved_bytes = moved_bytes;
  d.recompute_flops = recompute_flops;
  d.offload_s = static_cast<double>(moved_bytes) * prices.seconds_per_byte_moved;
  d.recompute_s =
      recompute_flops < 0 ? kNever : static_cast<double>(recompute_flops) * prices.seconds_per_flop;
  d.offload = d.offload_s <= d.recompute_s;
  return d;
}

std::vector<NodeId> checkpoint_candidates(const Graph& graph) {
  // reach[v]: the furthest node any edge from a node <= v goes to.
  std::vector<NodeId> result;
  NodeId reach = 0;
  for (NodeId v = 0; v < graph.size(); ++v) {
    const Node& n = graph.node(v);
    const auto& consumers = graph.consumers()[static_cast<size_t>(v)];
    if (v > 0 && n.spatial() && reach <= v) {
      const bool only_pointwise =
          consumers.size() == 1 && graph.node(consumers[0]).kind == OpKind::kPointwise;
      const bool feeds_tail = std::any_of(consumers.begin(), consumers.end(),
                                          [&](NodeId c) { return !graph.node(c).spatial(); });
      if (!only_pointwise && !feeds_tail && !consumers.empty()) result.push_back(v);
    }
    for (NodeId c : consumers) reach = std::max(reach, c);
  }
  return result;
}

// A forward tile completes many blocks at once (resnet50 8192² in 2 GiB: ~13 of 7.3 MiB); one
// queued behind the one being written made the caller wait for the disk 55 s of a 505 s step
// (session 36).
void size_write_behind(Plan& plan, int64_t target) {
  const size_t n = plan.segments.size();
  if (!plan.offloads() || plan.passes.size() != 2 * n) return;
  for (size_t p = 0; p < 2 * n; ++p) {
    const int64_t free = target > 0 ? std::max<int64_t>(0, target - plan.passes[p].total()) : 0;
    const int64_t bytes = std::max(plan.write_behind_bytes, free / 2);
    Segment& s = plan.segments[p / 2];
    (p % 2 == 0 ? s.forward_write_behind : s.backward_write_behind) = bytes;
  }
}

namespace {

Plan search_plan(Analysis& a, const Shape& input, int64_t budget, int64_t plain_flops) {
  const Graph& graph = a.graph;
  const PlanOptions& options = a.options;
  std::vector<NodeId> candidates;
  for (NodeId v : checkpoint_candidates(graph)) {
    if (v < a.last) candidates.push_back(v);
  }
  Search search(a, options, std::move(candidates));
  Choice c = choose(a, options, search, plain_flops);
  if (c.best.cost == kNever) {
    const Candidate& smallest = search.smallest();
    throw Error("no plan fits a " + to_string(input) + " image in " + format_bytes(budget) +
                ": the smallest budget that fits is about " +
                format_bytes(static_cast<int64_t>(static_cast<double>(smallest.needed) /
                                                  (1.0 - options.headroom))) +
                ", dominated by " + smallest.dominant);
  }
  return finish(a, std::move(c), input, budget, plain_flops);
}

Plan with_glass(const Graph& graph, const Shape& input, int64_t budget, const PlanOptions& options,
                Plan plan) {
  if (options.ranks > 1 && options.background &&
      !glass_split_refusal(graph, plan, /*training=*/true).empty()) {
    // A split step skips glass only where glass_split_refusal finds nothing (a segment's
    // scheme can still compute its glass as tissue); else it is planned dense.
    PlanOptions dense = options;
    dense.background.reset();
    return make_plan(graph, input, budget, dense);
  }
  return plan;
}

}  // namespace

Plan make_plan(const Graph& graph, const Shape& input, int64_t budget, const PlanOptions& options) {
  if (budget < 0) throw Error("the memory budget must be positive");
  if (options.headroom < 0 || options.headroom >= 1) throw Error("headroom must be in [0, 1)");
  check_ranks(options);
  if (options.ranks > 1 && !options.overrides.inner_tier) {
    // Over ranks the checkpoints between segments may be offloaded, the inner ones stay
    // resident (a split cannot offload those yet: split_refusal).
    PlanOptions resident_inner = options;
    resident_inner.overrides.inner_tier = Tier::kResident;
    return make_plan(graph, input, budget, resident_inner);
  }
  Analysis a = analyse(graph, input, budget, options);
  const int64_t plain_flops = plain_flops_of(a);
  if (options.strategy == Strategy::kNone) return plain_plan(a, input, budget, plain_flops);
  if (options.ranks > 1 && budget > 0) {
    // Split over ranks, the search counts a rank's part of each checkpoint (held_bytes, an
    // estimate): where the plan it finds holds more than the budget on some rank (hold_split),
    // it searches again counting them whole, as one rank would.
    a.checkpoints_by_rank = true;
    try {
      Plan plan = search_plan(a, input, budget, plain_flops);
      if (plan.predicted.total() <= a.target)
        return with_glass(graph, input, budget, options, plan);
    } catch (const Error&) {
      // No plan fits counting a rank's part: the search counting them whole says why.
    }
    spdlog::debug("plan: a rank's part of the checkpoints does not fit; counting them whole");
    a.checkpoints_by_rank = false;
  }
  return with_glass(graph, input, budget, options, search_plan(a, input, budget, plain_flops));
}

}  // namespace tessel::core
