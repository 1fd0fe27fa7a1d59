#include "core/plan/geometry.h"

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "core/graph/node_vec.h"

namespace tessel::core {

std::vector<std::vector<NodeId>> barrier_rounds(const Graph& graph, NodeId input, NodeId output,
                                                bool training) {
  std::vector<NodeId> pending;
  for (NodeId v = input + 1; v <= output; ++v) {
    const Node& n = graph.node(v);
    if (n.is_barrier() && (training || n.barrier != BarrierOp::kBatchNorm)) pending.push_back(v);
  }
  // reach[i][j]: a path leads from pending[i] to pending[j] within the segment.
  const size_t k = pending.size();
  std::vector<std::vector<char>> reach(k, std::vector<char>(k, 0));
  for (size_t i = 0; i < k; ++i) {
    NodeVec<char> seen(output + 1, 0);
    seen[pending[i]] = 1;
    for (NodeId v = pending[i] + 1; v <= output; ++v) {
      for (NodeId p : graph.node(v).inputs) {
        if (p >= pending[i] && seen[p]) seen[v] = 1;
      }
    }
    for (size_t j = 0; j < k; ++j) reach[i][j] = j != i && seen[pending[j]];
  }
  std::vector<std::vector<NodeId>> rounds;
  std::vector<char> done(k, 0);
  for (size_t left = k; left > 0;) {
    std::vector<size_t> round;
    for (size_t i = 0; i < k; ++i) {
      if (done[i]) continue;
      bool blocked = false;
      for (size_t j = 0; j < k && !blocked; ++j) blocked = !done[j] && reach[i][j];
      if (!blocked) round.push_back(i);
    }
    rounds.emplace_back();
    for (size_t i : round) {
      done[i] = 1;
      rounds.back().push_back(pending[i]);
    }
    left -= round.size();
  }
  return rounds;
}

namespace {

// A walk back from `tile` of `target` to `input`; with `shares`, a barrier's input also holds
// the tile's share of it, where the backward adds the barrier's correction.
struct Walk {
  NodeId input = 0, target = 0;
  Region tile;
  bool shares = false;
};

// The region of each node (input..target) that `tile` of `target` needs: the hull over each
// node's consumers up to `target` of the windows they read, clipped (DESIGN.md rules 1-2),
// except consumers `read` says are given rather than computed. `extra`, when given: a region a
// node the tile reads also holds (a dropped inner checkpoint's share).
std::vector<Region> needs_back(const Graph& graph, const std::vector<Shape>& shapes,
                               const Walk& walk, const std::function<bool(NodeId)>& read,
                               const std::function<Region(NodeId)>& extra = nullptr) {
  const NodeId input = walk.input, target = walk.target;
  const Region& tile = walk.tile;
  const bool shares = walk.shares;
  std::vector<Region> need(static_cast<size_t>(target) + 1);
  need[static_cast<size_t>(target)] = tile;
  const Shape& target_shape = shapes[static_cast<size_t>(target)];
  for (NodeId v = target - 1; v >= input; --v) {
    const Shape& s = shapes[static_cast<size_t>(v)];
    const Region bounds{{0, s.height}, {0, s.width}};
    Region r;
    for (NodeId c : graph.consumers()[static_cast<size_t>(v)]) {
      if (c > target || read(c)) continue;
      const Node& node = graph.node(c);
      if (shares && node.is_barrier()) r = hull(r, barrier_share(tile, target_shape, s));
      const Region& out = need[static_cast<size_t>(c)];
      if (out.empty()) continue;
      const Region window{input_window(node.axis_op(0), out.y),
                          input_window(node.axis_op(1), out.x)};
      r = hull(r, intersect(window, bounds));
    }
    if (extra && !r.empty()) {  // only where the sub-segment reads v
      const Region e = extra(v);
      if (!e.empty()) r = hull(r, e);
    }
    need[static_cast<size_t>(v)] = r;
  }
  return need;
}

// For each node of segment (input, output], the indices in `targets` (the inner checkpoints
// `leaves` in order, then the output) of the sub-segments that compute it: those it leads to
// without passing a leaf. A target computes itself.
NodeVec<std::vector<int>> computed_by(const Graph& graph, NodeId input, NodeId output,
                                      const std::vector<NodeId>& leaves) {
  NodeVec<char> leaf(output + 1, 0);
  for (NodeId l : leaves) leaf[l] = 1;
  std::vector<NodeId> targets = leaves;
  targets.push_back(output);
  NodeVec<std::vector<int>> by(output + 1);
  NodeVec<char> mark(output + 1);
  for (size_t i = 0; i < targets.size(); ++i) {
    std::fill(mark.begin(), mark.end(), 0);
    mark[targets[i]] = 1;
    for (NodeId v = targets[i]; v > input; --v) {
      if (!mark[v]) continue;
      by[v].push_back(static_cast<int>(i));
      for (NodeId p : graph.node(v).inputs) {
        if (p > input && !leaf[p]) mark[p] = 1;
      }
    }
  }
  return by;
}

}  // namespace

std::vector<NodeId> inner_checkpoints(const Graph& graph, NodeId input, NodeId output) {
  std::vector<NodeId> out;
  for (NodeId v = input + 1; v <= output; ++v) {
    const Node& n = graph.node(v);
    if (n.is_barrier() && n.inputs[0] != input) out.push_back(n.inputs[0]);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.empty()) return out;
  // Forks: a node several sub-segments compute, whose consumers are computed by different
  // ones (a ResNet block's output feeds the next block's first conv and its skip connection,
  // so every later sub-segment of the stage recomputed the residual chain back to the earlier
  // blocks' last inner checkpoints). Kept too, each op of the chain runs once.
  for (bool more = true; more;) {
    more = false;
    const auto by = computed_by(graph, input, output, out);
    std::vector<NodeId> forks;
    for (NodeId v = input + 1; v < output; ++v) {
      const auto& mine = by[v];
      if (mine.size() < 2) continue;
      for (NodeId c : graph.consumers()[static_cast<size_t>(v)]) {
        if (c <= output && by[c] != mine) {
          forks.push_back(v);
          break;
        }
      }
    }
    if (forks.empty()) break;
    out.insert(out.end(), forks.begin(), forks.end());
    std::sort(out.begin(), out.end());
    more = true;
  }
  return out;
}

std::vector<Region> sub_segment_needs(const Graph& graph, const std::vector<Shape>& shapes,
                                      const SubSegment& sub, const Region& tile) {
  static const std::vector<NodeId> none;
  return sub_segment_needs(graph, shapes, sub, tile, {none, {}, {}});
}

std::vector<Region> sub_segment_needs(const Graph& graph, const std::vector<Shape>& shapes,
                                      const SubSegment& sub, const Region& tile,
                                      const DroppedShares& drops) {
  const NodeId target = sub.target;
  const std::vector<NodeId>& leaves = sub.leaves;
  const std::vector<NodeId>& dropped = drops.dropped;
  NodeVec<char> leaf(target + 1, 0);
  for (NodeId l : leaves) {
    if (l <= target) leaf[l] = 1;
  }
  NodeVec<Region> extra(target + 1);
  for (NodeId d : dropped) {
    if (d < target) {
      extra[d] = barrier_share(drops.out_tile, drops.out, shapes[static_cast<size_t>(d)]);
    }
  }
  const auto read = [&](NodeId c) { return c != target && leaf[c]; };
  const Walk walk{sub.input, target, tile, /*shares=*/false};
  if (dropped.empty()) return needs_back(graph, shapes, walk, read);
  return needs_back(graph, shapes, walk, read, [&](NodeId v) { return extra[v]; });
}

std::vector<NodeId> kept_inner(const Graph& graph, const Segment& s) {
  std::vector<NodeId> out = inner_checkpoints(graph, s.input, s.output);
  if (s.dropped_inner().empty()) return out;
  std::erase_if(out, [&](NodeId v) {
    return std::find(s.dropped_inner().begin(), s.dropped_inner().end(), v) !=
           s.dropped_inner().end();
  });
  return out;
}

std::vector<std::vector<NodeId>> dropped_readers(const Graph& graph,
                                                 const std::vector<Shape>& shapes,
                                                 const Segment& s) {
  std::vector<std::vector<NodeId>> readers(s.dropped_inner().size());
  if (s.dropped_inner().empty()) return readers;
  std::vector<NodeId> leaves{s.input};
  const std::vector<NodeId> kept = kept_inner(graph, s);
  leaves.insert(leaves.end(), kept.begin(), kept.end());
  std::vector<NodeId> targets = kept;
  targets.push_back(s.output);
  for (NodeId t : targets) {
    const Shape& ts = shapes[static_cast<size_t>(t)];
    const auto need = sub_segment_needs(graph, shapes, {s.input, leaves, t},
                                        Region{{0, ts.height}, {0, ts.width}});
    for (size_t k = 0; k < s.dropped_inner().size(); ++k) {
      const NodeId d = s.dropped_inner()[k];
      if (d < t && !need[static_cast<size_t>(d)].empty()) readers[k].push_back(t);
    }
  }
  return readers;
}

std::vector<NodeId> barriers_reading(const Graph& graph, const Segment& s, NodeId v) {
  std::vector<NodeId> out;
  for (NodeId b = std::max(v, s.input) + 1; b <= s.output; ++b) {
    if (graph.node(b).is_barrier() && graph.node(b).inputs[0] == v) out.push_back(b);
  }
  return out;
}

bool barrier_input(const Graph& graph, const Segment& s, NodeId v) {
  return !barriers_reading(graph, s, v).empty();
}

std::vector<NodeId> misplaced_drops(const Graph& graph, const std::vector<Shape>& shapes,
                                    const Segment& s) {
  std::vector<NodeId> out;
  const auto readers = dropped_readers(graph, shapes, s);
  for (size_t k = 0; k < readers.size(); ++k) {
    if (barrier_input(graph, s, s.dropped_inner()[k]) && readers[k].size() != 1) {
      out.push_back(s.dropped_inner()[k]);
    }
  }
  return out;
}

namespace {
// A tile edge `e` on an axis of size `from` scaled to one of size `to` (the far edge exactly).
int64_t scale_edge(int64_t e, int64_t from, int64_t to) { return e == from ? to : e * to / from; }
}  // namespace

Region barrier_share(const Region& tile, const Shape& out, const Shape& at) {
  auto map = scale_edge;
  return {{map(tile.y.begin, out.height, at.height), map(tile.y.end, out.height, at.height)},
          {map(tile.x.begin, out.width, at.width), map(tile.x.end, out.width, at.width)}};
}

Partition share_partition(const Partition& tiles, const Shape& out, const Shape& at) {
  // barrier_share's scaling of each edge; equal edges (empty shares) once.
  auto map = [](const std::vector<int64_t>& edges, int64_t from, int64_t to) {
    std::vector<int64_t> e;
    for (int64_t x : edges) {
      const int64_t m = scale_edge(x, from, to);
      if (e.empty() || m != e.back()) e.push_back(m);
    }
    return e;
  };
  Partition p;
  p.y_edges = map(tiles.y_edges, out.height, at.height);
  p.x_edges = map(tiles.x_edges, out.width, at.width);
  return p;
}

std::vector<std::vector<Region>> grad_additions(const Graph& graph,
                                                const std::vector<Shape>& shapes, const Segment& s,
                                                NodeId v, std::vector<NodeId>* readers) {
  std::vector<NodeId> leaves{s.input};
  const std::vector<NodeId> inner = kept_inner(graph, s);
  leaves.insert(leaves.end(), inner.begin(), inner.end());
  const Shape& out = shapes[static_cast<size_t>(s.output)];
  std::vector<std::vector<Region>> passes;
  auto run = [&](NodeId target, bool output) {
    std::vector<Region> adds;
    for (int64_t t = s.backward.tiles() - 1; t >= 0; --t) {
      const Region tile = s.backward.tile(t);
      const Region r =
          output ? tile : barrier_share(tile, out, shapes[static_cast<size_t>(target)]);
      if (r.empty()) continue;
      // A copy: the needs are a temporary (a reference into it dangled, and valgrind found the
      // plan's moved bytes read from freed memory, different from run to run).
      const Region add = sub_segment_needs(graph, shapes, {s.input, leaves, target}, r,
                                           {s.dropped_inner(), tile, out})[static_cast<size_t>(v)];
      if (!add.empty()) adds.push_back(add);
    }
    if (adds.empty()) return;
    passes.push_back(std::move(adds));
    if (readers != nullptr) readers->push_back(target);
  };
  run(s.output, true);
  for (auto it = inner.rbegin(); it != inner.rend() && *it > v; ++it) run(*it, false);
  bool corrected = false;
  for (NodeId b = s.input + 1; b <= s.output && v == s.input; ++b) {
    corrected = corrected || (graph.node(b).is_barrier() && graph.node(b).inputs[0] == v);
  }
  if (corrected) {
    std::vector<Region> shares;
    for (int64_t t = 0; t < s.backward.tiles(); ++t) {
      const Region r = barrier_share(s.backward.tile(t), out, shapes[static_cast<size_t>(v)]);
      if (!r.empty()) shares.push_back(r);
    }
    passes.push_back(std::move(shares));
    if (readers != nullptr) readers->push_back(v);
  }
  return passes;
}

std::vector<Region> segment_needs(const Graph& graph, const std::vector<Shape>& shapes,
                                  NodeId input, NodeId output, const Region& tile) {
  return needs_back(graph, shapes, {input, output, tile, /*shares=*/true},
                    [](NodeId) { return false; });
}

namespace {
// Shared rows: the rows [0, done[v]) of each node of segment (input, output] that output rows
// [0, e) need, clipped (DESIGN.md rule 1).
NodeVec<int64_t> rows_done(const Graph& graph, const std::vector<Shape>& shapes, NodeId input,
                           NodeId output, int64_t e) {
  NodeVec<int64_t> done(output + 1, 0);
  done[output] = e;
  for (NodeId v = output - 1; v >= input; --v) {
    const Window bounds{0, shapes[static_cast<size_t>(v)].height};
    int64_t d = 0;
    for (NodeId c : graph.consumers()[static_cast<size_t>(v)]) {
      if (c > output || done[c] == 0) continue;
      const Window w = intersect(input_window(graph.node(c).axis_op(0), {0, done[c]}), bounds);
      if (!w.empty()) d = std::max(d, w.end);
    }
    done[v] = d;
  }
  return done;
}

// The first row of each node that the rows after `from` (rows_done of the rows before them)
// still read, up to `all` (rows_done of the whole output); the node's height when none.
NodeVec<int64_t> rows_first(const Graph& graph, const std::vector<Shape>& shapes, NodeId input,
                            NodeId output, const NodeVec<int64_t>& from,
                            const NodeVec<int64_t>& all) {
  NodeVec<int64_t> first(output + 1, 0);
  first[output] = from[output];
  for (NodeId v = output - 1; v >= input; --v) {
    const Window bounds{0, shapes[static_cast<size_t>(v)].height};
    int64_t f = bounds.end;
    for (NodeId c : graph.consumers()[static_cast<size_t>(v)]) {
      if (c > output) continue;
      const Window left{from[c], all[c]};
      if (left.empty()) continue;
      const Window w = intersect(input_window(graph.node(c).axis_op(0), left), bounds);
      if (!w.empty()) f = std::min(f, w.begin);
    }
    first[v] = f;
  }
  return first;
}
}  // namespace

SharedRow shared_row(const Graph& graph, const std::vector<Shape>& shapes, NodeId input,
                     NodeId output, Window rows) {
  const Shape& out = shapes[static_cast<size_t>(output)];
  const std::vector<Region> whole =
      segment_needs(graph, shapes, input, output, {{0, out.height}, {0, out.width}});
  const auto all = rows_done(graph, shapes, input, output, out.height);
  const auto done_a = rows_done(graph, shapes, input, output, rows.begin);
  const auto done_b = rows_done(graph, shapes, input, output, rows.end);
  const auto first_a = rows_first(graph, shapes, input, output, done_a, all);
  const auto first_b = rows_first(graph, shapes, input, output, done_b, all);
  const size_t n = static_cast<size_t>(output) + 1;
  SharedRow row;
  row.held.resize(n);
  row.computed.resize(n);
  row.kept.resize(n);
  auto region = [&](NodeId v, int64_t begin, int64_t end) {
    return end > begin ? Region{{begin, end}, whole[static_cast<size_t>(v)].x} : Region{};
  };
  for (NodeId v = input; v <= output; ++v) {
    const auto i = static_cast<size_t>(v);
    row.held[i] = region(v, std::min(first_a[v], done_a[v]), done_b[v]);
    if (v == input) continue;
    row.computed[i] = region(v, done_a[v], done_b[v]);
    row.kept[i] = region(v, first_b[v], done_b[v]);
  }
  return row;
}

}  // namespace tessel::core
