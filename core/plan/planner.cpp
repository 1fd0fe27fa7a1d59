#include "core/plan/planner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/plan/geometry.h"

namespace tessel::core {

namespace {

constexpr int64_t kUnfit = std::numeric_limits<int64_t>::max() / 4;
constexpr double kNever = std::numeric_limits<double>::infinity();

int64_t elements(const Shape& s) { return s.channels * s.height * s.width; }
int64_t elements(const Node& n, const Region& r) { return n.channels * r.area(); }

// Elements of a conv's weight (0 for other ops).
int64_t weight_elements(const Node& n) {
  if (n.kind != OpKind::kConv) return 0;
  const ConvSpec& c = *n.conv;
  return (c.in_channels / c.groups_) * c.kernel_size[0] * c.kernel_size[1] * c.out_channels;
}

// Forward multiply-adds ×2 of node `n` producing region `r`.
int64_t flops(const Node& n, const Region& r) {
  if (n.kind == OpKind::kConv) {
    const ConvSpec& c = *n.conv;
    return 2 * (c.in_channels / c.groups_) * c.kernel_size[0] * c.kernel_size[1] * c.out_channels *
           r.area();
  }
  if (n.kind == OpKind::kMaxPool || n.kind == OpKind::kAvgPool) {
    return n.pool->kernel_size[0] * n.pool->kernel_size[1] * elements(n, r);
  }
  return elements(n, r);
}

struct Analysis {
  const Graph& graph;
  std::vector<Shape> shapes;
  PlanOptions options;
  int64_t eb;

  int64_t bytes(NodeId v) const { return elements(shapes[static_cast<size_t>(v)]) * eb; }

  // Working set of one tile of segment (input, output]. Forward without autograd: each
  // activation lives until its last consumer. Backward: the recompute keeps what autograd saves
  // (conv and max pool inputs, max pool indices, relu/sigmoid/tanh outputs, gelu/leaky/affine
  // inputs), then gradients flow down, freeing each node's saved tensors as it passes.
  struct TileCost {
    int64_t forward_bytes = 0, backward_bytes = 0, flops = 0;
    int64_t kept_bytes = 0;  // what the tile's autograd graph holds after its forward (and y)
    int64_t kept_input_bytes = 0, kept_output_bytes = 0;  // the input's and y's part of it
    int64_t shared_kept_bytes = 0;  // shared rows: what the row keeps for the next (shared_row)
  };
  // Memoised: the search builds many plans that share segments and tiles (the local search
  // below made planning resnet50 at 2048² take 3 s without it). Depends only on the graph, the
  // shapes and the element size, none of which change during a search.
  using TileKey = std::array<int64_t, 6>;
  mutable std::map<TileKey, TileCost> tile_costs;
  // worst_tile's, by segment and partition.
  using PartitionKey =
      std::tuple<NodeId, NodeId, std::vector<int64_t>, std::vector<int64_t>, bool /*shared*/>;
  mutable std::map<PartitionKey, TileCost> worst_tiles;
  // Segments run as sub-segments: grad_additions and the search's estimate of the bytes they
  // leave open (Offloading::grad_strip_bytes), by segment, backward partition and node.
  using GradKey = std::tuple<NodeId, NodeId, std::vector<int64_t>, std::vector<int64_t>, NodeId,
                             std::vector<NodeId> /*dropped_inner*/>;
  struct Additions {
    std::vector<std::vector<Region>> passes;
    std::vector<NodeId> readers;  // each pass's sub-segment (grad_additions)
  };
  mutable std::map<GradKey, Additions> grad_adds;
  mutable std::map<GradKey, int64_t> grad_strips;
  // A streaming reduction's own bytes per position of the tiles of `reduction_input` (the last
  // segment's output): an attention pool copies its tile to float64 and holds a few float64
  // rows per branch (core/exec/attention.cpp) in both passes.
  NodeId reduction_input = -1;
  int64_t reduction_bytes_per_position = 0;
  static GradKey grad_key(const Segment& s, NodeId v) {
    return {s.input, s.output, s.backward.y_edges, s.backward.x_edges, v, s.dropped_inner()};
  }
  const Additions& additions_by_pass(const Segment& s, NodeId v) const {
    const GradKey key = grad_key(s, v);
    const auto hit = grad_adds.find(key);
    if (hit != grad_adds.end()) return hit->second;
    Additions adds;
    adds.passes = grad_additions(graph, shapes, s, v, &adds.readers);
    return grad_adds.emplace(key, std::move(adds)).first->second;
  }
  const std::vector<std::vector<Region>>& additions(const Segment& s, NodeId v) const {
    return additions_by_pass(s, v).passes;
  }
  TileCost tile_cost(NodeId input, NodeId output, const Region& tile) const {
    const TileKey key{input, output, tile.y.begin, tile.y.end, tile.x.begin, tile.x.end};
    const auto hit = tile_costs.find(key);
    if (hit != tile_costs.end()) return hit->second;
    return tile_costs.emplace(key, compute_tile_cost(input, output, tile)).first->second;
  }
  TileCost compute_tile_cost(NodeId input, NodeId output, const Region& tile) const {
    return compute_cost(input, output, tile, segment_needs(graph, shapes, input, output, tile),
                        nullptr);
  }
  // One row of a shared-rows segment (core/plan/plan.h shared_row), memoised like tile_cost.
  TileCost shared_cost(NodeId input, NodeId output, Window rows) const {
    const TileKey key{input, output, rows.begin, rows.end, -1, -1};
    const auto hit = tile_costs.find(key);
    if (hit != tile_costs.end()) return hit->second;
    return tile_costs.emplace(key, compute_shared_cost(input, output, rows)).first->second;
  }
  // The row holds its held rows where a tile holds its needs, and computes only its computed
  // rows. Beyond them: the forward's concatenation of the inherited rows with the computed ones
  // (both at once, at the widest node) and its copies of the rows it keeps; the backward's
  // gradients of the inherited rows (handed back) and of the kept ones (handed to it).
  TileCost compute_shared_cost(NodeId input, NodeId output, Window rows) const {
    const Shape& out = shapes[static_cast<size_t>(output)];
    const SharedRow row = shared_row(graph, shapes, input, output, rows);
    TileCost cost = compute_cost(input, output, {rows, {0, out.width}}, row.held, &row.computed);
    int64_t widest = 0, inherited = 0, kept = 0;
    for (NodeId v = input + 1; v <= output; ++v) {
      const auto i = static_cast<size_t>(v);
      const Node& n = graph.node(v);
      const int64_t held = elements(n, row.held[i]), computed = elements(n, row.computed[i]);
      if (held > computed && computed > 0) widest = std::max(widest, computed);
      inherited += held - computed;
      kept += elements(n, row.kept[i]);
    }
    cost.forward_bytes += (widest + kept) * eb;
    cost.backward_bytes += (inherited + kept) * eb;
    cost.shared_kept_bytes = kept * eb;
    return cost;
  }
  // Working set and FLOPs of a tile whose nodes hold `need`; FLOPs over `computed` when given
  // (shared rows), else over `need`.
  TileCost compute_cost(NodeId input, NodeId output, const Region& tile,
                        const std::vector<Region>& need,
                        const std::vector<Region>* computed) const {
    const size_t count = static_cast<size_t>(output) + 1;
    const Shape& out_shape = shapes[static_cast<size_t>(output)];
    const bool whole_tile = options.whole_barriers && tile.y.begin == 0 && tile.x.begin == 0 &&
                            tile.y.end == out_shape.height && tile.x.end == out_shape.width;
    TileCost cost;
    std::vector<int> uses(count, 0);
    for (NodeId v = input + 1; v <= output; ++v) {
      for (NodeId p : graph.node(v).inputs) ++uses[static_cast<size_t>(p)];
    }
    std::vector<int64_t> out_bytes(count, 0), own(count, 0);
    // kept_until[v]: the lowest node whose backward still needs v's output (v's output is kept
    // by autograd until then); -1 when nobody saves it.
    std::vector<NodeId> kept_until(count, -1);
    auto keep = [&](NodeId v, NodeId by) {
      NodeId& k = kept_until[static_cast<size_t>(v)];
      k = k < 0 ? by : std::min(k, by);
    };
    out_bytes[static_cast<size_t>(input)] =
        elements(graph.node(input), need[static_cast<size_t>(input)]) * eb;
    // The no-grad forward converts the input tile to channels-last: a second copy at the start.
    int64_t live = out_bytes[static_cast<size_t>(input)], peak = 2 * live;
    std::vector<int> left = uses;
    for (NodeId v = input + 1; v <= output; ++v) {
      const Node& n = graph.node(v);
      const Region& r = need[static_cast<size_t>(v)];
      const int64_t b = elements(n, r) * eb;
      out_bytes[static_cast<size_t>(v)] = b;
      // An explicit pad copies the input window; the op pads symmetric borders itself
      // (core/exec/tile_ops.cpp), so only windows that cross one border more than the other copy.
      int64_t pad_copy = 0;
      if (n.kind == OpKind::kConv || n.kind == OpKind::kMaxPool || n.kind == OpKind::kAvgPool) {
        const Shape& in = shapes[static_cast<size_t>(n.inputs[0])];
        const Region window{input_window(n.axis_op(0), r.y), input_window(n.axis_op(1), r.x)};
        const Region inside = intersect(window, Region{{0, in.height}, {0, in.width}});
        const bool asymmetric = inside.y.begin - window.y.begin != window.y.end - inside.y.end ||
                                inside.x.begin - window.x.begin != window.x.end - inside.x.end;
        if (!r.empty() && asymmetric) {
          pad_copy = graph.node(n.inputs[0]).channels * window.area() * eb;
        }
      }
      // The no-grad forward runs relu-like ops in place on a fresh single-reader tensor
      // (core/exec/executor.cpp): no new bytes.
      const Node& producer = graph.node(n.inputs[0]);
      const bool inplace = runs_in_place(n) && producer.id != input &&
                           graph.consumers()[static_cast<size_t>(producer.id)].size() == 1 &&
                           allocates_output(producer);
      // oneDNN reorders the larger of a conv's input and output into a scratch buffer
      // (measured: peak above live = output + max(input, output)).
      // Both passes also copy the weight twice (its channels-last or blocked reorder and, in the
      // backward, the weight gradient before it is added to .grad): measured 2.0–2.3× the
      // weight above the activations for darknet19's 512→1024 convs on 32² tiles.
      const int64_t in_bytes = out_bytes[static_cast<size_t>(n.inputs[0])];
      const int64_t weights = 2 * weight_elements(n) * eb;
      // A channel norm copies its input channels-last and its output back.
      const bool channel_norm =
          n.kind == OpKind::kPointwise && n.pointwise == Pointwise::kChannelNorm;
      // Dropout's mask is hashed in int64 (core/exec/dropout.cpp): two such tensors at once, and
      // the mask in the tile's dtype.
      const bool dropout = n.kind == OpKind::kPointwise && n.pointwise == Pointwise::kDropout;
      const int64_t scratch = n.kind == OpKind::kConv ? std::max(in_bytes, b) + weights
                              : channel_norm          ? 2 * b
                              : dropout               ? 2 * elements(n, r) * 8 + b
                                                      : 0;
      peak = std::max(peak, live + (inplace ? 0 : b + pad_copy + scratch));
      live += b;
      cost.flops += flops(n, computed != nullptr ? (*computed)[static_cast<size_t>(v)] : r);
      for (NodeId p : n.inputs) {
        if (--left[static_cast<size_t>(p)] == 0) live -= out_bytes[static_cast<size_t>(p)];
      }
      // What this node's backward keeps.
      switch (n.kind) {
        case OpKind::kConv:
        case OpKind::kMaxPool:
          if (pad_copy > 0) {
            own[static_cast<size_t>(v)] += pad_copy;
          } else {
            keep(n.inputs[0], v);
          }
          if (n.kind == OpKind::kMaxPool) own[static_cast<size_t>(v)] += elements(n, r) * 8;
          break;
        case OpKind::kPointwise:
          if (n.pointwise == Pointwise::kRelu || n.pointwise == Pointwise::kSigmoid ||
              n.pointwise == Pointwise::kTanh) {
            keep(v, v);
          } else if (n.pointwise == Pointwise::kChannelNorm) {
            // layer_norm keeps its channels-last copy of the input.
            own[static_cast<size_t>(v)] += b;
          } else if (n.pointwise != Pointwise::kIdentity && n.pointwise != Pointwise::kScalar) {
            keep(n.inputs[0], v);
          }
          break;
        case OpKind::kBinary:
          if (n.binary == Binary::kMul || n.binary == Binary::kDiv) {
            for (NodeId p : n.inputs) keep(p, v);
          }
          break;
        case OpKind::kBarrier:
          // The tile form (LibTorch's batch norm kernel with the statistic as constants, or
          // SE's scale) keeps its input; the correction on the tile's share of the input keeps
          // a centred copy of it. A one-tile segment runs its barriers whole, as LibTorch does
          // (WholeBarriers): the input, no correction.
          keep(n.inputs[0], v);
          if (!whole_tile) own[static_cast<size_t>(v)] += in_bytes;
          break;
        default:
          break;
      }
    }
    cost.forward_bytes = peak;

    // Backward of the tile: recompute (everything kept, plus transients), then gradients.
    int64_t kept = 0;
    std::vector<int64_t> freed_at(count, 0);  // bytes released when node v's backward ran
    for (NodeId v = input; v <= output; ++v) {
      const size_t i = static_cast<size_t>(v);
      kept += own[i];
      freed_at[i] += own[i];
      if (kept_until[i] >= 0) {
        kept += out_bytes[i];
        freed_at[static_cast<size_t>(kept_until[i])] += out_bytes[i];
      }
    }
    // Recompute with autograd: what is kept so far, the node's input when nothing keeps it,
    // its output, and a conv's scratch.
    int64_t bwd_peak = 0, kept_so_far = out_bytes[static_cast<size_t>(input)];
    for (NodeId v = input + 1; v <= output; ++v) {
      const size_t i = static_cast<size_t>(v);
      const Node& n = graph.node(v);
      const NodeId p = n.inputs[0];
      const int64_t in_bytes = out_bytes[static_cast<size_t>(p)];
      const int64_t unkept_input =
          kept_until[static_cast<size_t>(p)] < 0 && p != input ? in_bytes : 0;
      const int64_t scratch = n.kind == OpKind::kConv
                                  ? std::max(in_bytes, out_bytes[i]) + 2 * weight_elements(n) * eb
                                  : 0;
      bwd_peak = std::max(bwd_peak, kept_so_far + unkept_input + out_bytes[i] + own[i] + scratch);
      kept_so_far += own[i] + (kept_until[i] >= 0 ? out_bytes[i] : 0);
    }
    // Gradients flow down; each node frees what it kept once its backward ran. A conv's
    // backward also reorders the output gradient and its input (measured: input gradient +
    // output + max(input, output / 4) above the live gradients).
    int64_t held = kept;
    const auto out_index = static_cast<size_t>(output);
    cost.kept_bytes = kept + (kept_until[out_index] < 0 ? out_bytes[out_index] : 0);
    cost.kept_output_bytes = out_bytes[out_index];
    const auto in_index = static_cast<size_t>(input);
    cost.kept_input_bytes = kept_until[in_index] >= 0 ? out_bytes[in_index] : 0;
    for (NodeId v = output; v > input; --v) {
      const Node& n = graph.node(v);
      const int64_t out = out_bytes[static_cast<size_t>(v)];
      int64_t grad_in = 0;
      for (NodeId p : n.inputs) grad_in += out_bytes[static_cast<size_t>(p)];
      int64_t scratch = 0;
      if (n.kind == OpKind::kConv) {
        scratch = out + std::max(grad_in, out / 4) + 2 * weight_elements(n) * eb;
      } else if ((n.kind == OpKind::kPointwise &&
                  (n.pointwise == Pointwise::kAffine || n.pointwise == Pointwise::kScale)) ||
                 n.kind == OpKind::kBarrier) {
        scratch = out;  // the scale's gradient: grad · x in full before it is summed per channel
      } else if (n.kind == OpKind::kPointwise && n.pointwise == Pointwise::kChannelNorm) {
        scratch = 2 * out;  // the channels-last gradient and its copy back
      }
      bwd_peak = std::max(bwd_peak, held + out + grad_in + scratch);
      held -= freed_at[static_cast<size_t>(v)];
    }
    cost.backward_bytes = bwd_peak;
    if (output == reduction_input) {
      const int64_t extra = reduction_bytes_per_position * tile.area();
      cost.forward_bytes += extra;
      cost.backward_bytes += extra;
    }
    return cost;
  }
};

// The tile that holds most: the middle one (border tiles lose their halo to clipping).
Region middle_tile(const Partition& p) { return p.tile((p.rows() / 2) * p.cols() + p.cols() / 2); }

bool row_strategy(Strategy s) { return s == Strategy::kRows || s == Strategy::kRowsShared; }

Partition partition_for(Strategy s, const Shape& out, int64_t n) {
  if (row_strategy(s)) return Partition::even(out.height, out.width, n, 1);
  return Partition::even(out.height, out.width, n, n);
}

int64_t max_count(Strategy s, const Shape& out) {
  return row_strategy(s) ? out.height : std::max(out.height, out.width);
}

// LR-CNN OverL: rows balanced so that each row with its overlap reads the same number of input
// rows (border rows have a one-sided halo, so they get more output rows).
// Shared rows (2PS, `shared`) are balanced by the input rows each holds: the first row holds
// the halo of every layer, the others one layer's, so the first gets fewer output rows (the
// paper's skewed rows).
std::vector<int64_t> balanced_rows(const Analysis& a, NodeId input, NodeId output, int64_t rows,
                                   bool shared = false) {
  const Shape& out = a.shapes[static_cast<size_t>(output)];
  rows = std::clamp<int64_t>(rows, 1, out.height);
  auto in_rows = [&](int64_t begin, int64_t end) {
    if (shared) {
      return shared_row(a.graph, a.shapes, input, output, {begin, end})
          .held[static_cast<size_t>(input)]
          .y.size();
    }
    const Region tile{{begin, end}, {0, 1}};
    return segment_needs(a.graph, a.shapes, input, output, tile)[static_cast<size_t>(input)]
        .y.size();
  };
  auto greedy = [&](int64_t limit, std::vector<int64_t>* edges) {
    int64_t begin = 0, count = 0;
    if (edges) edges->assign(1, 0);
    while (begin < out.height) {
      int64_t lo = begin + 1, hi = out.height;  // largest end with in_rows <= limit
      if (in_rows(begin, lo) > limit) return kUnfit;
      while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (in_rows(begin, mid) <= limit)
          lo = mid;
        else
          hi = mid - 1;
      }
      begin = lo;
      ++count;
      if (edges) edges->push_back(begin);
    }
    return count;
  };
  int64_t lo = 1, hi = a.shapes[static_cast<size_t>(input)].height;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (greedy(mid, nullptr) <= rows)
      hi = mid;
    else
      lo = mid + 1;
  }
  std::vector<int64_t> edges;
  greedy(lo, &edges);
  return edges;
}

// The largest working set over the tiles of a partition: every row or column when there are
// few, else the picks below on each axis.
Analysis::TileCost compute_worst_tile(const Analysis& a, const Segment& s, const Partition& p);

Analysis::TileCost worst_tile(const Analysis& a, const Segment& s, const Partition& p) {
  auto key = std::make_tuple(s.input, s.output, p.y_edges, p.x_edges, s.is<SharedRows>());
  const auto hit = a.worst_tiles.find(key);
  if (hit != a.worst_tiles.end()) return hit->second;
  return a.worst_tiles.emplace(std::move(key), compute_worst_tile(a, s, p)).first->second;
}

// The tiles that stand for all of a partition's: border tiles and their neighbours (clipped
// halos), the middle one, and the largest interior one: the partition's tiles differ by one row
// or column (26 rows over 64 output rows are 2 or 3 high), and the middle tile may be a small one
// (measured: darknet19 1024² rows, 107 MiB on the 3-row tiles, 92 predicted from a 2-row middle
// tile). Every tile where there are at most 8 per axis.
std::vector<int64_t> sample_tiles(const Partition& p) {
  auto picks = [](int64_t n, const std::function<int64_t(int64_t)>& extent) {
    std::vector<int64_t> out;
    if (n <= 8) {
      for (int64_t i = 0; i < n; ++i) out.push_back(i);
    } else {
      int64_t largest = 2;
      for (int64_t i = 2; i < n - 2; ++i) {
        if (extent(i) > extent(largest)) largest = i;
      }
      out = {0, 1, n / 2, largest, n - 2, n - 1};
    }
    return out;
  };
  const auto height = [&p](int64_t r) { return p.tile(r * p.cols()).y.size(); };
  const auto width = [&p](int64_t c) { return p.tile(c).x.size(); };
  std::vector<int64_t> tiles;
  for (int64_t r : picks(p.rows(), height)) {
    for (int64_t c : picks(p.cols(), width)) tiles.push_back(r * p.cols() + c);
  }
  return tiles;
}

Analysis::TileCost compute_worst_tile(const Analysis& a, const Segment& s, const Partition& p) {
  auto cost = [&](const Region& tile) {
    return s.is<SharedRows>() ? a.shared_cost(s.input, s.output, tile.y)
                              : a.tile_cost(s.input, s.output, tile);
  };
  Analysis::TileCost worst;
  for (int64_t t : sample_tiles(p)) {
    const auto tc = cost(p.tile(t));
    worst.forward_bytes = std::max(worst.forward_bytes, tc.forward_bytes);
    worst.backward_bytes = std::max(worst.backward_bytes, tc.backward_bytes);
  }
  if (s.is<SharedRows>()) {
    // Shared rows compute each position once: the FLOPs of one row over the whole output,
    // spread over the rows (the cost model multiplies them back). The rows each keeps for the
    // next are all held from the forward to the backward.
    const Shape& out = a.shapes[static_cast<size_t>(s.output)];
    const int64_t total = a.shared_cost(s.input, s.output, {0, out.height}).flops;
    worst.flops = (total + p.rows() - 1) / p.rows();
    for (int64_t r = 0; r + 1 < p.rows(); ++r) {
      const int64_t e = p.y_edges[static_cast<size_t>(r) + 1];
      const SharedRow edge = shared_row(a.graph, a.shapes, s.input, s.output, {e, e});
      for (NodeId v = s.input + 1; v <= s.output; ++v) {
        worst.shared_kept_bytes += elements(a.graph.node(v), edge.kept[static_cast<size_t>(v)]);
      }
    }
    worst.shared_kept_bytes *= a.eb;
    return worst;
  }
  // FLOPs of a typical tile: the cost model multiplies it by the tile count.
  worst.flops = a.tile_cost(s.input, s.output, middle_tile(p)).flops;
  return worst;
}

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

// The FLOPs of the nodes (after, target] that the sub-segment computing all of `target` from
// `leaves` runs (a leaf is read, not computed), and the bytes of the inner checkpoints among
// its leaves that it reads (`leaves` less the segment's input).
struct SubSegmentWork {
  double flops = 0, leaf_bytes = 0;
};
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

// The barriers of segment `s` that read its dropped inner checkpoints (SubSegments::dropped),
// counted by the sub-segment that recomputes them (dropped_readers): the rounds of sums it runs
// before its backward. (A fork has no barrier; a barrier input read by several is never run.)
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

// The regions of `adds` (grad_additions' passes), in order, each pass once more for each round
// of sums its sub-segment runs first (sums_rounds): what those passes read.
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

// What recomputing segment `s`'s dropped inner checkpoints adds: each one's statistic pass in the
// forward (its sub-segment from the leaves, once more), and for each of its barriers a round of
// sums before its owner's backward (the owner's sub-segment recomputed, and its backward from
// the owner down to the barrier, priced as that part's forward). `compute` in FLOPs; `moved`:
// the bytes those passes read of offloaded inner checkpoints (each round reads the owner's
// leaves and its gradient again), priced at PlanOptions::flops_per_byte_moved when `offloaded`.
// Rounds in a chain of dropped ones reread the same leaves: resnet50's layer1 with every barrier
// input dropped read each 1 GiB block output 8 times a step. A dropped fork is computed by each
// of its k readers instead of once: (k − 1) more forwards, recomputes and backwards (two
// forwards' worth) of its sub-segment, and its leaves read (k − 1) more times each way.
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

// What a segment's barriers add (core/exec/barrier.h): in the forward, each barrier's statistic
// pass recomputes its input over the shares of the forward tiles; in the backward, each round
// of sums recomputes the segment's tiles and takes the gradient back to its barriers. Steers the
// search to checkpoints that split chains of barriers.
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

// What a segment run as sub-segments holds beyond its tiles in its backward at its fullest
// (the executor's inner_backward): the inner checkpoints not yet passed, and the gradients of
// those a later sub-segment has added into, each from the first addition until its own
// sub-segment has run; an inner checkpoint goes once its correction is added, before its
// sub-segment (which reads only those before it).
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

// The store's unit for a window: a sixteenth of it, at least 1 MiB (a disk's and a PCIe copy's
// efficient size) and at most a quarter. Every pass counts four blocks beyond the window (one
// crossing its end, one in the caller's hand, one written, one queued), so blocks of a quarter
// counted twice the window; the blocks tiles cut are mostly far smaller (rows of vgg-mini 16384²
// in 1 GiB: ~3 MiB against a 59 MiB block).
int64_t default_block_bytes(int64_t window) {
  constexpr int64_t kFloor = int64_t{1} << 20;
  return std::max<int64_t>(1, std::min(window / 4, std::max(window / 16, kFloor)));
}

// Sizes of the offload machinery (core/store/tile_store.h).
struct Offloading {
  int64_t window_bytes = 0, block_bytes = 0;
  bool partly_resident = false;  // keep blocks resident where the budget leaves room
  // Where inner checkpoints the budget cannot hold whole go (SubSegments::tier); resident:
  // nowhere (such segments recompute in rounds). `force_inner`: there even where they fit.
  Tier inner_tier = Tier::kResident;
  bool force_inner = false;
  // Resident bytes the store holds during a pass: the blocks read ahead within the window (one
  // may cross its end, one is in the caller's hand) and the writes behind (write_behind_bytes()
  // in flight when the caller puts one more). One window for all the activations the store
  // holds: no more than `cap`, the bytes of the offloaded activations around the pass.
  int64_t in_use(bool reads, bool writes, int64_t cap) const {
    const int64_t r = reads ? window_bytes + 2 * block_bytes : 0;
    const int64_t w = writes ? write_behind_bytes() + block_bytes : 0;
    return std::min(cap, r + w);
  }
  // The store's write-behind (TileStoreOptions::write_behind_bytes): one block queued behind the
  // one being written. As deep as the window, it was counted at every pass's peak but hardly
  // used (writes keep up with compute): offloading plans measured 55–70% of their prediction.
  int64_t write_behind_bytes() const { return block_bytes; }
  // Blocks: each forward tile of the producer split into strips as wide as the tile (rows
  // tiles read whole strips) and at most block_bytes, so a tile fills whole blocks.
  Partition blocks(const Analysis& a, NodeId v, const Partition& forward) const {
    const int64_t per_pixel = std::max<int64_t>(1, a.graph.node(v).channels * a.eb);
    int64_t widest = 1;
    for (int64_t c = 0; c < forward.cols(); ++c) {
      widest = std::max(widest, forward.x_edges[static_cast<size_t>(c) + 1] -
                                    forward.x_edges[static_cast<size_t>(c)]);
    }
    const int64_t width = std::clamp<int64_t>(block_bytes / per_pixel, 1, widest);
    const int64_t height = std::max<int64_t>(1, block_bytes / (per_pixel * width));
    Partition p;
    p.y_edges = subdivide(forward.y_edges, height);
    p.x_edges = subdivide(forward.x_edges, width);
    return p;
  }
  // The gradient of segment `s`'s offloaded input while the backward tiles of `part` add into
  // it (in reverse row-major order, as the executor runs them). Its blocks are the cells between
  // the edges of the tiles' input regions, split to the block size: a block is stored after the
  // last tile that adds to it, so only cells where tiles' regions overlap stay open across tiles.
  // Regions are separable per axis (one tile per row and one per column give them all) and grow
  // with the tile index, so the tiles adding to a cell are a contiguous range of rows × columns.
  //
  // Open bytes while tile (r, c) runs: the part of row r's region shared with row r − 1 or r + 1
  // (open from the first of those rows to the last, bounded by the full width), and in row r
  // alone the strip shared by columns c and c + 1 (a column's overlap, the row's height).
  // `every`: all rows and columns (the chosen partition); else the three around the middle,
  // which the budget search can afford for partitions of thousands of tiles.
  static int64_t open_bytes(const Analysis& a, const Segment& s, const Partition& part,
                            bool every) {
    const auto v = static_cast<size_t>(s.input);
    const Shape& in = a.shapes[static_cast<size_t>(s.input)];
    const int64_t rows = part.rows(), cols = part.cols();
    std::vector<int64_t> rs, cs;
    if (every) {
      for (int64_t r = 0; r < rows; ++r) rs.push_back(r);
      for (int64_t c = 0; c < cols; ++c) cs.push_back(c);
    } else {
      for (int64_t d = -1; d <= 1; ++d) {
        if (rows / 2 + d >= 0 && rows / 2 + d < rows) rs.push_back(rows / 2 + d);
        if (cols / 2 + d >= 0 && cols / 2 + d < cols) cs.push_back(cols / 2 + d);
      }
    }
    std::vector<Window> ny, nx;
    for (int64_t r : rs) {
      ny.push_back(segment_needs(a.graph, a.shapes, s.input, s.output, part.tile(r * cols))[v].y);
    }
    for (int64_t c : cs) {
      nx.push_back(segment_needs(a.graph, a.shapes, s.input, s.output, part.tile(c))[v].x);
    }
    return strip_bytes(ny, nx, in.width) * in.channels * a.eb;
  }
  // Pixels open at once when tiles whose regions are rows `ny` × columns `nx` (consecutive
  // rows and columns of the partition) add into an activation `width` wide (as above).
  static int64_t strip_bytes(const std::vector<Window>& ny, const std::vector<Window>& nx,
                             int64_t width) {
    int64_t overlap_x = 0;  // the widest strip two neighbouring columns share
    for (size_t j = 0; j + 1 < nx.size(); ++j) {
      overlap_x = std::max(overlap_x, intersect(nx[j], nx[j + 1]).size());
    }
    int64_t worst = 0;
    for (size_t i = 0; i < ny.size(); ++i) {
      const Window up = i > 0 ? intersect(ny[i], ny[i - 1]) : Window{};
      const Window down = i + 1 < ny.size() ? intersect(ny[i], ny[i + 1]) : Window{};
      const int64_t shared = up.size() + down.size() - intersect(up, down).size();
      worst = std::max(worst, shared * width + (ny[i].size() - shared) * overlap_x);
    }
    return worst;
  }
  // The same for the gradients of a segment run as sub-segments while its backward (partition
  // `part`) adds into them: its input's (`input`) and its inner checkpoints' (`inner`). The
  // sub-segments run one after another and a block is stored after each pass's last addition
  // into it, so what is open at once is what one sub-segment adds into: the sum over the leaves
  // it reads, for the worst sub-segment, from the three rows and columns around the middle.
  // (Summing every leaf's worst over all sub-segments counted resnet50's 8192² segments as
  // holding 40 gradients open at once, and the search found only 85×85-tile plans.)
  static int64_t grad_strip_bytes(const Analysis& a, const Segment& s, const Partition& part,
                                  bool input, bool inner) {
    const std::vector<NodeId> inner_nodes = kept_inner(a.graph, s);
    std::vector<NodeId> leaves{s.input};
    leaves.insert(leaves.end(), inner_nodes.begin(), inner_nodes.end());
    std::vector<NodeId> counted;
    if (input) counted.push_back(s.input);
    if (inner) counted.insert(counted.end(), inner_nodes.begin(), inner_nodes.end());
    const Shape& out = a.shapes[static_cast<size_t>(s.output)];
    std::vector<NodeId> readers{s.output};
    readers.insert(readers.end(), inner_nodes.begin(), inner_nodes.end());
    const int64_t rows = part.rows(), cols = part.cols();
    int64_t worst = 0;
    for (NodeId reader : readers) {
      auto needs = [&](const Region& tile) {
        const Region r = reader == s.output
                             ? tile
                             : barrier_share(tile, out, a.shapes[static_cast<size_t>(reader)]);
        if (r.empty()) return std::vector<Region>{};
        return sub_segment_needs(a.graph, a.shapes, s.input, leaves, reader, r, s.dropped_inner(),
                                 tile, out);
      };
      std::vector<std::vector<Region>> by_row, by_col;
      for (int64_t d = -1; d <= 1; ++d) {
        if (rows / 2 + d >= 0 && rows / 2 + d < rows) {
          by_row.push_back(needs(part.tile((rows / 2 + d) * cols)));
        }
        if (cols / 2 + d >= 0 && cols / 2 + d < cols)
          by_col.push_back(needs(part.tile(cols / 2 + d)));
      }
      int64_t sum = 0;
      for (NodeId v : counted) {
        if (v >= reader) break;
        const auto at = [v](const std::vector<Region>& n) {
          return n.empty() ? Region{} : n[static_cast<size_t>(v)];
        };
        std::vector<Window> ny, nx;
        for (const auto& n : by_row) ny.push_back(at(n).y);
        for (const auto& n : by_col) nx.push_back(at(n).x);
        const Shape& vs = a.shapes[static_cast<size_t>(v)];
        sum += strip_bytes(ny, nx, vs.width) * vs.channels * a.eb;
      }
      worst = std::max(worst, sum);
    }
    return worst;
  }
  // The gradient's blocks: the cells between the tiles' region edges, and the edges of the
  // producer's backward tiles (`reader`, which read the gradient whole blocks at a time), split
  // to the block size.
  Partition grad_blocks(const Analysis& a, const Segment& s, const Partition& part,
                        const Partition& reader) const {
    const auto v = static_cast<size_t>(s.input);
    const Shape& in = a.shapes[v];
    std::vector<int64_t> ey = reader.y_edges, ex = reader.x_edges;
    for (int64_t r = 0; r < part.rows(); ++r) {
      const Window w =
          segment_needs(a.graph, a.shapes, s.input, s.output, part.tile(r * part.cols()))[v].y;
      ey.insert(ey.end(), {std::clamp<int64_t>(w.begin, 0, in.height),
                           std::clamp<int64_t>(w.end, 0, in.height)});
    }
    for (int64_t c = 0; c < part.cols(); ++c) {
      const Window w = segment_needs(a.graph, a.shapes, s.input, s.output, part.tile(c))[v].x;
      ex.insert(ex.end(), {std::clamp<int64_t>(w.begin, 0, in.width),
                           std::clamp<int64_t>(w.end, 0, in.width)});
    }
    return cells(a, s.input, std::move(ey), std::move(ex));
  }

  // Offloaded inner checkpoint `v` of `s`: its value in the cells between the shares of the
  // forward tiles (each written by one) and the regions the backward's sub-segments read of it
  // (the regions they add into its gradient, grad_additions), split to the block size. Blocks
  // of the forward shares alone were read whole by every backward tile meeting them: resnet50
  // at 8192² (5×5 forward, 22×22 backward tiles) read act4's 4 GiB value 6.6 times a step.
  Partition inner_blocks(const Analysis& a, const Segment& s, NodeId v) const {
    const Partition shares = share_partition(s.forward, a.shapes[static_cast<size_t>(s.output)],
                                             a.shapes[static_cast<size_t>(v)]);
    std::vector<int64_t> ey = shares.y_edges, ex = shares.x_edges;
    for (const auto& adds : a.additions(s, v)) {
      for (const Region& r : adds) {
        ey.insert(ey.end(), {r.y.begin, r.y.end});
        ex.insert(ex.end(), {r.x.begin, r.x.end});
      }
    }
    return cells(a, v, std::move(ey), std::move(ex));
  }
  // Its gradient: the cells between the regions the backward's passes add (`passes`,
  // grad_additions) and the shares of the backward tiles its sub-segment reads, split to the
  // block size (as grad_blocks). For the input of a segment run as sub-segments (`v` its
  // input): the same cells, with the edges of the producer's backward tiles (`reader`)
  // instead of the shares.
  Partition inner_grad_blocks(const Analysis& a, const Segment& s, NodeId v,
                              const std::vector<std::vector<Region>>& passes,
                              const Partition* reader = nullptr) const {
    const Shape& vs = a.shapes[static_cast<size_t>(v)];
    const Partition shares =
        reader != nullptr
            ? *reader
            : share_partition(s.backward, a.shapes[static_cast<size_t>(s.output)], vs);
    std::vector<int64_t> ey = shares.y_edges, ex = shares.x_edges;
    for (const auto& adds : passes) {
      for (const Region& r : adds) {
        ey.insert(ey.end(), {r.y.begin, r.y.end});
        ex.insert(ex.end(), {r.x.begin, r.x.end});
      }
    }
    return cells(a, v, std::move(ey), std::move(ex));
  }
  // The most bytes of `blocks` open at once during each of the passes of additions `passes`
  // (a block is open from its first addition in a pass to its last, StoredActivation).
  static std::vector<int64_t> open_bytes(const Partition& blocks,
                                         const std::vector<std::vector<Region>>& passes,
                                         int64_t per_pixel) {
    auto each = [&](const Region& r, const auto& f) {
      for (int64_t b : blocks.meeting(r)) f(b);
    };
    std::vector<int64_t> left(static_cast<size_t>(blocks.tiles()), 0);
    std::vector<char> open(left.size(), 0);
    int64_t now = 0;
    std::vector<int64_t> peaks;
    for (const auto& adds : passes) {
      int64_t peak = 0;
      for (const Region& r : adds) each(r, [&](int64_t b) { ++left[static_cast<size_t>(b)]; });
      for (const Region& r : adds) {
        each(r, [&](int64_t b) {
          const auto i = static_cast<size_t>(b);
          if (!open[i]) {
            open[i] = 1;
            now += blocks.tile(b).area() * per_pixel;
          }
          peak = std::max(peak, now);
          if (--left[i] == 0) {
            open[i] = 0;
            now -= blocks.tile(b).area() * per_pixel;
          }
        });
      }
      peaks.push_back(peak);
    }
    return peaks;
  }
  // The cells between edges `ey` × `ex` (any order, repeats) of node `v`, split to the block size.
  Partition cells(const Analysis& a, NodeId v, std::vector<int64_t> ey,
                  std::vector<int64_t> ex) const {
    const Shape& vs = a.shapes[static_cast<size_t>(v)];
    for (auto [e, end] : {std::pair{&ey, vs.height}, std::pair{&ex, vs.width}}) {
      for (int64_t& x : *e) x = std::clamp<int64_t>(x, 0, end);
      e->insert(e->end(), {0, end});
      std::sort(e->begin(), e->end());
      e->erase(std::unique(e->begin(), e->end()), e->end());
    }
    const int64_t per_pixel = std::max<int64_t>(1, vs.channels * a.eb);
    int64_t widest = 1;
    for (size_t j = 0; j + 1 < ex.size(); ++j) widest = std::max(widest, ex[j + 1] - ex[j]);
    const int64_t width = std::clamp<int64_t>(block_bytes / per_pixel, 1, widest);
    const int64_t height = std::max<int64_t>(1, block_bytes / (per_pixel * width));
    Partition p;
    p.y_edges = subdivide(ey, height);
    p.x_edges = subdivide(ex, width);
    return p;
  }

  static std::vector<int64_t> subdivide(const std::vector<int64_t>& edges, int64_t side) {
    std::vector<int64_t> out{edges.front()};
    for (size_t i = 0; i + 1 < edges.size(); ++i) {
      const int64_t len = edges[i + 1] - edges[i];
      const int64_t parts = std::max<int64_t>(1, (len + side - 1) / side);
      for (int64_t k = 1; k <= parts; ++k) out.push_back(edges[i] + len * k / parts);
    }
    return out;
  }
};

// Bytes read back from the tier when the tiles of `part` over segment `s`'s output read node
// `v`, stored in `blocks` (of which the first `resident` stay resident), in the order the
// executor runs them (`reverse`: the backward pass). A block is read whole; one read again
// before the distinct blocks scheduled in between fill `window` bytes is still in memory (the
// tile store keeps a block whose next read is within the window). The other activations read
// in the same pass share the window, so this counts somewhat less than the store moves.
int64_t read_bytes(const std::vector<Region>& regions, const Partition& blocks, int64_t per_pixel,
                   int64_t window, int64_t resident = 0) {
  std::vector<int64_t> order;  // block indices in read order
  for (const Region& r : regions) {
    const auto meets = blocks.meeting(r);
    order.insert(order.end(), meets.begin(), meets.end());
  }
  auto bytes = [&](int64_t b) {
    const Region r = blocks.tile(b);
    return b < resident ? 0 : r.area() * per_pixel;
  };
  int64_t n = 0;
  // Per block: whether it is in memory, and the last read position that counted it as seen
  // (arrays, not hash sets: resnet50 at 8192² spent 40% of its planning in their allocations
  // and hashing).
  std::vector<char> in_memory(static_cast<size_t>(blocks.tiles()), 0);
  std::vector<size_t> seen(static_cast<size_t>(blocks.tiles()), std::numeric_limits<size_t>::max());
  for (size_t p = 0; p < order.size(); ++p) {
    const int64_t b = order[p];
    if (!in_memory[static_cast<size_t>(b)]) n += bytes(b);
    // Kept when it is read again before the distinct blocks in between fill the window.
    bool keep = false;
    int64_t ahead = 0;
    for (size_t q = p + 1; q < order.size() && ahead < window; ++q) {
      if (order[q] == b) {
        keep = true;
        break;
      }
      size_t& mark = seen[static_cast<size_t>(order[q])];
      if (mark != p) {
        mark = p;
        ahead += bytes(order[q]);
      }
    }
    in_memory[static_cast<size_t>(b)] = keep;
  }
  return n;
}

int64_t read_bytes(const Analysis& a, const Segment& s, const Partition& part, NodeId v,
                   const Partition& blocks, int64_t window, bool reverse, int64_t resident = 0) {
  std::vector<Region> regions;
  for (int64_t k = 0; k < part.tiles(); ++k) {
    const int64_t t = reverse ? part.tiles() - 1 - k : k;
    regions.push_back(
        segment_needs(a.graph, a.shapes, s.input, s.output, part.tile(t))[static_cast<size_t>(v)]);
  }
  return read_bytes(regions, blocks, a.graph.node(v).channels * a.eb, window, resident);
}

// The pass that holds most, and what it holds.
std::pair<int64_t, MemoryBreakdown> highest(const std::vector<MemoryBreakdown>& passes) {
  std::pair<int64_t, MemoryBreakdown> top{0, {}};
  for (const MemoryBreakdown& p : passes) {
    if (p.total() > top.first) top = {p.total(), p};
  }
  return top;
}

// Whether segment `s` holds a barrier: unless it runs as one tile (WholeBarriers),
// its tiles run in several passes (core/exec/barrier.h), so the backward recomputes them and keeps
// no graph.
bool has_barrier(const Graph& graph, const Segment& s) {
  for (NodeId v = s.input + 1; v <= s.output; ++v) {
    if (graph.node(v).is_barrier()) return true;
  }
  return false;
}

// The bytes shared rows' concatenations copy in one pass over segment `s`. A row joins no
// activation whole (core/exec/shared_row.h): it copies the rows it inherits into one piece with
// the rows computed from them, the seam its consumers read across its two pieces, and the rows it
// keeps for the next (about three times the kept rows, over all rows), and joins its output's
// rows once.
double joined_bytes(const Analysis& a, const Segment& s) {
  return 3.0 * static_cast<double>(worst_tile(a, s, s.forward).shared_kept_bytes) +
         static_cast<double>(a.bytes(s.output));
}

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
      // No graph (the tiles run in several passes), but the inner checkpoints may stay: from
      // this forward to this backward, which already count them.
      if (!s.is<SubSegments>() || s.inner_tier() != Tier::kResident) continue;
      int64_t inner_bytes = 0;
      for (NodeId v : kept_inner(a.graph, s)) inner_bytes += a.bytes(v);
      std::vector<MemoryBreakdown> after = passes;
      bool fits = true;
      for (size_t p = 2 * i + 2; p < passes.size() && fits; ++p) {
        after[p].checkpoints += inner_bytes;
        fits = after[p].total() <= budget;
      }
      if (!fits) continue;
      passes = std::move(after);
      s.as<SubSegments>()->keep_inner = true;
      continue;
    }
    // A graph that saves its input tile saves a view of a resident checkpoint (no new bytes);
    // a one-tile segment's output is its checkpoint (the executor keeps no copy).
    const bool input_view = i > 0;
    const bool output_is_checkpoint = s.forward.tiles() == 1 && s.reduction < 0;
    // What the later passes leave free, against what the graphs keep at least (the whole
    // segment's, less its input and output: tiles add halos): most segments of most candidate
    // plans in the search stop here, before the tile-by-tile count.
    int64_t later_free = budget;
    for (size_t p = 2 * i + 2; p < passes.size(); ++p) {
      later_free = std::min(later_free, budget - passes[p].total());
    }
    const Shape& out = a.shapes[static_cast<size_t>(s.output)];
    const auto whole = s.is<SharedRows>() ? a.shared_cost(s.input, s.output, {0, out.height})
                                          : a.tile_cost(s.input, s.output,
                                                        Region{{0, out.height}, {0, out.width}});
    if (whole.kept_bytes - whole.kept_input_bytes - whole.kept_output_bytes > later_free) continue;
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
    int64_t kept = 0, working = 0, most = 0;
    for (int64_t t : counted) {
      const auto tc = s.is<SharedRows>() ? a.shared_cost(s.input, s.output, s.forward.tile(t).y)
                                         : a.tile_cost(s.input, s.output, s.forward.tile(t));
      const int64_t shared = (input_view ? tc.kept_input_bytes : 0) +
                             (output_is_checkpoint ? tc.kept_output_bytes : 0);
      kept += tc.kept_bytes - shared;
      most = std::max(most, tc.kept_bytes - shared);
      // The tile model frees the saved output and input as the gradient passes them; a
      // checkpoint they belong to stays (measured at vgg-mini 2048²: 64 MiB more in segment 4's
      // backward than modelled without this).
      working = std::max(working, tc.backward_bytes - tc.kept_bytes + shared);
    }
    if (!every) kept = most * s.forward.tiles();
    // The forward with autograd and the backward without recompute hold the kept graphs and
    // at most one tile's transients on top (its recompute-and-backward peak beyond its graph).
    std::vector<MemoryBreakdown> after = passes;
    bool fits = true;
    for (size_t p = 2 * i; p < passes.size() && fits; ++p) {
      after[p].checkpoints += kept;
      if (p == 2 * i || p == 2 * i + 1) after[p].working_set = working;
      fits = after[p].total() <= budget;
    }
    if (!fits) continue;
    passes = std::move(after);
    // The backward recomputed its tiles' forward (build's 3× its FLOPs: recompute and
    // gradient); now it takes the gradients through the forward's tiles (2× theirs). Shared
    // rows no longer join their rows again in a recompute.
    const double fwd = static_cast<double>(worst_tile(a, s, s.forward).flops) *
                       static_cast<double>(s.forward.tiles());
    const double bwd = static_cast<double>(worst_tile(a, s, s.backward).flops) *
                       static_cast<double>(s.backward.tiles());
    saved.compute += 3.0 * bwd - 2.0 * fwd;
    saved.tiles +=
        a.options.flops_per_tile * static_cast<double>(s.backward.tiles() - s.forward.tiles());
    if (s.is<SharedRows>()) saved.copies += a.options.flops_per_byte_copied * joined_bytes(a, s);
    if (auto* rows = s.as<SharedRows>()) {
      rows->keep_graph = true;
    } else if (auto* whole = s.as<WholeBarriers>()) {
      whole->keep_graph = true;
    } else {
      s.scheme = KeptGraph{};
    }
    s.backward = s.forward;
    s.backward_working_bytes = working;
  }
  return saved;
}

// The tile store's share of one pass (Offloading::in_use): what it would hold (`demand`),
// bounded by the bytes of the offloaded checkpoints around the pass (`cap`: segments `around`'s
// outputs). A checkpoint's resident blocks never move, so they come out of that bound.
// Its writes (`writes`, part of the demand) are of other bytes (gradients, the pass's output),
// so resident blocks leave them.
struct StoreShare {
  int64_t demand = 0, writes = 0, cap = kUnfit;
  std::vector<size_t> around;
  int64_t resident = 0;  // of the checkpoints around, kept resident so far
  // What it holds with `more` resident bytes of them.
  int64_t held(int64_t more = 0) const {
    return std::max(std::min(cap - resident - more, demand), std::min(writes, cap));
  }
};

// Partly resident checkpoints: the budget an offloading plan leaves free in the passes an
// offloaded checkpoint lives through (its segment's forward to the next segment's backward)
// keeps its first blocks resident, so they never move. Lifetimes nest (a later checkpoint lives
// within an earlier one's), so giving the free bytes to the latest checkpoints first loses
// nothing. `passes`: each pass's bytes at its peak (segment i's forward at 2i, backward at
// 2i + 1); the resident blocks are added to their checkpoints. `shares`: the store's in each
// pass; where a checkpoint bounds it, its resident blocks are blocks the store held anyway (the
// window reached over all of it): vgg-mini 8192² in 1 GiB counted maxpool4's 59% resident
// share twice in segments 1 and 2's backward, 70 MiB over the measured peak.
void keep_partly_resident(const Analysis& a, Plan& plan, std::vector<MemoryBreakdown>& passes,
                          std::vector<StoreShare>& shares, int64_t budget) {
  const size_t n = plan.segments.size();
  for (size_t i = n; i-- > 0;) {
    Segment& s = plan.segments[i];
    if (s.tier == Tier::kResident || s.reduction >= 0 || i + 1 >= n) continue;
    std::vector<size_t> lifetime;
    for (size_t j = i; j < n; ++j) lifetime.push_back(2 * j);
    for (size_t j = i + 1; j < n; ++j) lifetime.push_back(2 * j + 1);
    // What `kept` resident bytes add to pass `p`.
    auto added = [&](size_t p, int64_t kept) {
      const StoreShare& share = shares[p];
      if (std::find(share.around.begin(), share.around.end(), i) == share.around.end()) return kept;
      return kept - (share.held() - share.held(kept));
    };
    auto fits = [&](int64_t kept) {
      for (size_t p : lifetime) {
        if (passes[p].total() + added(p, kept) > budget) return false;
      }
      return true;
    };
    const int64_t per_pixel = a.graph.node(s.output).channels * a.eb;
    int64_t kept = 0, blocks = 0;
    for (; blocks < s.blocks.tiles(); ++blocks) {
      const int64_t b = s.blocks.tile(blocks).area() * per_pixel;
      if (!fits(kept + b)) break;
      kept += b;
    }
    if (blocks == 0) continue;
    s.resident_blocks = blocks;
    s.resident_bytes = kept;
    for (size_t p : lifetime) {
      passes[p].checkpoints += added(p, kept);
      auto& around = shares[p].around;
      if (std::find(around.begin(), around.end(), i) != around.end()) shares[p].resident += kept;
    }
  }
}

// Where segment i's output checkpoint lives among `n_bounds` - 1 segments: `tiers[i]`, the last
// segment's always resident.
Tier tier_at(const std::vector<Tier>& tiers, size_t n_bounds, size_t i) {
  return i < tiers.size() && i + 2 < n_bounds ? tiers[i] : Tier::kResident;
}

// One segment of build(), from checkpoint bounds[i] to bounds[i + 1]: the bytes each of its
// passes holds besides its tiles, the partitions that fit what the budget leaves, where its
// barriers' inner checkpoints and its shared rows' kept rows go, and what it adds to the plan.
// `plan` holds the segments before it; `base` is the model state and head, `held` the earlier
// checkpoints alive while it runs.
class SegmentBuild {
 public:
  SegmentBuild(const Analysis& a, const Offloading& off, Strategy strategy, int64_t budget,
               const Plan& plan, size_t i, const std::vector<NodeId>& bounds,
               const std::vector<Tier>& tiers, NodeId reduction, int64_t base, int64_t held)
      : a(a), off(off), strategy(strategy), budget(budget), plan(plan), i(i), held(held) {
    s.input = bounds[i];
    s.output = bounds[i + 1];
    const bool last_segment = i + 2 == bounds.size();
    if (last_segment) s.reduction = reduction;
    // 2PS runs segments without barriers; those with run as OverL rows.
    if (strategy == Strategy::kRowsShared && !has_barrier(a.graph, s)) s.scheme = SharedRows{};
    out = a.shapes[static_cast<size_t>(s.output)];
    out_bytes = s.reduction >= 0 ? 0 : a.bytes(s.output);
    const int64_t in_grad = (s.input != 0 || a.options.input_gradient) ? a.bytes(s.input) : 0;
    // Only the resident tier counts against the budget; on a CPU build the host tier is RAM.
    auto counted = [&](size_t j) { return tier_at(tiers, bounds.size(), j) != Tier::kDisk; };
    s.tier = tier_at(tiers, bounds.size(), i);
    if (i > 0) in_tier = tier_at(tiers, bounds.size(), i - 1);
    out_off = !counted(i);
    in_off = i > 0 && !counted(i - 1);
    // Forward: earlier checkpoints + this output; backward: the same + the output's gradient
    // and the input's gradient. An offloaded checkpoint holds only the store's share in use:
    // this pass's reads and writes and those that reach into it (the next pass's first reads
    // start in this one's last tile, the previous pass's writes drain in this one). Forward i
    // reads its input, writes its output; backward i reads both (the output's gradient) and
    // writes the input's gradient, and backward i - 1 reads segment i - 1's input.
    const bool before_in_off = i > 1 && !counted(i - 2);
    cap = (in_off ? a.bytes(s.input) : 0) + (out_off ? a.bytes(s.output) : 0) +
          (before_in_off ? a.bytes(bounds[i - 1]) : 0);
    out_fwd = out_off ? 0 : out_bytes;
    out_bwd = out_off ? 0 : 2 * out_bytes;
    // An offloaded input's gradient also holds the blocks open while tiles add into it: that
    // depends on the backward partition, so it is added per partition (open_bytes).
    in_bwd = in_off ? 0 : in_grad;
    // The store's share of each pass (keep_partly_resident takes resident blocks out of it).
    std::vector<size_t> around;  // the segments whose offloaded outputs bound it
    if (in_off) around.push_back(i - 1);
    if (out_off) around.push_back(i);
    if (before_in_off) around.push_back(i - 2);
    const bool reads = in_off || out_off, writes = in_off || out_off;
    const int64_t written = off.in_use(false, writes, kUnfit);
    fwd_share = {off.in_use(reads, writes, kUnfit), written, cap, around};
    bwd_share = {off.in_use(reads || before_in_off, writes, kUnfit), written, cap, around};
    store_fwd = fwd_share.held();
    store_bwd = bwd_share.held();
    // Barriers' inner checkpoints: held whole in the forward, and in the backward as
    // inner_backward_bytes says; the input's gradient is accumulated whole (an offloaded
    // input's goes to the store at the end, so it holds no open blocks while tiles add into it).
    barriers = has_barrier(a.graph, s);
    inner = inner_checkpoints(a.graph, s.input, s.output);
    for (NodeId v : inner) inner_bytes += a.bytes(v);
    fwd_fixed = base + held + out_fwd + store_fwd;
    bwd_fixed = base + held + out_bwd + in_bwd + store_bwd;
  }

  // Chooses the forward's and backward's tile counts, placing the barriers (whole, as
  // sub-segments over inner checkpoints, or recomputed in rounds) and the shared rows' kept
  // rows (resident, else in the store); -1 in `nf` or `nb` where no partition fits.
  void choose_counts() {
    if (s.is<SharedRows>() && off.force_inner) store_kept_rows();
    nf = choose(false);
    nb = choose(true);
    if (s.is<SharedRows>() && (nf < 0 || nb < 0) && s.shared_tier() == Tier::kResident &&
        off.inner_tier != Tier::kResident) {
      store_kept_rows();
      nf = choose(false);
      nb = choose(true);
    }
    place_barriers();
    drop_inner();
  }

  bool fits_budget() const { return nf >= 0 && nb >= 0; }

  // The smallest a pass of this segment can hold: at the finest partition.
  int64_t finest_bytes() const;

  // Sets the partitions the counts chose (fixed ones where the options fix them), rows
  // balanced where that holds no more.
  void set_partitions();

  // Adds the segment's cost to `cost`; returns its forward's and backward's bytes at their
  // peaks (as build's passes) and fills the segment's FLOPs and the store's blocks.
  std::pair<MemoryBreakdown, MemoryBreakdown> account(PlanCost& cost, const MemoryBreakdown& fixed);

  Segment s;
  int64_t out_bytes = 0;  // the output checkpoint's (0 for a reduction's)
  bool out_off = false;   // the output is offloaded
  StoreShare fwd_share, bwd_share;

 private:
  // What resident or offloaded inner checkpoints add to the forward and the backward.
  std::pair<int64_t, int64_t> inner_extra(Tier t) const {
    if (t == Tier::kResident) return std::pair{inner_bytes, inner_backward_bytes(a, s)};
    return std::pair{off.in_use(true, true, cap + inner_bytes) - store_fwd,
                     off.in_use(true, true, cap + 2 * inner_bytes) - store_bwd};
  }
  int64_t open_bytes(const Partition& p, bool exact) const;
  // Shared rows also hold what every row keeps for the next (more with more rows: the search
  // finds the fewest rows whose working set fits, then checks them with it).
  bool fits(int64_t n, bool backward, int64_t avail, bool with_kept = false) const {
    const Partition p = partition_for(strategy, out, n);
    const auto tc = worst_tile(a, s, p);
    const int64_t kept = with_kept ? tc.shared_kept_bytes : 0;
    if (!backward) return tc.forward_bytes + kept <= avail;
    return tc.backward_bytes + open_bytes(p, false) + kept <= avail;
  }
  int64_t choose(bool backward) const;
  void drop_inner();
  Partition fixed_partition() const {
    if (a.options.tiles_y) {
      return Partition::even(
          out.height, out.width, *a.options.tiles_y,
          row_strategy(strategy) ? 1 : a.options.tiles_x.value_or(*a.options.tiles_y));
    }
    const int64_t t = std::max<int64_t>(1, *a.options.tile_size);
    return Partition::even(out.height, out.width, (out.height + t - 1) / t,
                           row_strategy(strategy) ? 1 : (out.width + t - 1) / t);
  }
  // Shared rows' kept rows where the budget has no room for them (or the options force it):
  // in the store, as offloaded inner checkpoints are (written behind the forward, read ahead
  // in the backward, within the store's window).
  void store_kept_rows() {
    s.as<SharedRows>()->kept_tier = off.inner_tier;
    const int64_t more_fwd = off.in_use(in_off || out_off, true, kUnfit) - store_fwd;
    const int64_t more_bwd = off.in_use(true, true, kUnfit) - store_bwd;
    store_fwd += more_fwd;
    store_bwd += more_bwd;
    fwd_fixed += more_fwd;
    bwd_fixed += more_bwd;
  }
  void place_barriers();

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

// Bytes open while partition `p`'s backward tiles run, one sub-segment at a time (see
// grad_strip_bytes): the blocks of the offloaded gradients it adds into (the input's, the
// inner checkpoints'), and for an offloaded inner checkpoint's sub-segment three shares of
// it: the gradient, the correction, and the value (the tile's own output, copied under bf16
// autocast). Counting two (no copy) made the search pick partitions whose exact open bytes
// then did not fit (resnet50 4096² in 2 GiB found no offloading plan and recomputed in
// rounds): the search does not refine those. The chosen partition's (`exact`) from the
// blocks the executor will use; the search's from the rows and columns around the middle.
int64_t SegmentBuild::open_bytes(const Partition& p, bool exact) const {
  if (!s.is<SubSegments>()) return in_off ? Offloading::open_bytes(a, s, p, exact) : 0;
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
    std::vector<NodeId> counted;
    if (in_off) counted.push_back(s.input);
    if (inner_off) counted.insert(counted.end(), inner.begin(), inner.end());
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

// The fewest tiles whose pass fits what the budget leaves (0: the options fix the partition;
// 1 without a budget; -1: none fits).
int64_t SegmentBuild::choose(bool backward) const {
  const int64_t fixed_bytes = backward ? bwd_fixed : fwd_fixed;
  if (a.options.tiles_y || a.options.tile_size) return 0;  // fixed partition below
  if (budget <= 0) return 1;
  const int64_t avail = budget - fixed_bytes;
  if (avail <= 0) return -1;
  int64_t hi = max_count(strategy, out);
  if (!fits(hi, backward, avail)) return -1;
  int64_t lo = 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid, backward, avail))
      hi = mid;
    else
      lo = mid + 1;
  }
  if (s.is<SharedRows>() && s.shared_tier() == Tier::kResident &&
      !fits(lo, backward, avail, true)) {
    // Unless offloading is ruled out, the store takes the kept rows (the offloading
    // search, or choose_counts). Where it is: more rows hold less each but keep more in all,
    // so the fewest rows where both fit, if any (doubling from `lo`, then halving back to the
    // fewest). Not for `auto`: VGG-16 4096² in 2 GiB measured 360.0 s a step so (52 rows,
    // resident) against 347.8 with its kept rows on disk (37 rows; bench/NOTES.md, session
    // 31), within this machine's noise, and a resident plan found here would skip the
    // offloading search.
    if (a.options.offload != PlanOptions::Offload::kNever) return -1;
    const int64_t most = max_count(strategy, out);
    int64_t below = lo, n = lo;
    do {
      below = n;
      n = std::min(2 * n, most);
    } while (!fits(n, backward, avail, true) && n < most);
    if (!fits(n, backward, avail, true)) return -1;
    while (below + 1 < n) {
      const int64_t mid = below + (n - below) / 2;
      if (fits(mid, backward, avail, true))
        n = mid;
      else
        below = mid;
    }
    return n;
  }
  return lo;
}

// Barriers: whole where the segment fits as one tile both ways (they run as LibTorch runs
// them), else as sub-segments where the inner checkpoints fit (resident, else in the store
// where the plan offloads), else recomputed in rounds.
void SegmentBuild::place_barriers() {
  const bool one_tile = nf == 0 ? fixed_partition().tiles() == 1 : nf == 1 && nb == 1;
  if (!barriers) return;
  if (a.options.whole_barriers && one_tile) {
    s.scheme = WholeBarriers{};
    return;
  }
  s.scheme = RecomputeRounds{};
  if (!a.options.inner_checkpoints) return;
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

// DELTA per inner checkpoint (PlanOptions::drop_inner): an offloaded inner checkpoint is dropped
// where recomputing it costs less than moving it (written, read by the forward and the backward,
// its gradient written and read: five passes, as finish_candidate prices it). A barrier's input
// is recomputed in the one sub-segment that reads it (its statistic pass, a round of sums for
// each of its barriers), a fork in each sub-segment that reads it (dropped_cost). In order,
// each against the set dropped before it. resnet50 train-mode BN at 4096² in 2 GiB moved 116 GiB
// a step through inner checkpoints on disk with every one kept.
void SegmentBuild::drop_inner() {
  using Drop = PlanOptions::DropInner;
  const Drop mode = a.options.drop_inner;
  SubSegments* sub = s.as<SubSegments>();
  if (sub == nullptr || mode == Drop::kNever) return;
  if (mode == Drop::kPriced && sub->tier == Tier::kResident) return;
  const double per_byte = 5.0 * a.options.flops_per_byte_moved;
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

int64_t SegmentBuild::finest_bytes() const {
  const Partition finest_partition = partition_for(strategy, out, max_count(strategy, out));
  const auto finest = a.tile_cost(s.input, s.output, middle_tile(finest_partition));
  const int64_t finest_open = open_bytes(finest_partition, false);
  int64_t finest_here =
      std::max(fwd_fixed + finest.forward_bytes, bwd_fixed + finest_open + finest.backward_bytes);
  if (s.is<SharedRows>() && s.shared_tier() == Tier::kResident && !fits_budget() &&
      a.options.offload == PlanOptions::Offload::kNever) {
    // Resident shared rows keep more with more rows: the finest partition is not the
    // smallest. The least over row counts in powers of two (asked only where it does not fit,
    // for the message that says what would; only where the store cannot take the kept rows,
    // as in choose: in every failing build of auto's resident search it made planning
    // VGG-16 on a 200000² slide 25% slower).
    finest_here = kUnfit;
    for (int64_t n = 1;; n = std::min(2 * n, max_count(strategy, out))) {
      const Partition p = partition_for(strategy, out, n);
      const auto tc = worst_tile(a, s, p);
      finest_here =
          std::min(finest_here, std::max(fwd_fixed + tc.forward_bytes,
                                         bwd_fixed + open_bytes(p, false) + tc.backward_bytes) +
                                    tc.shared_kept_bytes);
      if (n == max_count(strategy, out)) break;
    }
  }
  return finest_here;
}

void SegmentBuild::set_partitions() {
  if (nf == 0) {
    s.forward = s.backward = fixed_partition();
  } else if (nf > 0 && nb > 0 && s.is<SharedRows>()) {
    // The backward reuses what the forward's rows kept: one partition for both.
    s.forward = s.backward = partition_for(strategy, out, std::max(nf, nb));
  } else if (nf > 0 && nb > 0) {
    s.forward = partition_for(strategy, out, nf);
    s.backward = partition_for(strategy, out, nb);
  } else {
    s.forward = s.backward = Partition::whole(out.height, out.width);
  }
  if (s.is<SharedRows>() && nf != 0) {
    // Skewed rows (balanced_rows), where they hold no more than even ones.
    Partition b = s.backward;
    b.y_edges = balanced_rows(a, s.input, s.output, s.backward.rows(), /*shared=*/true);
    const auto even = worst_tile(a, s, s.backward), skewed = worst_tile(a, s, b);
    if (b.rows() == s.backward.rows() && std::max(skewed.forward_bytes, skewed.backward_bytes) <=
                                             std::max(even.forward_bytes, even.backward_bytes)) {
      s.forward = s.backward = b;
    }
  } else if (row_strategy(strategy) && !s.is<SharedRows>()) {
    // Balanced rows, unless balancing by input rows makes the heaviest row heavier or
    // changes the row count (when every row needs the whole input, fewer rows read as
    // little; a count the caller or the budget search chose is kept).
    Partition f = s.forward, b = s.backward;
    f.y_edges = balanced_rows(a, s.input, s.output, s.forward.rows());
    b.y_edges = balanced_rows(a, s.input, s.output, s.backward.rows());
    if (f.rows() == s.forward.rows() &&
        worst_tile(a, s, f).forward_bytes <= worst_tile(a, s, s.forward).forward_bytes) {
      s.forward = f;
    }
    if (b.rows() == s.backward.rows() &&
        worst_tile(a, s, b).backward_bytes <= worst_tile(a, s, s.backward).backward_bytes) {
      s.backward = b;
    }
  }
}

std::pair<MemoryBreakdown, MemoryBreakdown> SegmentBuild::account(PlanCost& cost,
                                                                  const MemoryBreakdown& fixed) {
  const auto fc = worst_tile(a, s, s.forward);
  const auto bc = worst_tile(a, s, s.backward);
  s.forward_working_bytes = fc.forward_bytes;
  s.backward_working_bytes = bc.backward_bytes;
  s.halo_flops = fc.flops * s.forward.tiles();
  cost.compute += static_cast<double>(fc.flops) * static_cast<double>(s.forward.tiles()) +
                  3.0 * static_cast<double>(bc.flops) * static_cast<double>(s.backward.tiles());
  cost.tiles +=
      a.options.flops_per_tile * static_cast<double>(s.forward.tiles() + s.backward.tiles());
  cost += barrier_cost(a, s);
  if (auto* rows = s.as<SharedRows>()) {
    // What the rows keep, from this forward to this backward; and the concatenations that
    // join inherited and computed rows, in the forward and in the backward's recompute.
    rows->kept_bytes = fc.shared_kept_bytes;
    if (rows->kept_tier != Tier::kResident) {
      cost.moved += a.options.flops_per_byte_moved * 2.0 * static_cast<double>(rows->kept_bytes);
    }
    cost.copies += 2.0 * a.options.flops_per_byte_copied * joined_bytes(a, s);
  }
  const int64_t in_open = open_bytes(s.backward, true);
  if (i > 0 && in_tier != Tier::kResident && s.is<SubSegments>()) {
    s.input_grad_blocks = off.inner_grad_blocks(a, s, s.input, a.additions(s, s.input),
                                                &plan.segments[i - 1].backward);
  } else if (i > 0 && in_tier != Tier::kResident) {
    s.input_grad_blocks = off.grad_blocks(a, s, s.backward, plan.segments[i - 1].backward);
  }
  MemoryBreakdown fwd_at = fixed, bwd_at = fixed;
  const int64_t shared_held = s.shared_tier() == Tier::kResident ? s.shared_bytes() : 0;
  fwd_at.checkpoints = held + out_fwd + store_fwd + inner_fwd + shared_held;
  fwd_at.working_set = fc.forward_bytes;
  bwd_at.checkpoints = held + out_bwd + in_bwd + store_bwd + in_open + inner_bwd + shared_held;
  bwd_at.working_set = bc.backward_bytes;
  if (s.tier != Tier::kResident) s.blocks = off.blocks(a, s.output, s.forward);
  if (s.inner_tier() != Tier::kResident) {
    for (NodeId v : inner) {
      Partition blocks = off.inner_blocks(a, s, v);
      Partition grad_blocks = off.inner_grad_blocks(a, s, v, a.additions(s, v));
      SubSegments& sub = *s.as<SubSegments>();
      sub.blocks.push_back(std::move(blocks));
      sub.grad_blocks.push_back(std::move(grad_blocks));
    }
  }
  return {fwd_at, bwd_at};
}

// The plan's cost beyond its segments' (offloaded checkpoints at the halo-exact count), its
// window, tail and prediction, and what the smallest budget of this segmentation is made of.
void finish_candidate(const Analysis& a, Candidate& c, PlanCost cost, const Offloading& off,
                      NodeId last, NodeId reduction, const MemoryBreakdown& fixed,
                      const MemoryBreakdown& at_peak, bool never) {
  Plan& plan = c.plan;
  c.flops = never ? kNever : cost.total();
  // The search prices an offloaded checkpoint at five passes over it (see moved_bytes); the
  // chosen plan gets the halo-exact count.
  for (size_t i = 0; i + 1 < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    if (s.tier != Tier::kResident) {
      cost.moved += a.options.flops_per_byte_moved * 5.0 *
                    static_cast<double>(a.bytes(s.output) - s.resident_bytes);
    }
  }
  // Offloaded inner checkpoints: each written once and read about twice (the forward's later
  // sub-segments, the backward's), its gradient written and read once.
  for (const Segment& s : plan.segments) {
    if (s.inner_tier() == Tier::kResident) continue;
    for (NodeId v : kept_inner(a.graph, s)) {
      cost.moved += a.options.flops_per_byte_moved * 5.0 * static_cast<double>(a.bytes(v));
    }
  }
  plan.window_bytes = plan.offloads() ? off.window_bytes : 0;
  plan.write_behind_bytes = plan.offloads() ? off.write_behind_bytes() : 0;
  plan.tail_input = reduction >= 0 ? reduction : last;
  plan.predicted = at_peak;
  c.cost = never ? kNever : cost.total();
  plan.cost = cost;
  // What dominates the smallest budget this segmentation could reach.
  const int64_t model_state = fixed.parameters + fixed.gradients + fixed.optimizer;
  c.dominant = model_state * 2 >= c.needed
                   ? "parameters, gradients and optimizer state (" + format_bytes(model_state) + ")"
                   : "checkpoints and the working set of the smallest tile (" +
                         format_bytes(c.needed - model_state) + ")";
}

// `tiers[i]`: where segment i's output checkpoint lives (the last segment's stays resident).
Candidate build(const Analysis& a, Strategy strategy, const std::vector<NodeId>& checkpoints,
                NodeId last, NodeId reduction, const MemoryBreakdown& fixed, int64_t budget,
                const std::vector<Tier>& tiers = {}, const Offloading& off = {}) {
  Candidate c;
  Plan& plan = c.plan;
  plan.strategy = strategy;
  std::vector<NodeId> bounds{0};
  for (NodeId v : checkpoints) bounds.push_back(v);
  bounds.push_back(last);
  const int64_t base = fixed.parameters + fixed.gradients + fixed.optimizer + fixed.tail;
  int64_t held = 0;  // checkpoints alive while this segment runs (forward)
  int64_t peak = base, finest_peak = base;
  MemoryBreakdown at_peak = fixed;
  PlanCost cost;
  bool unfit = false;  // some segment found no partition
  // What each pass holds at its peak: segment i's forward at 2i, its backward at 2i + 1.
  std::vector<MemoryBreakdown> passes(2 * (bounds.size() - 1));
  std::vector<StoreShare> shares(passes.size());  // the store's part of each (as passes)
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    SegmentBuild b(a, off, strategy, budget, plan, i, bounds, tiers, reduction, base, held);
    b.choose_counts();
    finest_peak = std::max(finest_peak, b.finest_bytes());
    if (!b.fits_budget()) unfit = true;
    b.set_partitions();
    const auto [fwd_at, bwd_at] = b.account(cost, fixed);
    Segment& s = b.s;
    plan.tiled_flops += s.halo_flops;
    passes[2 * i] = fwd_at;
    passes[2 * i + 1] = bwd_at;
    if (s.shared_tier() == Tier::kResident &&
        (!s.is<SubSegments>() || s.inner_tier() == Tier::kResident)) {
      // Kept rows or inner checkpoints in the store add to it unbounded: left as they are.
      shares[2 * i] = b.fwd_share;
      shares[2 * i + 1] = b.bwd_share;
    }
    const int64_t fwd_peak = fwd_at.total(), bwd_peak = bwd_at.total();
    if (std::max(fwd_peak, bwd_peak) > peak) {
      peak = std::max(fwd_peak, bwd_peak);
      at_peak = bwd_peak >= fwd_peak ? bwd_at : fwd_at;
    }
    if (!b.out_off) held += b.out_bytes;
    // Resident kept rows: until this segment's backward, after every later pass.
    held += s.shared_tier() == Tier::kResident ? s.shared_bytes() : 0;
    plan.checkpoints.push_back(s.output);
    plan.segments.push_back(std::move(s));
  }
  if (reduction >= 0) plan.checkpoints.pop_back();
  if (off.partly_resident && budget > 0 && peak <= budget) {
    keep_partly_resident(a, plan, passes, shares, budget);
    std::tie(peak, at_peak) = highest(passes);
  }
  // Kept graphs are part of the plan the search prices: a segmentation whose later segments
  // keep their graphs recomputes less (vgg-mini 2048² in 1 GiB: grid and rows keep two of
  // three segments' graphs; shared rows, priced without them, took one segment that keeps none).
  if (a.options.keep_graphs && budget > 0 && peak <= budget && !unfit) {
    cost -= keep_graphs(a, plan, passes, budget);
    std::tie(peak, at_peak) = highest(passes);
  }
  c.passes = std::move(passes);
  c.strategy = strategy;
  c.set = checkpoints;
  c.tiers = tiers;
  c.needed = finest_peak;
  finish_candidate(a, c, cost, off, last, reduction, fixed, at_peak,
                   unfit || (budget > 0 && peak > budget));
  return c;
}

// Bytes a gradient accumulated in `blocks` over `passes` (grad_additions) moves beyond its one
// write: a block stored after one pass is read back and written again in each later pass that
// adds into it.
int64_t reopened_bytes(const Partition& blocks, const std::vector<std::vector<Region>>& passes,
                       int64_t per_pixel) {
  std::vector<char> stored(static_cast<size_t>(blocks.tiles()), 0);
  int64_t n = 0;
  for (const auto& adds : passes) {
    std::set<int64_t> touched;
    for (const Region& r : adds) {
      for (int64_t b : blocks.meeting(r)) touched.insert(b);
    }
    for (int64_t b : touched) {
      if (stored[static_cast<size_t>(b)]) n += 2 * blocks.tile(b).area() * per_pixel;
      stored[static_cast<size_t>(b)] = 1;
    }
  }
  return n;
}

// The regions of `v` (the input or an inner checkpoint of segment `s`, run as sub-segments)
// that the forward reads, in the executor's order: the statistic pass of the barriers on the
// input, each later inner checkpoint's sub-segment over its shares of the forward tiles, then
// the output's tiles. (The backward reads what grad_additions lists.)
std::vector<Region> forward_reads(const Analysis& a, const Segment& s, NodeId v) {
  const std::vector<NodeId> inner = kept_inner(a.graph, s);
  std::vector<NodeId> leaves{s.input};
  leaves.insert(leaves.end(), inner.begin(), inner.end());
  const Shape& out = a.shapes[static_cast<size_t>(s.output)];
  std::vector<Region> reads;
  bool on_input = false;
  for (NodeId b = s.input + 1; b <= s.output && v == s.input; ++b) {
    on_input = on_input || (a.graph.node(b).is_barrier() && a.graph.node(b).inputs[0] == v);
  }
  for (int64_t t = 0; t < s.forward.tiles() && on_input; ++t) {
    reads.push_back(barrier_share(s.forward.tile(t), out, a.shapes[static_cast<size_t>(v)]));
  }
  // The sub-segments after v: the kept inner checkpoints' and the dropped ones' statistic
  // passes, in order, then the output's.
  std::vector<NodeId> targets;
  for (NodeId u : inner) {
    if (u > v) targets.push_back(u);
  }
  for (NodeId u : s.dropped_inner()) {
    if (u > v && barrier_input(a.graph, s, u)) targets.push_back(u);  // statistic passes
  }
  std::sort(targets.begin(), targets.end());
  targets.push_back(s.output);
  for (NodeId target : targets) {
    for (int64_t t = 0; t < s.forward.tiles(); ++t) {
      const Region tile = s.forward.tile(t);
      const Region r = target == s.output
                           ? tile
                           : barrier_share(tile, out, a.shapes[static_cast<size_t>(target)]);
      if (r.empty()) continue;
      reads.push_back(sub_segment_needs(a.graph, a.shapes, s.input, leaves, target, r,
                                        s.dropped_inner(), tile, out)[static_cast<size_t>(v)]);
    }
  }
  return reads;
}

// Bytes moved per step by segment `s`'s offloaded inner checkpoints: each written once, read by
// the later sub-segments' tiles in the forward and the backward (where they add into its
// gradient; its own sub-segment recomputes it for the correction); its gradient written once,
// read by its own sub-segment's shares, and read and written again where a later pass reopens
// a block.
int64_t inner_moved_bytes(const Analysis& a, const Segment& s, int64_t window) {
  const std::vector<NodeId> inner = kept_inner(a.graph, s);
  const Shape& out = a.shapes[static_cast<size_t>(s.output)];
  // A sub-segment that recomputes dropped inner checkpoints runs a round of sums for each of
  // their barriers first: it reads its leaves and its own gradient once more per round.
  const std::map<NodeId, int> rounds = sums_rounds(a, s);
  auto rounds_of = [&](NodeId target) {
    const auto it = rounds.find(target);
    return it == rounds.end() ? 0 : it->second;
  };
  int64_t n = 0;
  for (size_t k = 0; k < inner.size(); ++k) {
    const NodeId v = inner[k];
    const Shape& vs = a.shapes[static_cast<size_t>(v)];
    const int64_t per_pixel = vs.channels * a.eb;
    std::vector<Region> reads = forward_reads(a, s, v), own;
    const std::vector<Region> later = reads_with_rounds(a.additions_by_pass(s, v), rounds);
    reads.insert(reads.end(), later.begin(), later.end());
    for (int round = 0; round <= rounds_of(v); ++round) {
      for (int64_t t = s.backward.tiles() - 1; t >= 0; --t) {
        const Region r = barrier_share(s.backward.tile(t), out, vs);
        if (!r.empty()) own.push_back(r);
      }
    }
    const SubSegments& sub = *s.as<SubSegments>();
    n += 2 * a.bytes(v) + read_bytes(reads, sub.blocks.at(k), per_pixel, window) +
         read_bytes(own, sub.grad_blocks.at(k), per_pixel, window) +
         reopened_bytes(sub.grad_blocks.at(k), a.additions(s, v), per_pixel);
  }
  return n;
}

// Bytes moved per step by each offloaded checkpoint: written once, read by the next segment's
// forward and backward tiles (halos, block rounding and the window's reuse included; resident
// blocks never move), its gradient written once and read by this segment's backward tiles.
void count_moved_bytes(const Analysis& a, Plan& plan) {
  for (Segment& s : plan.segments) {
    s.inner_moved_bytes =
        s.inner_tier() == Tier::kResident ? 0 : inner_moved_bytes(a, s, plan.window_bytes);
    // Shared rows' kept rows in the store: written once, read back once.
    if (s.is<SharedRows>() && s.shared_tier() != Tier::kResident)
      s.inner_moved_bytes += 2 * s.shared_bytes();
  }
  for (size_t i = 0; i + 1 < plan.segments.size(); ++i) {
    Segment& s = plan.segments[i];
    if (s.tier == Tier::kResident) continue;
    const Segment& next = plan.segments[i + 1];
    const int64_t w = plan.window_bytes;
    const int64_t per_pixel = a.graph.node(s.output).channels * a.eb;
    s.moved_bytes = 2 * a.bytes(s.output) - s.resident_bytes +
                    read_bytes(a, s, s.backward, s.output, next.input_grad_blocks, w, true);
    if (next.is<SubSegments>() && !next.is<WholeBarriers>()) {
      // Each sub-segment reading it reads it again (once more in each round of sums it runs);
      // its gradient adds up pass by pass.
      const std::vector<Region> backward_reads =
          reads_with_rounds(a.additions_by_pass(next, next.input), sums_rounds(a, next));
      s.moved_bytes += read_bytes(forward_reads(a, next, next.input), s.blocks, per_pixel, w,
                                  s.resident_blocks) +
                       read_bytes(backward_reads, s.blocks, per_pixel, w, s.resident_blocks);
      s.moved_bytes +=
          reopened_bytes(next.input_grad_blocks, a.additions(next, next.input), per_pixel);
    } else {
      s.moved_bytes +=
          read_bytes(a, next, next.forward, s.output, s.blocks, w, false, s.resident_blocks) +
          read_bytes(a, next, next.backward, s.output, s.blocks, w, true, s.resident_blocks);
    }
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

namespace {

// Threshold sets ("every candidate below a size") split a chain of large activations only by
// keeping every smaller one too: resnet50 with batch norm at 2048² in 2 GiB ran layer1 and
// layer2_0 as one 44-op segment in 12 rounds of recompute, because layer1's 256 MiB block
// outputs came only with all 17 smaller ones (1.8 GiB). A local search from the best of them:
// add, drop or move one checkpoint (to the candidate before or after it) while the plan gets
// cheaper; every checkpoint keeps the tier the set had. Each round builds about three plans per
// candidate.
Candidate refine(const Analysis& a, Candidate best, const std::vector<NodeId>& candidates,
                 NodeId last, NodeId reduction, const MemoryBreakdown& fixed, int64_t target,
                 const Offloading& off, Candidate& smallest) {
  const Tier tier = best.tiers.empty() ? Tier::kResident : best.tiers.front();
  auto try_set = [&](std::vector<NodeId> set, Candidate& next) {
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
    if (set == best.set) return;
    Candidate c = build(a, best.strategy, set, last, reduction, fixed, target,
                        std::vector<Tier>(set.size() + 1, tier), off);
    if (c.needed < smallest.needed) smallest = c;
    if (c.cost < next.cost) next = std::move(c);
  };
  constexpr int kMaxRounds = 64;
  for (int round = 0; round < kMaxRounds; ++round) {
    Candidate next;
    for (size_t k = 0; k < candidates.size(); ++k) {
      const NodeId v = candidates[k];
      std::vector<NodeId> set = best.set;
      const auto at = std::find(set.begin(), set.end(), v);
      if (at == set.end()) {
        set.push_back(v);
        try_set(set, next);
        continue;
      }
      const size_t i = static_cast<size_t>(at - set.begin());
      set.erase(set.begin() + static_cast<ptrdiff_t>(i));
      try_set(set, next);
      for (const size_t j : {k - 1, k + 1}) {
        if (j >= candidates.size()) continue;  // k - 1 wraps for k = 0
        std::vector<NodeId> moved = best.set;
        moved[i] = candidates[j];
        try_set(moved, next);
      }
    }
    // Only a clear gain: the cost is a model, and chasing its rounding noise moves plans.
    if (!(next.cost < best.cost * (1.0 - 1e-6))) break;
    best = std::move(next);
  }
  return best;
}

// From `c`, its checkpoints offloaded, brings back the largest ones that still fit and make the
// plan no dearer (the room a checkpoint takes can cost finer tiles elsewhere).
Candidate bring_back_resident(const Analysis& a, Candidate c, NodeId last, NodeId reduction,
                              const MemoryBreakdown& fixed, int64_t target, const Offloading& off) {
  if (c.cost == kNever) return c;
  const std::vector<NodeId> set = c.set;
  std::vector<Tier> tiers = c.tiers;
  std::vector<size_t> order(set.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return a.bytes(set[x]) > a.bytes(set[y]); });
  for (size_t i : order) {
    const Tier was = tiers[i];
    if (was == Tier::kResident) continue;
    tiers[i] = Tier::kResident;
    Candidate r = build(a, c.strategy, set, last, reduction, fixed, target, tiers, off);
    if (r.cost <= c.cost) {
      c = std::move(r);
    } else {
      tiers[i] = was;
    }
  }
  return c;
}

// The cheapest plan over strategies and checkpoint sets, every checkpoint resident or (when
// `offloading`) the cheapest mix of tiers; `smallest` keeps the plan that needs the least budget.
// `candidates` (empty when the checkpoints are given): outside the offloading search, each
// strategy's best set is then refined by the local search above.
// `bounded` (an offloading search beside a resident plan that fits): every set with all its
// checkpoints offloaded, but only the cheapest of them per strategy brings checkpoints back
// (bring_back_resident builds one plan per checkpoint: for every set, strategy and window it made
// planning VGG-16 on a 200000² slide take over 400 s).
Candidate search(const Analysis& a, const std::vector<Strategy>& strategies,
                 const std::vector<std::vector<NodeId>>& sets,
                 const std::vector<NodeId>& candidates, bool offloading, bool bounded,
                 const PlanOptions& options, NodeId last, NodeId reduction,
                 const MemoryBreakdown& fixed, int64_t target, const Offloading& off,
                 Candidate& smallest) {
  using Offload = PlanOptions::Offload;
  Candidate best;
  for (Strategy s : strategies) {
    Candidate best_here;  // with this strategy
    for (const auto& set : sets) {
      std::vector<Tier> tiers(set.size() + 1, Tier::kResident);
      if (options.offload == Offload::kHost || options.offload == Offload::kDisk) {
        std::fill(tiers.begin(), tiers.end(),
                  options.offload == Offload::kHost ? Tier::kHost : Tier::kDisk);
      }
      Candidate c;
      if (!offloading) {
        c = build(a, s, set, last, reduction, fixed, target, tiers, off);
      } else if (!set.empty()) {
        std::fill(tiers.begin(), tiers.end(), options.auto_tier);
        c = build(a, s, set, last, reduction, fixed, target, tiers, off);
        if (!bounded) c = bring_back_resident(a, std::move(c), last, reduction, fixed, target, off);
      } else {
        continue;
      }
      if (c.cost < best_here.cost) best_here = c;
      if (c.needed < smallest.needed) smallest = c;
    }
    if (offloading && bounded) {
      best_here = bring_back_resident(a, std::move(best_here), last, reduction, fixed, target, off);
    }
    if (!offloading && !candidates.empty() && best_here.cost != kNever) {
      best_here = refine(a, std::move(best_here), candidates, last, reduction, fixed, target, off,
                         smallest);
    }
    if (best_here.cost < best.cost) best = std::move(best_here);
  }
  return best;
}

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
MemoryBreakdown model_state_bytes(const Analysis& a, NodeId last, NodeId reduction) {
  const Graph& graph = a.graph;
  MemoryBreakdown fixed;
  int64_t params = 0;
  for (const Node& n : graph.nodes()) {
    if (!n.layer) continue;
    for (const auto& p : n.layer->parameters(false)) params += p.numel();
  }
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

// Strategy::kNone: plain autograd keeps every activation (and max pool indices) of the whole
// image; refused over the budget.
Plan plain_plan(const Analysis& a, const Shape& input, int64_t budget, int64_t target, NodeId last,
                const MemoryBreakdown& fixed, int64_t plain_flops) {
  Plan plan;
  plan.strategy = Strategy::kNone;
  plan.input = input;
  plan.input_gradient = a.options.input_gradient;
  plan.shapes = a.shapes;
  plan.element_bytes = a.eb;
  plan.budget_bytes = budget;
  plan.tail_input = last;
  plan.plain_flops = plan.tiled_flops = plain_flops;
  const Shape& out = a.shapes[static_cast<size_t>(last)];
  const auto whole = a.tile_cost(0, last, Region{{0, out.height}, {0, out.width}});
  plan.predicted = fixed;
  plan.predicted.working_set = whole.backward_bytes;
  if (target > 0 && plan.predicted.total() > target) {
    throw Error("plain training needs " + format_bytes(plan.predicted.total()) + " for a " +
                to_string(input) + " image, over the budget of " + format_bytes(budget) +
                "; use --strategy auto (tiled) or a larger budget");
  }
  return plan;
}

// Checkpoint sets to try: the caller's, else all candidates under a size threshold, for every
// threshold.
std::vector<std::vector<NodeId>> checkpoint_sets(const Analysis& a,
                                                 const std::vector<NodeId>& candidates) {
  const Graph& graph = a.graph;
  std::vector<std::vector<NodeId>> sets;
  if (a.options.checkpoints) {
    for (NodeId v : *a.options.checkpoints) {
      if (std::find(candidates.begin(), candidates.end(), v) == candidates.end()) {
        throw Error("node " + std::to_string(v) + " (" +
                    (v >= 0 && v < graph.size() ? graph.node(v).name : std::string("?")) +
                    ") cannot be a checkpoint: it must be a tiled layer that no residual edge "
                    "skips over, before the last tiled layer");
      }
    }
    std::vector<NodeId> sorted = *a.options.checkpoints;
    std::sort(sorted.begin(), sorted.end());
    sets.push_back(sorted);
    return sets;
  }
  std::set<int64_t> thresholds{0};
  for (NodeId v : candidates) thresholds.insert(a.bytes(v));
  for (int64_t t : thresholds) {
    std::vector<NodeId> set;
    for (NodeId v : candidates) {
      if (a.bytes(v) <= t) set.push_back(v);
    }
    sets.push_back(set);
  }
  return sets;
}

// The store's windows to try. A larger one reads further ahead into the passes whose transfers
// outlast their compute (pools, forward passes) and leaves less room for tiles, which the cost
// sees; the waits it saves it does not (a model of them from FLOPs mispredicted them: the early
// convs are memory-bound, ~10× slower than their FLOPs say). Measured on vgg-mini 4096² in
// 1 GiB on a cold disk (bench/NOTES.md, session 14): a window of 1/16 of the budget 27.5 s a
// step, 53% of the transfers hidden; 1/8 24.4 s, 68%; 1/4 21.3–23.9 s, 82–84%, for a plan whose
// cost was 1.5% above 1/16's. So the largest of 1/4, 1/8 and 1/16 whose plan costs at most 5%
// more than the cheapest (kLargerWindowWorth); small budgets, where a large window forces much
// finer tiles, keep a small one.
constexpr double kLargerWindowWorth = 1.05;
std::vector<int64_t> store_windows(const PlanOptions& options, int64_t target) {
  if (options.offload_window_bytes > 0) return {options.offload_window_bytes};
  if (target <= 0) return {int64_t{64} << 20};
  std::vector<int64_t> windows;
  for (int64_t share : {4, 8, 16}) windows.push_back(std::max<int64_t>(target / share, 4096));
  return windows;
}

// The tile store's settings for a search at `window`; `offloading`: a plan that offloads
// checkpoints may offload inner checkpoints too.
Offloading offloading_with(const PlanOptions& options, int64_t window, bool offloading) {
  Offloading o;
  o.inner_tier = options.inner_tier.value_or(offloading ? options.auto_tier : Tier::kResident);
  o.force_inner = options.inner_tier.has_value() && *options.inner_tier != Tier::kResident;
  o.window_bytes = window;
  o.block_bytes =
      options.offload_block_bytes > 0 ? options.offload_block_bytes : default_block_bytes(window);
  o.partly_resident = options.offload == PlanOptions::Offload::kAuto;
  return o;
}

// One search (resident or offloading) at each of `windows`, with the caller's `options` (not
// a.options, whose prices the offloading search sets): its cheapest plan at the largest
// window within kLargerWindowWorth of the cheapest, with that window's store settings. An
// offloading plan that is only cheaper (`bounded`) must fit the scratch directory: the step
// would refuse to start where a resident plan runs (VGG-16 on a 200000² slide in 8 GiB:
// 2.6 TiB).
std::pair<Candidate, Offloading> search_windows(const Analysis& a, const PlanOptions& options,
                                                const std::vector<Strategy>& strategies,
                                                const std::vector<std::vector<NodeId>>& sets,
                                                const std::vector<NodeId>& candidates,
                                                bool offloading, bool bounded, NodeId last,
                                                NodeId reduction, const MemoryBreakdown& fixed,
                                                int64_t target, const std::vector<int64_t>& windows,
                                                const OffloadPrices& prices, Candidate& smallest) {
  std::vector<Candidate> by_window(windows.size());
  for (size_t w = 0; w < windows.size(); ++w) {
    const Offloading o = offloading_with(options, windows[w], offloading);
    by_window[w] = search(a, strategies, sets, candidates, offloading, bounded, options, last,
                          reduction, fixed, target, o, smallest);
  }
  for (Candidate& c : by_window) {
    if (!bounded || c.cost == kNever || prices.disk_free_bytes < 0) continue;
    Plan p = c.plan;
    p.shapes = a.shapes;
    p.element_bytes = a.eb;
    const int64_t on_disk = stored_bytes(a.graph, p, Tier::kDisk);
    if (on_disk > prices.disk_free_bytes) {
      spdlog::debug("plan: an offloading plan needs {} on disk, {} free: not taken",
                    format_bytes(on_disk), format_bytes(prices.disk_free_bytes));
      c.cost = kNever;
    }
  }
  double cheapest = kNever;
  for (size_t w = 0; w < windows.size(); ++w) {
    const Candidate& c = by_window[w];
    cheapest = std::min(cheapest, c.cost);
    if (c.cost != kNever) {
      spdlog::debug("plan: {} search, window {}: {:.4g} s a step at the prices, {} segments",
                    offloading ? "offloading" : "resident", format_bytes(windows[w]),
                    c.cost * prices.seconds_per_flop, c.plan.segments.size());
    }
  }
  for (size_t w = 0; w < windows.size(); ++w) {
    if (cheapest != kNever && by_window[w].cost <= kLargerWindowWorth * cheapest) {
      return {std::move(by_window[w]), offloading_with(options, windows[w], offloading)};
    }
  }
  return {Candidate{}, offloading_with(options, windows.back(), offloading)};
}

// DELTA: each checkpoint the chosen plan offloads stays in the tier only if moving it costs
// no more than dropping it, so that the next segment recomputes it from the previous one.
// Dropping one changes the others' halos: decide again after each drop. Returns the decisions,
// the drops first.
std::vector<OffloadDecision> offload_or_recompute(const Analysis& a, Candidate& best, NodeId last,
                                                  NodeId reduction, const MemoryBreakdown& fixed,
                                                  int64_t target, const Offloading& off,
                                                  const OffloadPrices& prices) {
  std::vector<OffloadDecision> decisions, drops;
  count_moved_bytes(a, best.plan);
  for (bool dropped = best.plan.offloads() && a.options.offload == PlanOptions::Offload::kAuto &&
                      !a.options.checkpoints;
       dropped;) {
    dropped = false;
    decisions.clear();
    for (size_t i = 0; i < best.set.size() && !dropped; ++i) {
      if (i >= best.plan.segments.size() || best.plan.segments[i].tier == Tier::kResident) {
        continue;
      }
      std::vector<NodeId> set = best.set;
      std::vector<Tier> tiers = best.tiers;
      set.erase(set.begin() + static_cast<ptrdiff_t>(i));
      tiers.erase(tiers.begin() + static_cast<ptrdiff_t>(i));
      Candidate without = build(a, best.strategy, set, last, reduction, fixed, target, tiers, off);
      const int64_t extra = without.flops == kNever
                                ? -1
                                : static_cast<int64_t>(std::max(0.0, without.flops - best.flops));
      decisions.push_back(
          decide_offload(best.set[i], best.plan.segments[i].moved_bytes, extra, prices));
      if (!decisions.back().offload) {
        drops.push_back(decisions.back());
        best = std::move(without);
        count_moved_bytes(a, best.plan);
        dropped = true;
      }
    }
  }
  drops.insert(drops.end(), decisions.begin(), decisions.end());
  return drops;
}

}  // namespace

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

Plan make_plan(const Graph& graph, const Shape& input, int64_t budget, const PlanOptions& options) {
  if (budget < 0) throw Error("the memory budget must be positive");
  if (options.headroom < 0 || options.headroom >= 1) throw Error("headroom must be in [0, 1)");
  // Plans aim below the budget by the headroom: allocator effects the model does not capture.
  const int64_t target =
      budget > 0 ? static_cast<int64_t>(static_cast<double>(budget) * (1.0 - options.headroom)) : 0;
  Analysis a{graph, graph.shapes(input), options, options.element_bytes, {}, {}, {}, {}};
  const auto [last, reduction] = head_of(graph, options);
  if (reduction >= 0 && graph.node(reduction).kind == OpKind::kAttentionPool) {
    a.reduction_input = last;
    a.reduction_bytes_per_position =
        (graph.node(last).channels + 4 * graph.node(reduction).branches) * 8;
  }
  const MemoryBreakdown fixed = model_state_bytes(a, last, reduction);
  int64_t plain_flops = 0;
  for (NodeId v = 1; v <= last; ++v) {
    const Shape& s = a.shapes[static_cast<size_t>(v)];
    plain_flops += flops(graph.node(v), Region{{0, s.height}, {0, s.width}});
  }
  if (options.strategy == Strategy::kNone) {
    return plain_plan(a, input, budget, target, last, fixed, plain_flops);
  }

  // Auto prices the three tiled strategies against each other: grid, LR-CNN's overlapping rows
  // (OverL) and its two-phase sharing (2PS, shared rows).
  const std::vector<Strategy> strategies =
      options.strategy == Strategy::kAuto
          ? std::vector<Strategy>{Strategy::kRows, Strategy::kGrid, Strategy::kRowsShared}
          : std::vector<Strategy>{options.strategy};
  std::vector<NodeId> candidates;
  for (NodeId v : checkpoint_candidates(graph)) {
    if (v < last) candidates.push_back(v);
  }
  const std::vector<std::vector<NodeId>> sets = checkpoint_sets(a, candidates);
  const std::vector<int64_t> windows = store_windows(options, target);
  Offloading off = offloading_with(options, windows.back(), false);
  using Offload = PlanOptions::Offload;
  // The guess until the offloading search asks for measured prices.
  constexpr double kGuessedSecondsPerFlop = 1e-11;  // 100 GFLOP/s
  OffloadPrices prices{options.flops_per_byte_moved * kGuessedSecondsPerFlop,
                       kGuessedSecondsPerFlop, false};
  Candidate best, smallest;
  // First every checkpoint set all resident; offload when none of them fits, or (below) when the
  // resident best recomputes much. Pricing offload against recompute for every set made planning
  // VGG-16 on a 200000² slide take 25 s instead of 0.4 s, and the price of a moved byte is a
  // guess until it is measured (DELTA).
  // A resident plan whose barriers recompute in rounds may cost more than offloading a few
  // checkpoints so that every segment runs as sub-segments: then offloading is priced too.
  const auto recomputes_barriers = [&](const Plan& plan) {
    return std::any_of(plan.segments.begin(), plan.segments.end(), [&](const Segment& s) {
      return !s.is<SubSegments>() && !s.is<WholeBarriers>() && has_barrier(graph, s);
    });
  };
  // A resident plan that fits but recomputes much (its halos and recompute over kRecomputeWorth
  // × the four forwards' worth of FLOPs a step costs without them: one forward, the backward's
  // two and one recompute) may cost more than offloading checkpoints that let the tiles grow:
  // then offloading is priced too, at measured prices, in a bounded search (the resident best's
  // strategy, one window, checkpoints brought back only for the cheapest set). vgg-mini 16384² in 1
  // GiB: the resident grid plan's halos ×1.16, 630.8 s a step; offloading grid 483.3 s (session
  // 29).
  constexpr double kRecomputeWorth = 1.05;
  for (const bool offloading : {false, true}) {
    const bool resident_fits = best.cost != kNever && !recomputes_barriers(best.plan);
    const bool bounded =
        offloading && resident_fits && options.measure_prices &&
        best.plan.cost.compute > kRecomputeWorth * 4.0 * static_cast<double>(plain_flops);
    if (offloading && ((resident_fits && !bounded) || options.offload != Offload::kAuto)) break;
    if (offloading && options.measure_prices) {
      const OffloadPrices measured = options.measure_prices();
      if (measured.seconds_per_byte_moved > 0 && measured.seconds_per_flop > 0) {
        prices = measured;
        a.options.flops_per_byte_moved = prices.seconds_per_byte_moved / prices.seconds_per_flop;
        a.options.flops_per_tile =
            options.flops_per_tile * kGuessedSecondsPerFlop / prices.seconds_per_flop;
        // The resident search's best at the prices the offloading candidates get: the tile's
        // price just changed, and a cost at the guess against one at the measured prices would
        // compare two units.
        if (best.cost != kNever) {
          best = build(a, best.strategy, best.set, last, reduction, fixed, target, best.tiers, off);
        }
      }
    }
    // Every window where the plan offloads (a resident search has no use for one); the
    // bounded search keeps the resident best's strategy (the rows strategies' row balancing is
    // most of a build's time on large slides).
    const bool forced = options.offload == Offload::kHost || options.offload == Offload::kDisk;
    const std::vector<int64_t> tried = bounded ? std::vector<int64_t>{windows.front()}
                                       : offloading || forced
                                           ? windows
                                           : std::vector<int64_t>{windows.back()};
    auto [found, found_off] =
        search_windows(a, options, bounded ? std::vector<Strategy>{best.strategy} : strategies,
                       sets, options.checkpoints ? std::vector<NodeId>{} : candidates, offloading,
                       bounded, last, reduction, fixed, target, tried, prices, smallest);
    if (found.cost != kNever && found.cost < best.cost) {
      best = std::move(found);
      off = found_off;
    }
  }
  if (best.cost == kNever) {
    throw Error("no plan fits a " + to_string(input) + " image in " + format_bytes(budget) +
                ": the smallest budget that fits is about " +
                format_bytes(static_cast<int64_t>(static_cast<double>(smallest.needed) /
                                                  (1.0 - options.headroom))) +
                ", dominated by " + smallest.dominant);
  }
  std::vector<OffloadDecision> decisions =
      offload_or_recompute(a, best, last, reduction, fixed, target, off, prices);
  if (spdlog::should_log(spdlog::level::debug)) {
    for (size_t i = 0; i < best.passes.size(); ++i) {
      const MemoryBreakdown& m = best.passes[i];
      spdlog::debug("plan: segment {} {} predicted {} (checkpoints {}, working set {})", i / 2,
                    i % 2 ? "backward" : "forward", format_bytes(m.total()),
                    format_bytes(m.checkpoints), format_bytes(m.working_set));
    }
  }
  Plan plan = std::move(best.plan);
  plan.passes = best.passes;
  size_write_behind(plan, target);
  plan.prices = prices;
  plan.decisions = std::move(decisions);
  plan.input = input;
  plan.input_gradient = options.input_gradient;
  plan.shapes = a.shapes;
  plan.element_bytes = a.eb;
  plan.budget_bytes = budget;
  plan.plain_flops = plain_flops;
  for (const Segment& segment : plan.segments) check_scheme(graph, segment);
  return plan;
}

}  // namespace tessel::core
