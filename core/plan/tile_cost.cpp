#include "core/plan/tile_cost.h"

#include <algorithm>
#include <functional>

#include "core/graph/node_vec.h"
#include "core/plan/geometry.h"

namespace tessel::core::planning {

int64_t Analysis::held_bytes(NodeId v, NodeId next) const {
  if (!checkpoints_by_rank || options.ranks < 2 || next < 0) return bytes(v);
  const Shape& at = shapes[static_cast<size_t>(v)];
  const Shape& out = shapes[static_cast<size_t>(next)];
  const int64_t ranks = options.ranks;
  const int64_t band = (out.height + ranks - 1) / ranks;
  const int64_t top = (out.height - band) / 2;
  const Region middle{{top, top + band}, {0, out.width}};
  const int64_t reads =
      segment_needs(graph, shapes, v, next, middle)[static_cast<size_t>(v)].y.size();
  const int64_t rows = std::min(at.height, std::max(reads, (at.height + ranks - 1) / ranks));
  return at.channels * rows * at.width * eb;
}

int64_t weight_elements(const Node& n) {
  if (n.kind != OpKind::kConv) return 0;
  const ConvSpec& c = *n.conv;
  return (c.in_channels / c.groups_) * c.kernel_size[0] * c.kernel_size[1] * c.out_channels;
}

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

Analysis::TileCost Analysis::compute_shared_cost(NodeId input, NodeId output, Window rows) const {
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

namespace {

// One tile's walk through segment (input, output] for Analysis::compute_cost: each node's output
// bytes over the tile's needs, what its backward keeps (its own bytes, or a producer's output
// kept until the lowest node that saves it), the no-grad forward's peak, then the recompute's
// and the gradients' peaks.
class TileWalk {
 public:
  TileWalk(const Analysis& a, NodeId input, NodeId output, const std::vector<Region>& need,
           const std::vector<BoxCopies>* copies)
      : copies_(copies),
        a_(a),
        g_(a.graph),
        input_(input),
        output_(output),
        need_(need),
        out_bytes_(output + 1, 0),
        own_(output + 1, 0),
        kept_until_(output + 1, -1) {}

  // The no-grad forward: its peak and FLOPs (over `computed` where given, else the needs).
  void forward(bool whole_tile, const std::vector<Region>* computed, Analysis::TileCost& cost);
  // Backward of the tile: recompute (everything kept, plus transients), then gradients.
  void backward(Analysis::TileCost& cost) const;

 private:
  // v's output is kept by autograd until the backward of `by` at least.
  void keep(NodeId v, NodeId by) {
    NodeId& k = kept_until_[v];
    k = k < 0 ? by : std::min(k, by);
  }
  int64_t pad_copy(const Node& n, const Region& r) const;
  int64_t forward_scratch(const Node& n, const Region& r, int64_t b, int64_t in_bytes) const;
  // What node `n` adds to a pass's peak beside its output `b`: its scratch, over its largest box
  // where it is boxed, and its parts.
  int64_t forward_extra(const Node& n, const Region& r, int64_t b) const;
  void keeps(const Node& n, int64_t pad_copy, bool whole_tile);
  int64_t recompute_peak() const;
  static int64_t backward_scratch(const Node& n, int64_t out, int64_t grad_in, int64_t eb);

  // Node v's boxes in a tile that fills its glass (BoxCopies; none where it is not boxed).
  const BoxCopies* boxed(NodeId v) const {
    if (copies_ == nullptr || !(*copies_)[static_cast<size_t>(v)].boxed) return nullptr;
    return &(*copies_)[static_cast<size_t>(v)];
  }

  const std::vector<BoxCopies>* copies_;
  const Analysis& a_;
  const Graph& g_;
  const NodeId input_, output_;
  const std::vector<Region>& need_;
  NodeVec<int64_t> out_bytes_, own_;
  // kept_until_[v]: the lowest node whose backward still needs v's output (v's output is kept
  // by autograd until then); -1 when nobody saves it.
  NodeVec<NodeId> kept_until_;
};

// An explicit pad copies the input window; the op pads symmetric borders itself
// (core/exec/tile_ops.cpp), so only windows that cross one border more than the other copy.
int64_t TileWalk::pad_copy(const Node& n, const Region& r) const {
  if (n.kind != OpKind::kConv && n.kind != OpKind::kMaxPool && n.kind != OpKind::kAvgPool) return 0;
  const Shape& in = a_.shapes[static_cast<size_t>(n.inputs[0])];
  const Region window{input_window(n.axis_op(0), r.y), input_window(n.axis_op(1), r.x)};
  const Region inside = intersect(window, Region{{0, in.height}, {0, in.width}});
  const bool asymmetric = inside.y.begin - window.y.begin != window.y.end - inside.y.end ||
                          inside.x.begin - window.x.begin != window.x.end - inside.x.end;
  if (r.empty() || !asymmetric) return 0;
  return g_.node(n.inputs[0]).channels * window.area() * a_.eb;
}

// What node `n` allocates beside its output (`b` bytes over `r`) in the no-grad forward.
int64_t TileWalk::forward_extra(const Node& n, const Region& r, int64_t b) const {
  const BoxCopies* c = boxed(n.id);
  if (c == nullptr) return forward_scratch(n, r, b, out_bytes_[n.inputs[0]]);
  return forward_scratch(n, r, c->out, c->window) + c->parts;
}

int64_t TileWalk::forward_scratch(const Node& n, const Region& r, int64_t b,
                                  int64_t in_bytes) const {
  // oneDNN reorders the larger of a conv's input and output into a scratch buffer
  // (measured: peak above live = output + max(input, output)).
  // Both passes also copy the weight twice (its channels-last or blocked reorder and, in the
  // backward, the weight gradient before it is added to .grad): measured 2.0–2.3× the
  // weight above the activations for darknet19's 512→1024 convs on 32² tiles.
  const int64_t weights = 2 * weight_elements(n) * a_.eb;
  // A channel norm copies its input channels-last and its output back.
  const bool channel_norm = n.kind == OpKind::kPointwise && n.pointwise == Pointwise::kChannelNorm;
  // Dropout's mask is hashed in int64 (core/exec/dropout.cpp): two such tensors at once, and
  // the mask in the tile's dtype.
  const bool dropout = n.kind == OpKind::kPointwise && n.pointwise == Pointwise::kDropout;
  return n.kind == OpKind::kConv ? std::max(in_bytes, b) + weights
         : channel_norm          ? 2 * b
         : dropout               ? 2 * elements(n, r) * 8 + b
                                 : 0;
}

// What node `n`'s backward keeps.
void TileWalk::keeps(const Node& n, int64_t pad_copy, bool whole_tile) {
  const NodeId v = n.id;
  const int64_t b = out_bytes_[v];
  switch (n.kind) {
    case OpKind::kConv:
    case OpKind::kMaxPool:
      if (pad_copy > 0) {
        own_[v] += pad_copy;
      } else {
        keep(n.inputs[0], v);
      }
      if (n.kind == OpKind::kMaxPool) {
        own_[v] += elements(n, need_[static_cast<size_t>(v)]) * 8;
      }
      break;
    case OpKind::kPointwise:
      if (keeps_own_output(n)) {
        keep(v, v);
      } else if (n.pointwise == Pointwise::kChannelNorm) {
        // layer_norm keeps its channels-last copy of the input.
        own_[v] += b;
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
      if (!whole_tile) own_[v] += out_bytes_[n.inputs[0]];
      break;
    default:
      break;
  }
}

void TileWalk::forward(bool whole_tile, const std::vector<Region>* computed,
                       Analysis::TileCost& cost) {
  NodeVec<int> left(out_bytes_.size(), 0);  // consumers yet to run, by node
  for (NodeId v = input_ + 1; v <= output_; ++v) {
    for (NodeId p : g_.node(v).inputs) ++left[p];
  }
  out_bytes_[input_] = elements(g_.node(input_), need_[static_cast<size_t>(input_)]) * a_.eb;
  // The no-grad forward converts the input tile to channels-last: a second copy at the start.
  int64_t live = out_bytes_[input_], peak = 2 * live;
  for (NodeId v = input_ + 1; v <= output_; ++v) {
    const Node& n = g_.node(v);
    const Region& r = need_[static_cast<size_t>(v)];
    const int64_t b = elements(n, r) * a_.eb;
    out_bytes_[v] = b;
    const int64_t pad = pad_copy(n, r);
    // The no-grad forward runs relu-like ops in place on a fresh single-reader tensor
    // (core/exec/step.cpp run_node): no new bytes.
    const Node& producer = g_.node(n.inputs[0]);
    const bool inplace = runs_in_place(n) && producer.id != input_ &&
                         g_.consumers()[static_cast<size_t>(producer.id)].size() == 1 &&
                         allocates_output(producer);
    peak = std::max(peak, live + (inplace ? 0 : b + pad + forward_extra(n, r, b)));
    live += b;
    cost.flops += flops(n, computed != nullptr ? (*computed)[static_cast<size_t>(v)] : r);
    for (NodeId p : n.inputs) {
      if (--left[p] == 0) live -= out_bytes_[p];
    }
    keeps(n, pad, whole_tile);
  }
  cost.forward_bytes = peak;
}

// Recompute with autograd: what is kept so far, the node's input when nothing keeps it, its
// output, and a conv's scratch.
int64_t TileWalk::recompute_peak() const {
  int64_t peak = 0, kept_so_far = out_bytes_[input_];
  for (NodeId v = input_ + 1; v <= output_; ++v) {
    const NodeId i = v;
    const Node& n = g_.node(v);
    const NodeId p = n.inputs[0];
    const int64_t in_bytes = out_bytes_[p];
    const int64_t unkept_input = kept_until_[p] < 0 && p != input_ ? in_bytes : 0;
    const BoxCopies* c = boxed(v);
    const int64_t scratch =
        n.kind == OpKind::kConv
            ? (c != nullptr ? std::max(c->window, c->out) : std::max(in_bytes, out_bytes_[i])) +
                  2 * weight_elements(n) * a_.eb
            : 0;
    peak = std::max(peak, kept_so_far + unkept_input + out_bytes_[i] + own_[i] + scratch +
                              (c != nullptr ? c->parts : 0));
    kept_so_far += own_[i] + (kept_until_[i] >= 0 ? out_bytes_[i] : 0);
  }
  return peak;
}

// What node `n`'s backward allocates beside its input gradients (`grad_in` bytes) and its
// output gradient (`out`). A conv's backward also reorders the output gradient and its input
// (measured: input gradient + output + max(input, output / 4) above the live gradients).
int64_t TileWalk::backward_scratch(const Node& n, int64_t out, int64_t grad_in, int64_t eb) {
  if (n.kind == OpKind::kConv)
    return out + std::max(grad_in, out / 4) + 2 * weight_elements(n) * eb;
  if ((n.kind == OpKind::kPointwise &&
       (n.pointwise == Pointwise::kAffine || n.pointwise == Pointwise::kScale)) ||
      n.kind == OpKind::kBarrier) {
    return out;  // the scale's gradient: grad · x in full before it is summed per channel
  }
  if (n.kind == OpKind::kPointwise && n.pointwise == Pointwise::kChannelNorm) {
    return 2 * out;  // the channels-last gradient and its copy back
  }
  return 0;
}

void TileWalk::backward(Analysis::TileCost& cost) const {
  int64_t kept = 0;
  NodeVec<int64_t> freed_at(out_bytes_.size(), 0);  // bytes released when v's backward ran
  for (NodeId v = input_; v <= output_; ++v) {
    const NodeId i = v;
    kept += own_[i];
    freed_at[i] += own_[i];
    if (kept_until_[i] >= 0) {
      kept += out_bytes_[i];
      freed_at[kept_until_[i]] += out_bytes_[i];
    }
  }
  int64_t bwd_peak = recompute_peak();
  // Gradients flow down; each node frees what it kept once its backward ran.
  int64_t held = kept;
  const NodeId out_index = output_;
  cost.kept_bytes = kept + (kept_until_[out_index] < 0 ? out_bytes_[out_index] : 0);
  cost.kept_output_bytes = out_bytes_[out_index];
  const NodeId in_index = input_;
  cost.kept_input_bytes = kept_until_[in_index] >= 0 ? out_bytes_[in_index] : 0;
  for (NodeId v = output_; v > input_; --v) {
    const Node& n = g_.node(v);
    const int64_t out = out_bytes_[v];
    int64_t grad_in = 0;
    for (NodeId p : n.inputs) grad_in += out_bytes_[p];
    const BoxCopies* c = boxed(v);
    const int64_t scratch = c != nullptr
                                ? backward_scratch(n, c->out, c->window, a_.eb) + c->backward_copies
                                : backward_scratch(n, out, grad_in, a_.eb);
    bwd_peak = std::max(bwd_peak, held + out + grad_in + scratch);
    held -= freed_at[v];
  }
  cost.backward_bytes = bwd_peak;
}

}  // namespace

Analysis::TileCost Analysis::compute_cost(NodeId input, NodeId output, const Region& tile,
                                          const std::vector<Region>& need,
                                          const std::vector<Region>* computed,
                                          const std::vector<BoxCopies>* copies) const {
  const Shape& out_shape = shapes[static_cast<size_t>(output)];
  const bool whole_tile = options.overrides.whole_barriers && tile.y.begin == 0 &&
                          tile.x.begin == 0 && tile.y.end == out_shape.height &&
                          tile.x.end == out_shape.width;
  TileCost cost;
  TileWalk walk(*this, input, output, need, copies);
  walk.forward(whole_tile, computed, cost);
  walk.backward(cost);
  if (output == reduction_input) {
    const int64_t extra = reduction_bytes_per_position * tile.area();
    cost.forward_bytes += extra;
    cost.backward_bytes += extra;
  }
  return cost;
}

Partition partition_for(Strategy s, const Shape& out, int64_t n) {
  if (row_strategy(s)) return Partition::even(out.height, out.width, n, 1);
  return Partition::even(out.height, out.width, n, n);
}

int64_t max_count(Strategy s, const Shape& out) {
  return row_strategy(s) ? out.height : std::max(out.height, out.width);
}

std::vector<int64_t> balanced_rows(const Analysis& a, NodeId input, NodeId output, int64_t rows,
                                   bool shared) {
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

Analysis::TileCost worst_tile(const Analysis& a, const Segment& s, const Partition& p) {
  auto key = std::make_tuple(s.input, s.output, p.y_edges, p.x_edges, s.is<SharedRows>());
  const auto hit = a.worst_tiles.find(key);
  if (hit != a.worst_tiles.end()) return hit->second;
  return a.worst_tiles.emplace(std::move(key), compute_worst_tile(a, s, p)).first->second;
}

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

}  // namespace tessel::core::planning
