#include "core/plan/split.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <utility>

#include "core/error.h"
#include "core/plan/cost_model.h"
#include "core/plan/geometry.h"
#include "core/plan/glass.h"
#include "core/plan/rank_tiles.h"
#include "core/plan/tile_cost.h"

namespace tessel::core {

namespace {

int64_t activation_bytes(const Plan& plan, NodeId v) {
  const Shape& s = plan.shapes.at(static_cast<size_t>(v));
  return s.channels * s.height * s.width * plan.element_bytes;
}

const Partition& partition(const Segment& s, Pass pass) {
  return pass == Pass::kForward ? s.forward : s.backward;
}

const RankShares& shares_of(const Segment& s, Pass pass) {
  return pass == Pass::kForward ? s.forward_shares : s.backward_shares;
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

std::vector<int64_t> shares_by_work(const std::vector<double>& work, int ranks) {
  if (ranks < 1) throw Error("internal: shares for " + std::to_string(ranks) + " ranks");
  std::vector<double> before(work.size() + 1, 0.0);  // the work of the tiles before each
  for (size_t t = 0; t < work.size(); ++t) before[t + 1] = before[t] + work[t];
  const double whole = before.back();
  if (whole <= 0) return {};
  std::vector<int64_t> edges{0};
  auto t = before.begin();
  for (int k = 1; k < ranks; ++k) {
    const double part = whole * k / ranks;
    // The first tile whose work before it reaches the part, or the one before where that comes
    // nearer (a run of glass before it then goes to the rank before).
    auto at = std::lower_bound(t, before.end(), part);
    if (at > t && *at - part > part - *(at - 1)) --at;
    t = at;
    edges.push_back(t - before.begin());
  }
  edges.push_back(static_cast<int64_t>(work.size()));
  return edges;
}

TileRange rank_range(const Segment& s, Pass pass, int index, int rank, int ranks) {
  const Partition& part = partition(s, pass);
  const int slot = part.tiles() % ranks == 0 ? rank : (rank + index) % ranks;
  const std::vector<int64_t>& edges = shares_of(s, pass).edges;
  if (edges.size() != static_cast<size_t>(ranks) + 1 || edges.back() != part.tiles()) {
    return rank_tiles(part.tiles(), slot, ranks);
  }
  if (rank < 0 || rank >= ranks) {
    throw Error("internal: rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  }
  return {edges[static_cast<size_t>(slot)], edges[static_cast<size_t>(slot) + 1]};
}

namespace {

// A tile run beside glass costs about this part of a whole tile beyond its computed boxes'
// FLOPs (the glass filled around them, node by node, forward and backward): vgg-mini 4096² at
// 10% tissue on this 2-core EPYC, a first-segment tile with a corner of tissue ran 55 ms of a
// whole tile's 1454 (bench/NOTES.md, session 66). Priced by FLOPs alone, shares gave the rank
// with the more such tiles 0.6 s a step more.
constexpr double kRunTileShare = 0.04;

// One pass's work by tile over `part` (SegmentGlass's per-tile FLOPs `flops`, `glass` flags,
// `dense` the pass's FLOPs without glass), each scaled by `scale` (3 for a backward): a glass
// tile's none, another's its computed FLOPs and kRunTileShare of an average tile's. Empty
// where the pass has no glass.
std::vector<double> pass_work(const Partition& part, const std::vector<int64_t>& flops,
                              const std::vector<uint8_t>& glass, int64_t dense, double scale) {
  const auto tiles = static_cast<size_t>(part.tiles());
  if (dense <= 0 || flops.size() != tiles || glass.size() != tiles) return {};
  const double run = kRunTileShare * static_cast<double>(dense) / static_cast<double>(tiles);
  std::vector<double> work(tiles, 0.0);
  for (size_t t = 0; t < tiles; ++t) {
    if (glass[t] == 0) work[t] = scale * (static_cast<double>(flops[t]) + run);
  }
  return work;
}

// Shares by `work` (pass_work; several passes' added where they share a partition), each
// rank's as a part of `dense`, the passes' work without glass: by count where there is none.
RankShares work_shares(const std::vector<double>& work, double dense, int ranks) {
  RankShares shares;
  if (ranks < 2 || dense <= 0 || work.empty()) return shares;
  shares.edges = shares_by_work(work, ranks);
  if (shares.edges.empty()) return shares;
  for (int q = 0; q < ranks; ++q) {
    double mine = 0;
    for (int64_t t = shares.edges[static_cast<size_t>(q)]; t < shares.edges[q + 1ULL]; ++t) {
      mine += work[static_cast<size_t>(t)];
    }
    shares.busiest = std::max(shares.busiest, mine / dense);
    shares.all += mine / dense;
  }
  return shares;
}

}  // namespace

void share_by_work(Segment& s, const SegmentGlass& glass, int ranks) {
  const auto forward_dense = static_cast<double>(glass.forward_dense_flops);
  const auto backward_dense = 3.0 * static_cast<double>(glass.backward_dense_flops);
  std::vector<double> forward =
      pass_work(s.forward, glass.forward_flops, glass.forward, glass.forward_dense_flops, 1.0);
  const std::vector<double> backward =
      pass_work(s.backward, glass.backward_flops, glass.backward, glass.backward_dense_flops, 3.0);
  if (s.backward == s.forward) {
    // A rank runs backward the tiles it ran forward: one share of both passes' work.
    if (forward.size() != backward.size()) return;
    for (size_t t = 0; t < forward.size(); ++t) forward[t] += backward[t];
    s.forward_shares = s.backward_shares =
        work_shares(forward, forward_dense + backward_dense, ranks);
    return;
  }
  s.forward_shares = work_shares(forward, forward_dense, ranks);
  s.backward_shares = work_shares(backward, backward_dense, ranks);
}

namespace {

const Shape& shape_of(const Plan& plan, NodeId v) { return plan.shapes.at(static_cast<size_t>(v)); }

Region whole_of(const Shape& s) { return {{0, s.height}, {0, s.width}}; }

// The hull of the tiles of segment `index`'s pass `pass` that `rank` runs (rank_range).
Region tiles_hull(const Segment& s, Pass pass, int index, int rank, int ranks) {
  const TileRange mine = rank_range(s, pass, index, rank, ranks);
  Region h;
  for (int64_t t = mine.begin; t < mine.end; ++t) h = hull(h, partition(s, pass).tile(t));
  return h;
}

// gives[p][q]: p's `own` regions, each cut to what q reads (`reads[q]`).
Gives cut_to_reads(const std::vector<std::vector<Region>>& own, const std::vector<Region>& reads) {
  const size_t ranks = own.size();
  Gives gives(ranks, std::vector<std::vector<Region>>(ranks));
  for (size_t p = 0; p < ranks; ++p) {
    for (size_t q = 0; q < ranks; ++q) {
      if (p == q) continue;
      for (const Region& r : own[p]) {
        const Region piece = intersect(r, reads[q]);
        if (!piece.empty()) gives[p][q].push_back(piece);
      }
    }
  }
  return gives;
}

// Each rank's regions `region_of(t)` of the forward tiles of segment `index` it runs.
std::vector<std::vector<Region>> own_regions(const Segment& s, int index, int ranks,
                                             const std::function<Region(int64_t)>& region_of) {
  std::vector<std::vector<Region>> own(static_cast<size_t>(ranks));
  for (int p = 0; p < ranks; ++p) {
    const TileRange mine = rank_range(s, Pass::kForward, index, p, ranks);
    for (int64_t t = mine.begin; t < mine.end; ++t) {
      const Region r = region_of(t);
      if (!r.empty()) own[static_cast<size_t>(p)].push_back(r);
    }
  }
  return own;
}

}  // namespace

Region rank_reads(const Graph& graph, const Plan& plan, int index, NodeId v, RankOf who,
                  Passes passes) {
  const bool forward = passes != Passes::kBackward, backward = passes != Passes::kForward;
  const int rank = who.rank, ranks = who.ranks;
  const Segment& s = plan.segments.at(static_cast<size_t>(index));
  Region reads;
  for (const auto& [asked, pass] :
       {std::pair{forward, Pass::kForward}, std::pair{backward, Pass::kBackward}}) {
    if (!asked) continue;
    const Region tiles = tiles_hull(s, pass, index, rank, ranks);
    if (tiles.empty()) continue;
    const auto need = segment_needs(graph, plan.shapes, s.input, s.output, tiles);
    reads = hull(reads, need.at(static_cast<size_t>(v)));
    // A share of an inner checkpoint the rank computes is read again by its backward.
    if (v != s.input)
      reads = hull(reads, barrier_share(tiles, shape_of(plan, s.output), shape_of(plan, v)));
  }
  return reads;
}

Region held_checkpoint(const Graph& graph, const Plan& plan, int index, RankOf who) {
  const Segment& s = plan.segments.at(static_cast<size_t>(index));
  if (static_cast<size_t>(index) + 1 == plan.segments.size()) {
    return whole_of(shape_of(plan, s.output));
  }
  const Region own = hull(tiles_hull(s, Pass::kForward, index, who.rank, who.ranks),
                          tiles_hull(s, Pass::kBackward, index, who.rank, who.ranks));
  return hull(own, rank_reads(graph, plan, index + 1, s.output, who, Passes::kBoth));
}

Region held_inner(const Graph& graph, const Plan& plan, int index, NodeId v, RankOf who) {
  return rank_reads(graph, plan, index, v, who, Passes::kBoth);
}

namespace {

// What rank `who` does not hold of segment `index`'s resident inner checkpoints in its forward
// and its backward (held_inner against whole), the bytes the plan's passes count less.
std::pair<int64_t, int64_t> inner_unheld(const Graph& graph, const Plan& plan, int index,
                                         RankOf who) {
  const Segment& s = plan.segments.at(static_cast<size_t>(index));
  if (!s.is<SubSegments>() || s.inner_tier() != Tier::kResident) return {0, 0};
  std::map<NodeId, int64_t> held;
  int64_t forward = 0;
  for (NodeId v : kept_inner(graph, s)) {
    const int64_t per_position = shape_of(plan, v).channels * plan.element_bytes;
    held[v] = held_inner(graph, plan, index, v, who).area() * per_position;
    forward += activation_bytes(plan, v) - held[v];
  }
  const auto whole = [&plan](NodeId v) { return activation_bytes(plan, v); };
  const auto part = [&held](NodeId v) { return held.at(v); };
  return {forward, planning::inner_backward_bytes(graph, plan.shapes, s, whole) -
                       planning::inner_backward_bytes(graph, plan.shapes, s, part)};
}

}  // namespace

// The graph bytes of segment `index`'s forward tiles that `who` does not run (`graph`: each
// tile's; none where it is empty).
int64_t unkept_graphs(const Plan& plan, int index, const std::vector<int64_t>& graph, RankOf who) {
  const Segment& s = plan.segments.at(static_cast<size_t>(index));
  if (static_cast<int64_t>(graph.size()) != s.forward.tiles()) return 0;
  const TileRange own = rank_range(s, Pass::kForward, index, who.rank, who.ranks);
  int64_t bytes = 0;
  for (int64_t t = 0; t < s.forward.tiles(); ++t) {
    if (!own.has(t)) bytes += graph[static_cast<size_t>(t)];
  }
  return bytes;
}

void hold_split(const Graph& graph, Plan& plan, int ranks, const std::vector<int64_t>& counted,
                const std::vector<std::vector<int64_t>>& graphs) {
  const size_t n = plan.segments.size();
  if (ranks < 2 || plan.passes.size() != 2 * n || counted.size() != n) return;
  std::vector<int64_t> least(plan.passes.size(), std::numeric_limits<int64_t>::max());
  for (int r = 0; r < ranks; ++r) {
    std::vector<int64_t> unheld(n, 0);  // bytes counted of each checkpoint rank r does not hold
    for (size_t j = 0; j < n; ++j) {
      const Segment& s = plan.segments[j];
      if (s.reduction >= 0 || s.tier != Tier::kResident) continue;
      const Region held = held_checkpoint(graph, plan, static_cast<int>(j), {r, ranks});
      unheld[j] = counted[j] - held.area() * shape_of(plan, s.output).channels * plan.element_bytes;
    }
    int64_t before = 0;
    int64_t unkept = 0;  // kept graphs' bytes counted from their forward on, of others' tiles
    for (size_t i = 0; i < n; ++i) {
      const int64_t input = i > 0 ? unheld[i - 1] : 0;
      const auto [inner_forward, inner_backward] =
          inner_unheld(graph, plan, static_cast<int>(i), {r, ranks});
      if (i < graphs.size())
        unkept += unkept_graphs(plan, static_cast<int>(i), graphs[i], {r, ranks});
      least[2 * i] = std::min(least[2 * i], before + unheld[i] + inner_forward + unkept);
      least[2 * i + 1] =
          std::min(least[2 * i + 1], before + 2 * unheld[i] + input + inner_backward + unkept);
      before += unheld[i];
      // Inner checkpoints kept from the forward to the backward: counted in the passes between.
      if (plan.segments[i].keeps_inner()) before += inner_forward;
    }
  }
  for (size_t p = 0; p < plan.passes.size(); ++p) plan.passes[p].checkpoints -= least[p];
  plan.predicted = plan.passes.front();
  for (const MemoryBreakdown& m : plan.passes) {
    if (m.total() > plan.predicted.total()) plan.predicted = m;
  }
}

Gives checkpoint_gives(const Graph& graph, const Plan& plan, int index, int ranks) {
  const Segment& s = plan.segments.at(static_cast<size_t>(index));
  const auto own = own_regions(s, index, ranks, [&](int64_t t) { return s.forward.tile(t); });
  std::vector<Region> reads;
  const bool last = static_cast<size_t>(index) + 1 == plan.segments.size();
  for (int q = 0; q < ranks; ++q) {
    reads.push_back(last ? whole_of(shape_of(plan, s.output))
                         : rank_reads(graph, plan, index + 1, s.output, {q, ranks}, Passes::kBoth));
  }
  return cut_to_reads(own, reads);
}

Gives inner_gives(const Graph& graph, const Plan& plan, int index, NodeId v, int ranks) {
  const Segment& s = plan.segments.at(static_cast<size_t>(index));
  const Shape& out = shape_of(plan, s.output);
  const Shape& at = shape_of(plan, v);
  const auto own = own_regions(
      s, index, ranks, [&](int64_t t) { return barrier_share(s.forward.tile(t), out, at); });
  std::vector<Region> reads;
  for (int q = 0; q < ranks; ++q) {
    reads.push_back(rank_reads(graph, plan, index, v, {q, ranks}, Passes::kBoth));
  }
  return cut_to_reads(own, reads);
}

Gives gradient_gives(const Graph& graph, const Plan& plan, int index, NodeId v, int ranks) {
  const Segment& s = plan.segments.at(static_cast<size_t>(index));
  std::vector<std::vector<Region>> adds(static_cast<size_t>(ranks));
  std::vector<Region> reads;
  for (int q = 0; q < ranks; ++q) {
    const Region added = rank_reads(graph, plan, index, v, {q, ranks}, Passes::kBackward);
    if (!added.empty()) adds[static_cast<size_t>(q)].push_back(added);
    reads.push_back(v == s.input
                        ? rank_reads(graph, plan, index - 1, v, {q, ranks}, Passes::kBackward)
                        : added);
  }
  return cut_to_reads(adds, reads);
}

int64_t given_area(const Gives& gives) {
  int64_t longest = 0;
  for (const auto& to : gives) {
    int64_t area = 0;
    for (const auto& pieces : to) {
      for (const Region& r : pieces) area += r.area();
    }
    longest = std::max(longest, area);
  }
  return longest;
}

namespace {

int64_t given_bytes(const Plan& plan, NodeId v, const Gives& gives) {
  return given_area(gives) * shape_of(plan, v).channels * plan.element_bytes;
}

// Sub-segments with barriers (the executor's SubSegmentsRun): each kept inner checkpoint
// gathered after the forward's pass (and the backward's rebuild), its gradient summed.
int64_t inner_bytes(const Graph& graph, const Plan& plan, int index, int ranks) {
  const Segment& s = plan.segments.at(static_cast<size_t>(index));
  const int64_t passes = s.keeps_inner() ? 1 : 2;
  int64_t bytes = 0;
  for (NodeId v : kept_inner(graph, s)) {
    bytes += passes * given_bytes(plan, v, inner_gives(graph, plan, index, v, ranks)) +
             given_bytes(plan, v, gradient_gives(graph, plan, index, v, ranks));
  }
  return bytes;
}

// A streaming head's merge over the ranks: a global average's sums (in the step's dtype), a
// global max's values and positions, or the attention pool's running maxima, sums and weighted
// sums (float64 each).
int64_t reduction_bytes(const Graph& graph, const Plan& plan, const Segment& s) {
  const Node& head = graph.node(s.reduction);
  const int64_t c = graph.node(s.output).channels;
  if (head.kind == OpKind::kGlobalMaxPool) return 2 * c * 8;
  if (head.kind == OpKind::kAttentionPool) {
    const int64_t b = head.branches;
    return (2 * b + b * (head.channels / b)) * 8;
  }
  return c * plan.element_bytes;
}

}  // namespace

SplitBytes split_bytes(const Graph& graph, const Plan& plan, int ranks, bool training) {
  SplitBytes b;
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    const int index = static_cast<int>(i);
    if (s.reduction < 0) {
      b.checkpoints += given_bytes(plan, s.output, checkpoint_gives(graph, plan, index, ranks));
    } else {
      b.checkpoints += reduction_bytes(graph, plan, s);
    }
    if (i > 0) {
      b.input_gradients +=
          given_bytes(plan, s.input, gradient_gives(graph, plan, index, s.input, ranks));
    } else if (plan.input_gradient) {
      b.input_gradients += activation_bytes(plan, s.input);  // the image's, summed whole
    }
    if (s.is<SubSegments>() && !barrier_rounds(graph, s.input, s.output, training).empty()) {
      b.inner_checkpoints += inner_bytes(graph, plan, index, ranks);
    }
  }
  b.parameter_gradients = plan.predicted.gradients;
  return b;
}

std::string split_refusal(const Graph& graph, const Plan& plan) {
  if (plan.segments.empty()) return "the plan runs the whole image as one piece (no tiles)";
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    if (s.is<SharedRows>()) return segment_words(graph, plan, i) + " runs as shared rows";
    if (s.inner_tier() != Tier::kResident) {
      return segment_words(graph, plan, i) + " keeps its inner checkpoints " +
             (s.inner_tier() == Tier::kHost ? "in host memory" : "on disk");
    }
  }
  return "";
}

std::string glass_split_refusal(const Graph& graph, const Plan& plan, bool training) {
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    const std::string dense = glass_dense(graph, s, training);
    if (!dense.empty()) return segment_words(graph, plan, i) + ": " + dense;
  }
  return "";
}

namespace {

std::string time_words(const Graph& graph, const Plan& plan, int ranks, double link,
                       double seconds_per_flop) {
  const SplitTime t = split_time(graph, plan, ranks, link, seconds_per_flop);
  if (t.alone <= 0) return "";
  const double per_flop = seconds_per_flop > 0 ? seconds_per_flop : plan.prices.seconds_per_flop;
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "predicted step on %d ranks %.3g s at %.3g GFLOP/s: the busiest rank's tiles "
                "%.3g s, its exchanges %.3g s at %.3g GB/s (waits at the collectives not "
                "priced)\n",
                ranks, t.total(), 1e-9 / per_flop, t.tiles, t.exchanges, link / 1e9);
  return buf;
}

}  // namespace

namespace {

bool by_work(const Segment& s, Pass pass, int ranks) {
  return ranks > 1 && shares_of(s, pass).edges.size() == static_cast<size_t>(ranks) + 1;
}

// The most tiles of segment `index`'s pass `pass` one of `ranks` ranks runs.
int64_t most_tiles(const Segment& s, Pass pass, int index, int ranks) {
  int64_t most = 0;
  for (int r = 0; r < ranks; ++r) {
    const TileRange mine = rank_range(s, pass, index, r, ranks);
    most = std::max(most, mine.end - mine.begin);
  }
  return most;
}

// The part of segment `index`'s pass `pass` its busiest rank runs: of its work where the shares
// are by work (RankShares::busiest), else of its tiles.
double busiest_part(const Segment& s, Pass pass, int index, int ranks) {
  const int64_t tiles = partition(s, pass).tiles();
  if (tiles == 0) return 0;
  if (by_work(s, pass, ranks)) return shares_of(s, pass).busiest;
  return static_cast<double>(most_tiles(s, pass, index, ranks)) / static_cast<double>(tiles);
}

}  // namespace

SplitTime split_time(const Graph& graph, const Plan& plan, int ranks, double link_bytes_per_second,
                     double seconds_per_flop) {
  SplitTime t;
  const double per_flop = seconds_per_flop > 0 ? seconds_per_flop : plan.prices.seconds_per_flop;
  if (per_flop <= 0 || ranks < 1) return t;
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    for (const auto& [pass, price] : {std::pair{Pass::kForward, s.forward_price},
                                      std::pair{Pass::kBackward, s.backward_price}}) {
      t.tiles += price * per_flop * busiest_part(s, pass, static_cast<int>(i), ranks);
      t.alone += price * per_flop * (by_work(s, pass, ranks) ? shares_of(s, pass).all : 1.0);
    }
  }
  // Each pass's price is its worst tile's times its tiles, without glass: where the plan skips
  // glass, its own price (Plan::cost, glass_savings) is what one rank takes, and the busiest
  // rank the same part of it (vgg-mini 4096² at 10% tissue on 2 ranks: 3.66 s predicted from
  // the dense prices, against the plan's 5.4 s alone; bench/NOTES.md session 66).
  const double own = plan.cost.total() * per_flop;
  if (plan.glass.any_background() && own > 0 && t.alone > 0) {
    t.tiles *= own / t.alone;
    t.alone = own;
  }
  if (ranks > 1 && link_bytes_per_second > 0) {
    t.exchanges =
        static_cast<double>(split_bytes(graph, plan, ranks).total()) / link_bytes_per_second;
  }
  return t;
}

std::string split_summary(const Graph& graph, const Plan& plan, int ranks,
                          double link_bytes_per_second, double seconds_per_flop) {
  std::string out = "split over " + std::to_string(ranks) + " ranks (slide-parallel): ";
  const std::string why = split_refusal(graph, plan);
  if (!why.empty()) return out + "not yet: " + why + "\n";
  // The most tiles a rank runs: each pass's tiles in contiguous runs (rank_range).
  int64_t busiest = 0, all = 0, worked = 0;
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    for (Pass pass : {Pass::kForward, Pass::kBackward}) {
      const Segment& s = plan.segments[i];
      busiest += most_tiles(s, pass, static_cast<int>(i), ranks);
      all += partition(s, pass).tiles();
      worked += by_work(s, pass, ranks);
    }
  }
  const SplitBytes b = split_bytes(graph, plan, ranks);
  const std::string by = worked == 0 ? std::string()
                                     : " (" + std::to_string(worked) +
                                           " passes shared by their tiles' work, glass skipped)";
  return out + "the busiest rank runs " + std::to_string(busiest) + " of " + std::to_string(all) +
         " tile passes" + by + "; each rank gives " + format_bytes(b.total()) +
         " a step to the exchanges with the others (checkpoints " + format_bytes(b.checkpoints) +
         ", input gradients " + format_bytes(b.input_gradients) +
         (b.inner_checkpoints > 0 ? ", inner checkpoints " + format_bytes(b.inner_checkpoints)
                                  : std::string()) +
         ", parameter gradients " + format_bytes(b.parameter_gradients) +
         "), each within the whole budget\n" +
         time_words(graph, plan, ranks, link_bytes_per_second, seconds_per_flop);
}

int64_t fewest_count_for_ranks(Strategy strategy, int ranks) {
  if (ranks <= 1) return 1;
  if (planning::row_strategy(strategy)) return ranks;
  return static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(ranks)) - 1e-9));
}

}  // namespace tessel::core
