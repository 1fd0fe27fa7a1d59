#include "core/exec/glass.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

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
  if (node.is_barrier()) return batch_norm_eval(node, in.at(0));  // glass_obstacle: eval only
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

}  // namespace

at::Tensor fill_around(const at::Tensor& value, const Region& r, const at::Tensor& part,
                       const Region& box, at::MemoryFormat format) {
  at::Tensor full = value.expand({1, value.size(1), r.y.size(), r.x.size()}).contiguous(format);
  if (part.defined() && !box.empty()) {
    full.narrow(2, box.y.begin - r.y.begin, box.y.size())
        .narrow(3, box.x.begin - r.x.begin, box.x.size())
        .copy_(part);
  }
  return full;
}

GlassRun::GlassRun(Step& step, int index) : step_(step), index_(index), s_(step.segment(index)) {}

const SegmentGlass& GlassRun::tiles() const { return step_.glass(index_); }

std::vector<at::Tensor> GlassRun::chain(const at::Tensor& x) const {
  std::vector<at::Tensor> v(static_cast<size_t>(s_.output) + 1);
  v[static_cast<size_t>(s_.input)] = x;
  const Graph& graph = step_.graph();
  for (NodeId n = s_.input + 1; n <= s_.output; ++n) {
    const Node& node = graph.node(n);
    std::vector<at::Tensor> in;
    for (NodeId p : node.inputs) in.push_back(v[static_cast<size_t>(p)]);
    v[static_cast<size_t>(n)] = uniform_node(node, in);
  }
  return v;
}

void GlassRun::before_forward() {
  values_.clear();
  grad_sum_ = at::Tensor();
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
    value = value.detach().requires_grad_(step_.training());
  }
  step_.uniform(s_.output) = values_[static_cast<size_t>(s_.output)].detach();
}

at::Tensor GlassRun::output_tile(const Region& tile) const {
  const at::Tensor& u = step_.uniform(s_.output);
  return u.expand({1, u.size(1), tile.y.size(), tile.x.size()}).contiguous();
}

void GlassRun::fill(const std::vector<Region>& need, std::vector<Region>& boxes,
                    TileExtras& extras) const {
  if (!fills() || values_.empty()) return;
  boxes =
      computed_boxes(step_.graph(), step_.plan().shapes, s_.input, s_.output, need, tiles().input);
  extras.boxes = &boxes;
  extras.fill = &values_;
}

void GlassRun::add_output_grad(const Region& tile, const at::Tensor& grad_out,
                               StoredActivation* stored_grad_out) {
  at::Tensor g;
  if (s_.reduction < 0) {
    g = stored_grad_out != nullptr ? stored_grad_out->read(tile)
                                   : crop({grad_out, whole(step_.shape(s_.output))}, tile);
  } else {
    // The head's gradient at the tile: its streaming reduction's surrogate, on the tile's value.
    const at::AutoGradMode grad_mode(true);
    const at::Tensor y = output_tile(tile).requires_grad_(true);
    at::Tensor consumed = y;
    const at::Tensor root = step_.output_root(s_, tile, consumed, grad_out, nullptr);
    if (root.defined()) root.backward();
    g = y.grad();
    if (!g.defined()) return;
  }
  const at::Tensor sum = g.sum({2, 3}, /*keepdim=*/true, at::kDouble);
  grad_sum_ = grad_sum_.defined() ? grad_sum_ + sum : sum;
}

void GlassRun::after_backward() {
  if (values_.empty()) return;
  // Each node's seed: the gradient's sum at its filled positions; the output's also the glass
  // tiles' and what the next segment's glass tiles handed back.
  std::vector<at::Tensor> seeds(values_.size());
  for (NodeId n = s_.input + 1; n <= s_.output; ++n) {
    const at::Tensor& g = values_[static_cast<size_t>(n)].grad();
    if (g.defined()) seeds[static_cast<size_t>(n)] = g.to(at::kDouble);
  }
  at::Tensor& out_seed = seeds[static_cast<size_t>(s_.output)];
  for (at::Tensor* extra : {&grad_sum_, &step_.glass_grad(s_.output)}) {
    if (extra->defined()) out_seed = out_seed.defined() ? out_seed + *extra : *extra;
    *extra = at::Tensor();
  }
  values_.clear();
  const at::AutoGradMode grad_mode(true);
  const at::Tensor x = step_.uniform(s_.input).detach();
  if (step_.wants_input_grad(s_)) x.requires_grad_(true);
  const std::vector<at::Tensor> v = chain(x);
  at::Tensor root;
  for (NodeId n = s_.input + 1; n <= s_.output; ++n) {
    const at::Tensor& seed = seeds[static_cast<size_t>(n)];
    const at::Tensor& y = v[static_cast<size_t>(n)];
    if (!seed.defined() || !y.requires_grad()) continue;
    const at::Tensor r = seeded(y, seed.to(y.scalar_type()).view_as(y));
    root = root.defined() ? root + r : r;
  }
  if (!root.defined()) return;
  root.backward();
  if (x.grad().defined()) step_.glass_grad(s_.input) = x.grad().to(at::kDouble);
}

}  // namespace tessel::core
