#include "core/plan/cost_model.h"

#include <algorithm>
#include <set>

#include "core/plan/geometry.h"

namespace tessel::core::planning {

SubSegmentWork sub_segment_work(const Analysis& a, const Segment& s,
                                const std::vector<NodeId>& leaves, NodeId target, NodeId after) {
  const Shape& ts = a.shapes[static_cast<size_t>(target)];
  const auto need = sub_segment_needs(a.graph, a.shapes, s.input, leaves, target,
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
  c.moved = offloaded ? a.options.flops_per_byte_moved * bytes : 0;
  return c;
}

PlanCost barrier_cost(const Analysis& a, const Segment& s) {
  PlanCost c;
  const auto rounds = barrier_rounds(a.graph, s.input, s.output);
  if (rounds.empty() || s.is<WholeBarriers>()) return c;
  if (s.is<SubSegments>()) {
    // Sub-segments: the backward rebuilds the inner checkpoints (about one more forward), and
    // the dropped ones' passes.
    c.compute = static_cast<double>(a.tile_cost(s.input, s.output, middle_tile(s.forward)).flops) *
                static_cast<double>(s.forward.tiles());
    c += dropped_cost(a, s, s.inner_tier() != Tier::kResident);
    return c;
  }
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
  c.tiles = a.options.flops_per_tile *
            static_cast<double>(rounds.size() * (s.forward.tiles() + s.backward.tiles()));
  return c;
}

int64_t inner_backward_bytes(const Analysis& a, const Segment& s) {
  const std::vector<NodeId> inner = kept_inner(a.graph, s);
  std::vector<NodeId> leaves{s.input};
  leaves.insert(leaves.end(), inner.begin(), inner.end());
  std::set<NodeId> grads;  // inner checkpoints whose gradient exists
  auto add_reads = [&](NodeId target) {
    const Shape& t = a.shapes[static_cast<size_t>(target)];
    const auto need = sub_segment_needs(a.graph, a.shapes, s.input, leaves, target,
                                        Region{{0, t.height}, {0, t.width}});
    for (NodeId l : inner) {
      if (l < target && !need[static_cast<size_t>(l)].empty()) grads.insert(l);
    }
  };
  auto grad_bytes = [&]() {
    int64_t sum = 0;
    for (NodeId l : grads) sum += a.bytes(l);
    return sum;
  };
  int64_t values = 0;
  for (NodeId v : inner) values += a.bytes(v);
  add_reads(s.output);
  int64_t peak = values + grad_bytes();
  for (auto it = inner.rbegin(); it != inner.rend(); ++it) {
    grads.insert(*it);  // its correction's gradient, added with the checkpoint still held
    peak = std::max(peak, values + grad_bytes());
    values -= a.bytes(*it);
    add_reads(*it);
    peak = std::max(peak, values + grad_bytes());
    grads.erase(*it);
  }
  return peak;
}

bool has_barrier(const Graph& graph, const Segment& s) {
  for (NodeId v = s.input + 1; v <= s.output; ++v) {
    if (graph.node(v).is_barrier()) return true;
  }
  return false;
}

double joined_bytes(const Analysis& a, const Segment& s) {
  return 3.0 * static_cast<double>(worst_tile(a, s, s.forward).shared_kept_bytes) +
         static_cast<double>(a.bytes(s.output));
}

}  // namespace tessel::core::planning
