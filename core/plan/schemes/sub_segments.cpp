// Sub-segments (SubSegments, plan/plan.h) in the planner: where the inner checkpoints go, which
// are dropped (DELTA per inner checkpoint), the bytes the backward holds and the blocks it keeps
// open, and what the scheme adds to a segment's price. The executor's side is
// exec/schemes/sub_segments.cpp.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "core/plan/cost_model.h"
#include "core/plan/geometry.h"
#include "core/plan/segment_build.h"

namespace tessel::core::planning {

SubSegmentWork sub_segment_work(const Analysis& a, const Segment& s,
                                const std::vector<NodeId>& leaves, NodeId target, NodeId after) {
  const Shape& ts = a.shapes[static_cast<size_t>(target)];
  const auto need = sub_segment_needs(a.graph, a.shapes, {s.input, leaves, target},
                                      Region{{0, ts.height}, {0, ts.width}});
  SubSegmentWork w;
  for (NodeId v = std::max(after, s.input) + 1; v <= target; ++v) {
    const bool leaf = std::find(leaves.begin(), leaves.end(), v) != leaves.end() && v != target;
    const Region& r = need[static_cast<size_t>(v)];
    if (!leaf) w.flops += static_cast<double>(flops(a.graph.node(v), r));
  }
  for (NodeId l : leaves) {
    if (l != s.input && l < target) {
      w.leaf_bytes +=
          static_cast<double>(elements(a.graph.node(l), need[static_cast<size_t>(l)]) * a.eb);
    }
  }
  return w;
}

std::map<NodeId, int> sums_rounds(const Analysis& a, const Segment& s) {
  std::map<NodeId, int> rounds;
  if (s.dropped_inner().empty()) return rounds;
  const auto readers = dropped_readers(a.graph, a.shapes, s);
  for (size_t k = 0; k < readers.size(); ++k) {
    const auto n = barriers_reading(a.graph, s, s.dropped_inner()[k]).size();
    if (readers[k].size() == 1 && n > 0) rounds[readers[k][0]] += static_cast<int>(n);
  }
  return rounds;
}

std::vector<Region> reads_with_rounds(const Analysis::Additions& adds,
                                      const std::map<NodeId, int>& rounds) {
  std::vector<Region> out;
  for (size_t p = 0; p < adds.passes.size(); ++p) {
    const auto it = rounds.find(adds.readers[p]);
    for (int r = 0; r <= (it == rounds.end() ? 0 : it->second); ++r) {
      out.insert(out.end(), adds.passes[p].begin(), adds.passes[p].end());
    }
  }
  return out;
}

PlanCost dropped_cost(const Analysis& a, const Segment& s, bool offloaded) {
  PlanCost c;
  if (s.dropped_inner().empty()) return c;
  std::vector<NodeId> leaves{s.input};
  const std::vector<NodeId> kept = kept_inner(a.graph, s);
  leaves.insert(leaves.end(), kept.begin(), kept.end());
  const auto readers = dropped_readers(a.graph, a.shapes, s);
  double f = 0, bytes = 0;
  for (size_t k = 0; k < readers.size(); ++k) {
    const NodeId d = s.dropped_inner()[k];
    if (!barrier_input(a.graph, s, d)) {
      const double more = static_cast<double>(std::max<size_t>(readers[k].size(), 1) - 1);
      const SubSegmentWork fork = sub_segment_work(a, s, leaves, d, s.input);
      f += more * 4 * fork.flops;
      bytes += more * 2 * fork.leaf_bytes;
      continue;
    }
    if (readers[k].size() != 1) {
      c.compute = kNever;
      return c;
    }
    const NodeId owner = readers[k][0];
    // Its barriers' corrections ride on the owner's tiles: every output tile must have a share
    // of the owner (an owner smaller than the output has empty shares).
    const Shape& os = a.shapes[static_cast<size_t>(owner)];
    const Shape& out = a.shapes[static_cast<size_t>(s.output)];
    if (os.height < out.height || os.width < out.width) {
      c.compute = kNever;
      return c;
    }
    const SubSegmentWork stats = sub_segment_work(a, s, leaves, d, s.input);
    f += stats.flops;
    bytes += stats.leaf_bytes;
    for (NodeId b : barriers_reading(a.graph, s, d)) {
      const SubSegmentWork round = sub_segment_work(a, s, leaves, owner, s.input);
      f += round.flops + sub_segment_work(a, s, leaves, owner, b).flops;
      bytes += round.leaf_bytes + (owner == s.output ? 0 : static_cast<double>(a.bytes(owner)));
    }
  }
  c.compute = f;
  c.moved = offloaded ? a.options.prices.per_byte_moved * bytes : 0;
  return c;
}

PlanCost scheme_cost(const Analysis& a, const Segment& s, const SubSegments& sub) {
  PlanCost c;
  if (barrier_rounds(a.graph, s.input, s.output).empty()) return c;
  // The backward rebuilds the inner checkpoints (about one more forward), and the dropped
  // ones' passes.
  c.compute = static_cast<double>(a.tile_cost(s.input, s.output, middle_tile(s.forward)).flops) *
              static_cast<double>(s.forward.tiles());
  c += dropped_cost(a, s, sub.tier != Tier::kResident);
  c.tiles = kBarrierPassTiles * a.options.prices.per_tile * sub_segment_runs(a, s);
  return c;
}

double sub_segment_runs(const Analysis& a, const Segment& s) {
  // Each inner checkpoint is a pass over the forward's tiles (the step's forward; again in the
  // backward's rebuild where they are not kept), each kept one's sub-segment a pass over the
  // backward's, and each round of sums another over its owner's. SegmentBuild::account prices
  // the output's passes. Priced as one tile each, a 9×9 sub-segments segment ran 26 ms a tile
  // beyond its FLOPs against 2 ms priced (resnet50 train-mode BN 1024², bench/NOTES.md, session
  // 56), and the search chose it over the whole segment, 7× faster; scheme_cost prices each
  // at kBarrierPassTiles.
  const auto kept = static_cast<double>(kept_inner(a.graph, s).size());
  const auto all = kept + static_cast<double>(s.dropped_inner().size());
  double rounds = 0;
  for (const auto& [owner, n] : sums_rounds(a, s)) rounds += n;
  const auto f = static_cast<double>(s.forward.tiles());
  const auto b = static_cast<double>(s.backward.tiles());
  return all * f + (s.keeps_inner() ? 0 : kept * f) + (kept + rounds) * b;
}

int64_t inner_backward_bytes(const Analysis& a, const Segment& s) {
  return inner_backward_bytes(a.graph, a.shapes, s, [&a](NodeId v) { return a.bytes(v); });
}

int64_t inner_backward_bytes(const Graph& graph, const std::vector<Shape>& shapes, const Segment& s,
                             const std::function<int64_t(NodeId)>& bytes) {
  const std::vector<NodeId> inner = kept_inner(graph, s);
  std::vector<NodeId> leaves{s.input};
  leaves.insert(leaves.end(), inner.begin(), inner.end());
  std::set<NodeId> grads;  // inner checkpoints whose gradient exists
  auto add_reads = [&](NodeId target) {
    const Shape& t = shapes[static_cast<size_t>(target)];
    const auto need = sub_segment_needs(graph, shapes, {s.input, leaves, target},
                                        Region{{0, t.height}, {0, t.width}});
    for (NodeId l : inner) {
      if (l < target && !need[static_cast<size_t>(l)].empty()) grads.insert(l);
    }
  };
  auto grad_bytes = [&]() {
    int64_t sum = 0;
    for (NodeId l : grads) sum += bytes(l);
    return sum;
  };
  int64_t values = 0;
  for (NodeId v : inner) values += bytes(v);
  add_reads(s.output);
  int64_t peak = values + grad_bytes();
  for (auto it = inner.rbegin(); it != inner.rend(); ++it) {
    grads.insert(*it);  // its correction's gradient, added with the checkpoint still held
    peak = std::max(peak, values + grad_bytes());
    values -= bytes(*it);
    add_reads(*it);
    peak = std::max(peak, values + grad_bytes());
    grads.erase(*it);
  }
  return peak;
}

// What resident or offloaded inner checkpoints add to the forward and the backward.
std::pair<int64_t, int64_t> SegmentBuild::inner_extra(Tier t) const {
  if (t == Tier::kResident) return std::pair{inner_bytes, inner_backward_bytes(a, s)};
  return std::pair{off.in_use(true, true, cap + inner_bytes) - store_fwd,
                   off.in_use(true, true, cap + 2 * inner_bytes) - store_bwd};
}

// Sub-segments where their inner checkpoints fit: resident, else in the store where the plan
// offloads. Leaves the scheme as it was (recompute rounds) where they fit in neither.
void SegmentBuild::try_sub_segments() {
  std::vector<Tier> tiers_to_try;
  if (!off.force_inner) tiers_to_try.push_back(Tier::kResident);
  if (off.inner_tier != Tier::kResident) tiers_to_try.push_back(off.inner_tier);
  for (Tier t : tiers_to_try) {
    SubSegments sub;
    sub.tier = t;
    s.scheme = std::move(sub);
    std::tie(inner_fwd, inner_bwd) = inner_extra(t);
    fwd_fixed += inner_fwd;
    bwd_fixed += inner_bwd;
    const int64_t inner_nf = choose(false), inner_nb = choose(true);
    if (inner_nf >= 0 && inner_nb >= 0) {
      nf = inner_nf;
      nb = inner_nb;
      // Offloaded ones stay in the store from the forward to the backward.
      s.as<SubSegments>()->keep_inner = t != Tier::kResident;
      return;
    }
    // No room for them: the next tier, or recompute the barriers' inputs.
    s.scheme = RecomputeRounds{};
    fwd_fixed -= inner_fwd;
    bwd_fixed -= inner_bwd;
    inner_fwd = inner_bwd = 0;
  }
}

// DELTA per inner checkpoint (PlanOptions::Overrides::drop_inner): an offloaded inner checkpoint is
// dropped where recomputing it costs less than moving it (written, read by the forward and the
// backward, its gradient written and read: five passes, as finish_candidate prices it). A barrier's
// input is recomputed in the one sub-segment that reads it (its statistic pass, a round of sums for
// each of its barriers), a fork in each sub-segment that reads it (dropped_cost). In order,
// each against the set dropped before it. resnet50 train-mode BN at 4096² in 2 GiB moved 116 GiB
// a step through inner checkpoints on disk with every one kept.
void SegmentBuild::drop_inner() {
  using Drop = PlanOptions::DropInner;
  const Drop mode = a.options.overrides.drop_inner;
  SubSegments* sub = s.as<SubSegments>();
  if (sub == nullptr || mode == Drop::kNever) return;
  if (mode == Drop::kPriced && sub->tier == Tier::kResident) return;
  const double per_byte = 5.0 * a.options.prices.per_byte_moved;
  const bool offloaded = s.inner_tier() != Tier::kResident;
  double extra = 0;
  // In order. (Forks first, then barrier inputs, was priced worse at 4096², at a CPU's prices
  // and at a GPU's: 158 against 147 s, 5.2 against 4.6 s; bench/NOTES.md session 34.)
  for (NodeId v : inner) {
    sub->dropped.push_back(v);
    const double more = dropped_cost(a, s, offloaded).total();
    const bool worth = mode == Drop::kAlways
                           ? more < kNever
                           : more - extra < per_byte * static_cast<double>(a.bytes(v));
    if (worth) {
      extra = more;
    } else {
      sub->dropped.pop_back();
    }
  }
  if (sub->dropped.empty()) return;
  // Fewer inner checkpoints held: the fixed bytes and the counts again.
  fwd_fixed -= inner_fwd;
  bwd_fixed -= inner_bwd;
  inner = kept_inner(a.graph, s);
  inner_bytes = 0;
  for (NodeId v : inner) inner_bytes += a.bytes(v);
  std::tie(inner_fwd, inner_bwd) = inner_extra(sub->tier);
  fwd_fixed += inner_fwd;
  bwd_fixed += inner_bwd;
  const int64_t f = choose(false), b = choose(true);
  if (f >= 0 && b >= 0) std::tie(nf, nb) = std::pair{f, b};
}

int64_t SegmentBuild::sub_segments_open_bytes(const Partition& p, bool exact) const {
  const bool inner_off = s.inner_tier() != Tier::kResident;
  if (!in_off && !inner_off) return 0;
  Segment t = s;
  t.backward = p;
  int64_t open = 0;  // the most open while one sub-segment runs
  if (!exact) {
    // Keyed by what is counted: -1 the input, -2 the inner checkpoints, -3 both.
    const auto key = Analysis::grad_key(t, in_off && inner_off ? -3 : in_off ? -1 : -2);
    auto hit = a.grad_strips.find(key);
    if (hit == a.grad_strips.end()) {
      hit = a.grad_strips.emplace(key, Offloading::grad_strip_bytes(a, t, p, in_off, inner_off))
                .first;
    }
    open = hit->second;
  } else {
    std::vector<NodeId> counted = inner_off ? inner : std::vector<NodeId>{};
    if (in_off) counted.insert(counted.begin(), s.input);
    std::map<NodeId, int64_t> by_reader;  // each sub-segment's sum over the leaves it adds to
    for (NodeId v : counted) {
      const Shape& vs = a.shapes[static_cast<size_t>(v)];
      const auto& adds = a.additions_by_pass(t, v);
      const Partition* reader = v == s.input ? &plan.segments[i - 1].backward : nullptr;
      const std::vector<int64_t> peaks = Offloading::open_bytes(
          off.inner_grad_blocks(a, t, v, adds.passes, reader), adds.passes, vs.channels * a.eb);
      for (size_t k = 0; k < peaks.size(); ++k) by_reader[adds.readers[k]] += peaks[k];
    }
    for (const auto& [reader, bytes] : by_reader) open = std::max(open, bytes);
  }
  if (!inner_off) return open;
  int64_t share = 0;
  for (NodeId v : inner) {
    const Shape& vs = a.shapes[static_cast<size_t>(v)];
    const Partition shares = share_partition(p, out, vs);
    auto widest = [](const std::vector<int64_t>& e) {
      int64_t w = 0;
      for (size_t j = 0; j + 1 < e.size(); ++j) w = std::max(w, e[j + 1] - e[j]);
      return w;
    };
    share = std::max(share, widest(shares.y_edges) * widest(shares.x_edges) * vs.channels * a.eb);
  }
  return open + 3 * share;
}

// The store's blocks of offloaded inner checkpoints and of their gradients.
void SegmentBuild::sub_segments_blocks() {
  SubSegments& sub = *s.as<SubSegments>();
  for (NodeId v : inner) {
    sub.blocks.push_back(off.inner_blocks(a, s, v));
    sub.grad_blocks.push_back(off.inner_grad_blocks(a, s, v, a.additions(s, v)));
  }
}

}  // namespace tessel::core::planning
