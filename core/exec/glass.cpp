#include "core/exec/glass.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/autograd.h>

#include "core/error.h"
#include "core/exec/barrier.h"
#include "core/exec/tile_ops.h"
#include "core/plan/geometry.h"

namespace tessel::core {

namespace {

// Node `node` at one position whose inputs all hold their uniform values `in` (1×C×1×1 each) and
// whose window reads no padding: the node's uniform value. The position lies far enough inside
// a large activation that no window reaches its border.
at::Tensor uniform_node(const Node& node, const std::vector<at::Tensor>& in) {
  // Barriers taking statistics run in chain(); batch norm in evaluation is what reaches here.
  if (node.is_barrier()) return batch_norm_eval(node, in.at(0));
  const AxisOp ay = node.axis_op(0), ax = node.axis_op(1);
  const int64_t at_y = ay.padding + 1, at_x = ax.padding + 1;
  const Region out{{at_y, at_y + 1}, {at_x, at_x + 1}};
  const Region window{input_window(ay, out.y), input_window(ax, out.x)};
  constexpr int64_t kLarge = int64_t{1} << 30;
  std::vector<TileTensor> tiles;
  std::vector<Shape> shapes;
  for (const at::Tensor& u : in) {
    tiles.push_back(
        {u.expand({1, u.size(1), window.y.size(), window.x.size()}).contiguous(), window});
    shapes.push_back({u.size(1), kLarge, kLarge});
  }
  return forward_tile(node, out, tiles, shapes);
}

// `sum` += `part` (either may be undefined).
void add_to(at::Tensor& sum, const at::Tensor& part) {
  if (part.defined()) sum = sum.defined() ? sum + part : part;
}

}  // namespace

namespace {

// `r` and `boxes` as one list of numbers (autograd keeps it for the backward).
std::vector<int64_t> corners(const Region& r, const Boxes& boxes) {
  std::vector<int64_t> c = {r.y.begin, r.y.end, r.x.begin, r.x.end};
  for (const Region& b : boxes) c.insert(c.end(), {b.y.begin, b.y.end, b.x.begin, b.x.end});
  return c;
}

std::pair<Region, Boxes> from_corners(const std::vector<int64_t>& c) {
  const auto at = [&c](size_t i) { return Region{{c[i], c[i + 1]}, {c[i + 2], c[i + 3]}}; };
  Boxes boxes;
  for (size_t i = 4; i + 3 < c.size(); i += 4) boxes.push_back(at(i));
  return {at(0), boxes};
}

// One tensor over `r`: `parts` over `boxes` (disjoint), `value` (1×C×1×1) on the ring around
// them. Written once (autograd's expand then a copy into a slice wrote the whole region twice),
// and its backward hands each part its box's gradient as a view and `value` the ring's sum
// (expand's summed the whole region, CopySlices cloned it).
class FillBoxes : public torch::autograd::Function<FillBoxes> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& value,
                            at::TensorList parts, const std::vector<int64_t>& geometry,
                            at::MemoryFormat format) {
    const auto [r, boxes] = from_corners(geometry);
    ctx->saved_data["geometry"] = geometry;
    at::Tensor full = at::empty({1, value.size(1), r.y.size(), r.x.size()},
                                value.options().memory_format(format));
    for (const Region& strip : ring(r, boxes)) crop({full, r}, strip).copy_(value);
    for (size_t i = 0; i < boxes.size(); ++i) crop({full, r}, boxes[i]).copy_(parts[i]);
    return full;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto [r, boxes] = from_corners(ctx->saved_data["geometry"].toIntVector());
    const at::Tensor& g = grads.at(0);
    torch::autograd::variable_list out;
    at::Tensor grad_value;
    if (ctx->needs_input_grad(0)) {
      for (const Region& strip : ring(r, boxes)) {
        const at::Tensor sum = crop({g, r}, strip).sum({0, 2, 3}, /*keepdim=*/true);
        grad_value = grad_value.defined() ? grad_value + sum : sum;
      }
    }
    out.push_back(grad_value);
    for (const Region& b : boxes) out.push_back(crop({g, r}, b));
    out.emplace_back();  // geometry
    out.emplace_back();  // format
    return out;
  }
};

// `x` (over `r`) over each of `windows` (inside `r`, none empty), as views. Its backward adds
// each window's gradient into one gradient of `x`: several boxes reading one tensor through
// slices gave each its own zeroed gradient of the whole tensor and summed them (vgg-mini 2048²,
// 30% tissue: 0.9 s of a 6.5 s step). Views, not copies: the ops save what they read, and copies
// were held beside `x` (resnet50 train-mode BN 1024² at 88% glass, a kept whole segment: 1.05 GB
// measured against 0.80 GB dense).
class CropEach : public torch::autograd::Function<CropEach> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& x,
                                                const std::vector<int64_t>& geometry) {
    const auto [r, windows] = from_corners(geometry);
    ctx->saved_data["geometry"] = geometry;
    ctx->saved_data["sizes"] = x.sizes().vec();
    const at::MemoryFormat format = x.suggest_memory_format();
    ctx->saved_data["channels_last"] = format == at::MemoryFormat::ChannelsLast;
    torch::autograd::variable_list out;
    for (const Region& w : windows) out.push_back(crop({x, r}, w));
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto [r, windows] = from_corners(ctx->saved_data["geometry"].toIntVector());
    at::Tensor gx;
    for (size_t i = 0; i < windows.size(); ++i) {
      if (!grads[i].defined()) continue;
      if (!gx.defined()) {
        const at::MemoryFormat format = ctx->saved_data["channels_last"].toBool()
                                            ? at::MemoryFormat::ChannelsLast
                                            : at::MemoryFormat::Contiguous;
        gx = at::zeros(ctx->saved_data["sizes"].toIntVector(),
                       grads[i].options().memory_format(format));
      }
      crop({gx, r}, windows[i]).add_(grads[i]);
    }
    return {gx, at::Tensor()};
  }
};

}  // namespace

std::vector<TileTensor> crop_each(const TileTensor& t, const std::vector<Region>& windows) {
  std::vector<TileTensor> out(windows.size());
  std::vector<Region> some;
  for (const Region& w : windows) {
    if (!w.empty()) some.push_back(w);
  }
  if (some.empty()) return std::vector<TileTensor>(windows.size(), t);
  const torch::autograd::variable_list crops = CropEach::apply(t.tensor, corners(t.region, some));
  for (size_t i = 0, k = 0; i < windows.size(); ++i) {
    out[i] = windows[i].empty() ? t : TileTensor{crops[k++], windows[i]};
  }
  return out;
}

at::Tensor fill_around(const at::Tensor& value, const Region& r,
                       const std::vector<at::Tensor>& parts, const Boxes& boxes,
                       at::MemoryFormat format) {
  if (parts.empty()) {
    return value.expand({1, value.size(1), r.y.size(), r.x.size()}).contiguous(format);
  }
  return FillBoxes::apply(value, at::TensorList(parts), corners(r, boxes), format);
}

GlassRun::GlassRun(Step& step, int index) : step_(step), index_(index), s_(step.segment(index)) {}

const SegmentGlass& GlassRun::tiles() const { return step_.glass(index_); }

// Stops at a barrier whose statistic is not yet taken (its value and those after it undefined).
std::vector<at::Tensor> GlassRun::chain(const at::Tensor& x) const {
  std::vector<at::Tensor> v(static_cast<size_t>(s_.output) + 1);
  v[static_cast<size_t>(s_.input)] = x;
  chain_from(v, s_.output);
  return v;
}

std::vector<at::Tensor> GlassRun::sub_chain(const std::vector<NodeId>& leaves,
                                            NodeId target) const {
  std::vector<at::Tensor> v(static_cast<size_t>(s_.output) + 1);
  for (NodeId l : leaves) {
    const at::Tensor& u = l == s_.input ? step_.uniform(s_.input) : value(l);
    v[static_cast<size_t>(l)] = u.detach().requires_grad_(true);
  }
  chain_from(v, target);
  return v;
}

// The nodes of (input, last] that `v` does not hold, from those it does.
void GlassRun::chain_from(std::vector<at::Tensor>& v, NodeId last) const {
  const Graph& graph = step_.graph();
  for (NodeId n = s_.input + 1; n <= last; ++n) {
    if (v[static_cast<size_t>(n)].defined()) continue;  // given
    const Node& node = graph.node(n);
    std::vector<at::Tensor> in;
    for (NodeId p : node.inputs) in.push_back(v[static_cast<size_t>(p)]);
    if (node.is_barrier() && needs_statistics(node, step_.training())) {
      const auto& state = step_.barrier_state(n);
      if (state == nullptr || !state->statistics_done()) break;
      v[static_cast<size_t>(n)] = state->forward(in.at(0));
      continue;
    }
    v[static_cast<size_t>(n)] = uniform_node(node, in);
  }
}

void GlassRun::before_forward() {
  values_.clear();
  tile_values_.clear();
  grad_sum_ = at::Tensor();
  refresh();
}

void GlassRun::refresh() {
  if (!tiles().any() && !fills()) return;
  const at::Tensor& u = step_.uniform(s_.input);
  if (!u.defined()) {
    throw Error("internal: glass in segment " + std::to_string(index_) +
                " without its input's uniform value");
  }
  {
    const at::NoGradGuard no_grad;
    values_ = chain(u);
  }
  // Leaves: each sums the gradient at the positions filled from it, over every tile's backward.
  for (NodeId n = s_.input + 1; n <= s_.output; ++n) {
    at::Tensor& value = values_[static_cast<size_t>(n)];
    if (value.defined()) value = value.detach().requires_grad_(step_.training());
  }
  const at::Tensor& out = values_[static_cast<size_t>(s_.output)];
  if (out.defined()) step_.uniform(s_.output) = out.detach();
}

at::Tensor GlassRun::output_tile(const Region& tile) const {
  const at::Tensor& u = step_.uniform(s_.output);
  return u.expand({1, u.size(1), tile.y.size(), tile.x.size()}).contiguous();
}

void GlassRun::fill(const std::vector<Region>& need, TileBoxes& boxes, TileExtras& extras,
                    NodeId last, const std::map<NodeId, CellMask>* given) {
  if (!fills() || values_.empty()) return;
  const Graph& graph = step_.graph();
  const std::vector<Shape>& shapes = step_.plan().shapes;
  const NodeId output = last < 0 ? s_.output : last;
  const bool whole = s_.is<WholeBarriers>();
  const std::vector<Boxes> box = computed_boxes(graph, shapes, s_.input, output, need,
                                                TileUniform{tiles().input, given, whole});
  boxes.held = held_regions(graph, shapes, {s_.input, output}, need, box, whole);
  boxes.computed = held_boxes(box, boxes.held);
  extras.boxes = &boxes;
  extras.fill = &values_;
  if (whole) {
    tile_values_ = values_;
    extras.fill = &tile_values_;
    extras.barrier_value = [this](NodeId b, const at::Tensor& u) { take_barrier_value(b, u); };
  }
}

// In the tile's forward and its recompute alike: with autograd on, the values past the barrier
// hang from its output, so the gradient at their fills reaches the barrier's backward at that
// position (every uniform position has the same Jacobians; only the sum matters).
void GlassRun::take_barrier_value(NodeId b, const at::Tensor& value) {
  tile_values_.at(static_cast<size_t>(b)) = value;
  chain_from(tile_values_, s_.output);
  const at::Tensor& out = tile_values_[static_cast<size_t>(s_.output)];
  if (out.defined()) step_.uniform(s_.output) = out.detach();
}

at::Tensor GlassRun::tile_root(at::Tensor root) {
  if (tile_values_.empty() || values_.empty()) return root;
  const at::Tensor& y = tile_values_[static_cast<size_t>(s_.output)];
  if (!y.defined() || !y.requires_grad() || values_[static_cast<size_t>(s_.output)].defined()) {
    return root;  // none, or a leaf after_backward seeds
  }
  const at::Tensor seed = take_output_seed();
  if (!seed.defined()) return root;
  const at::Tensor r = seeded(y, seed.to(y.scalar_type()).view_as(y));
  return root.defined() ? root + r : r;
}

std::vector<at::Tensor> GlassRun::take_fill_grads() {
  std::vector<at::Tensor> sums(values_.size());
  for (size_t n = 0; n < values_.size(); ++n) {
    at::Tensor& v = values_[n];
    if (!v.defined() || !v.grad().defined()) continue;
    sums[n] = v.grad().to(at::kDouble);
    v.mutable_grad().reset();
  }
  return sums;
}

// The gradient at glass tile `tile`'s output, summed over it (float64, 1×C×1×1; undefined where
// the head gives it none).
at::Tensor GlassRun::output_grad_sum(const Region& tile, const at::Tensor& grad_out,
                                     StoredActivation* stored_grad_out) {
  at::Tensor g;
  if (s_.reduction < 0) {
    g = stored_grad_out != nullptr ? stored_grad_out->read(tile)
                                   : crop({grad_out, step_.held(s_.output)}, tile);
  } else {
    // The head's gradient at the tile: its streaming reduction's surrogate, on the tile's value.
    const at::AutoGradMode grad_mode(true);
    const at::Tensor y = output_tile(tile).requires_grad_(true);
    at::Tensor consumed = y;
    const at::Tensor root = step_.output_root(s_, tile, consumed, grad_out, nullptr);
    if (root.defined()) root.backward();
    g = y.grad();
    if (!g.defined()) return {};
  }
  return g.sum({2, 3}, /*keepdim=*/true, at::kDouble);
}

void GlassRun::add_output_grad(const Region& tile, const at::Tensor& grad_out,
                               StoredActivation* stored_grad_out) {
  add_to(grad_sum_, output_grad_sum(tile, grad_out, stored_grad_out));
}

at::Tensor GlassRun::take_output_seed() {
  at::Tensor seed;
  for (at::Tensor* part : {&grad_sum_, &step_.glass_grad(s_.output)}) {
    add_to(seed, *part);
    *part = at::Tensor();
  }
  return seed;
}

void GlassRun::add_round_output_grad(const Region& tile, const at::Tensor& grad_out,
                                     StoredActivation* stored_grad_out) {
  add_to(round_.output, output_grad_sum(tile, grad_out, stored_grad_out));
}

void GlassRun::add_round_fill_grads(const std::vector<NodeId>& nodes,
                                    const std::vector<at::Tensor>& grads) {
  if (round_.fills.empty()) round_.fills.resize(values_.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (grads[i].defined())
      add_to(round_.fills[static_cast<size_t>(nodes[i])], grads[i].to(at::kDouble));
  }
}

std::vector<NodeId> GlassRun::fill_leaves(std::vector<at::Tensor>& leaves) const {
  std::vector<NodeId> nodes;
  for (NodeId n = s_.input + 1; n <= s_.output && !values_.empty(); ++n) {
    const at::Tensor& v = values_[static_cast<size_t>(n)];
    if (v.defined() && v.requires_grad()) {
      nodes.push_back(n);
      leaves.push_back(v);
    }
  }
  return nodes;
}

// The chain's surrogate: each node's seed on its value, and the barriers' corrections (those
// whose sums are taken) over the positions of their input the glass tiles' shares hold, which no
// tile adds (a tile that runs adds its share's, fills included).
at::Tensor GlassRun::chain_root(const std::vector<at::Tensor>& v,
                                const std::vector<at::Tensor>& seeds) const {
  at::Tensor root;
  const auto add = [&root](const at::Tensor& r) { root = root.defined() ? root + r : r; };
  for (NodeId n = s_.input + 1; n <= s_.output; ++n) {
    const at::Tensor& seed = seeds[static_cast<size_t>(n)];
    const at::Tensor& y = v[static_cast<size_t>(n)];
    if (seed.defined() && y.defined() && y.requires_grad()) {
      add(seeded(y, seed.to(y.scalar_type()).view_as(y)));
    }
  }
  for (NodeId b : step_.barriers(s_)) {
    const auto& state = step_.barrier_state(b);
    const at::Tensor& x = v[static_cast<size_t>(step_.graph().node(b).inputs[0])];
    const int64_t positions = glass_share(b);
    if (state == nullptr || !state->sums_done() || positions == 0 || !x.requires_grad()) continue;
    add(state->correction(x) * static_cast<double>(positions));
  }
  return root;
}

namespace {

// `t` (1×`channels`×1×1; undefined where this rank has none) summed over `ranks` in float64,
// with a flag: undefined where no rank had one.
at::Tensor sum_defined(const at::Tensor& t, int64_t channels, Ranks& ranks,
                       const at::TensorOptions& options) {
  at::Tensor buffer = at::zeros({channels + 1}, options.dtype(at::kDouble));
  if (t.defined()) {
    buffer.narrow(0, 0, channels).copy_(t.detach().reshape({channels}));
    buffer.narrow(0, channels, 1).fill_(1);
  }
  ranks.allreduce_sum({buffer});
  if (buffer.narrow(0, channels, 1).item<double>() == 0) return {};
  return buffer.narrow(0, 0, channels).view({1, channels, 1, 1});
}

}  // namespace

void GlassRun::share_whole_value(bool ran) {
  Ranks* ranks = step_.ranks();
  if (ranks == nullptr || !fills()) return;
  at::Tensor& u = step_.uniform(s_.output);
  const at::Tensor sum = sum_defined(ran ? u : at::Tensor(), step_.shape(s_.output).channels,
                                     *ranks, step_.tensor_options());
  if (!ran) u = sum.defined() ? sum.to(step_.tensor_options().dtype()) : at::Tensor();
}

void GlassRun::gather_whole_seed(bool ran) {
  Ranks* ranks = step_.ranks();
  if (ranks == nullptr || !fills()) return;
  at::Tensor& g = step_.glass_grad(s_.output);
  const at::Tensor sum =
      sum_defined(g, step_.shape(s_.output).channels, *ranks, step_.tensor_options());
  g = ran ? sum : at::Tensor();
}

// The positions of barrier `b`'s input this rank's backward glass tiles' shares hold (split over
// ranks, each rank's corrections go into its part of the gradients, summed over the ranks).
int64_t GlassRun::glass_share(NodeId b) const {
  int64_t positions = 0;
  for (int64_t t = 0; t < s_.backward.tiles(); ++t) {
    if (backward(t) && step_.runs(index_, Pass::kBackward, t)) {
      positions += step_.share(s_, b, s_.backward.tile(t)).area();
    }
  }
  return positions;
}

void GlassRun::finish_round(const std::vector<NodeId>& round) {
  if (values_.empty()) return;
  std::vector<at::Tensor> seeds = round_.fills;
  seeds.resize(values_.size());
  at::Tensor& out_seed = seeds[static_cast<size_t>(s_.output)];
  add_to(out_seed, round_.output);
  add_to(out_seed, step_.glass_grad(s_.output));  // kept: every round and the backward use it
  round_ = {};
  const at::AutoGradMode grad_mode(true);
  const at::Tensor x = step_.uniform(s_.input).detach().requires_grad_(true);
  const std::vector<at::Tensor> v = chain(x);
  const at::Tensor root = chain_root(v, seeds);
  std::vector<NodeId> wanted;
  std::vector<at::Tensor> outputs;
  for (NodeId b : round) {
    if (v[static_cast<size_t>(b)].requires_grad()) {
      wanted.push_back(b);
      outputs.push_back(v[static_cast<size_t>(b)]);
    }
  }
  if (!root.defined() || !root.requires_grad() || outputs.empty()) return;
  const auto grads = torch::autograd::grad({root}, outputs, {}, /*retain_graph=*/false,
                                           /*create_graph=*/false, /*allow_unused=*/true);
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (!grads[i].defined()) continue;
    const at::Tensor& u = v[static_cast<size_t>(step_.graph().node(wanted[i]).inputs[0])];
    step_.barrier_state(wanted[i])->add_output_grad(u.detach(), grads[i]);
  }
}

void GlassRun::after_backward() {
  if (values_.empty()) return;
  // Each node's seed: the gradient's sum at its filled positions; the output's also the glass
  // tiles' and what the next segment's glass tiles handed back.
  std::vector<at::Tensor> seeds(values_.size());
  for (NodeId n = s_.input + 1; n <= s_.output; ++n) {
    const at::Tensor& v = values_[static_cast<size_t>(n)];
    if (v.defined() && v.grad().defined()) seeds[static_cast<size_t>(n)] = v.grad().to(at::kDouble);
  }
  at::Tensor& out_seed = seeds[static_cast<size_t>(s_.output)];
  for (at::Tensor* extra : {&grad_sum_, &step_.glass_grad(s_.output)}) {
    add_to(out_seed, *extra);
    *extra = at::Tensor();
  }
  values_.clear();
  tile_values_.clear();
  const at::AutoGradMode grad_mode(true);
  const at::Tensor x = step_.uniform(s_.input).detach();
  if (step_.wants_input_grad(s_)) x.requires_grad_(true);
  const at::Tensor root = chain_root(chain(x), seeds);
  if (!root.defined() || !root.requires_grad()) return;
  root.backward();
  if (x.grad().defined()) step_.glass_grad(s_.input) = x.grad().to(at::kDouble);
}

}  // namespace tessel::core
