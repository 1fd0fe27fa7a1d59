#include "core/exec/glass.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "core/error.h"
#include "core/plan/geometry.h"

namespace tessel::core {

namespace {

// The first glass tile's first output position, of the forward's tiles, else the backward's.
Region first_position(const Segment& s, const SegmentGlass& g) {
  const auto first = [](const Partition& part, const std::vector<uint8_t>& glass) -> Region {
    for (int64_t t = 0; t < part.tiles(); ++t) {
      if (glass[static_cast<size_t>(t)] == 0) continue;
      const Region tile = part.tile(t);
      return {{tile.y.begin, tile.y.begin + 1}, {tile.x.begin, tile.x.begin + 1}};
    }
    return {};
  };
  const Region f = first(s.forward, g.forward);
  return f.empty() ? first(s.backward, g.backward) : f;
}

}  // namespace

GlassRun::GlassRun(Step& step, int index) : step_(step), index_(index), s_(step.segment(index)) {
  column_ = first_position(s_, tiles());
}

const SegmentGlass& GlassRun::tiles() const { return step_.glass(index_); }

std::vector<Region> GlassRun::column_needs() const {
  return segment_needs(step_.graph(), step_.plan().shapes, s_.input, s_.output, column_);
}

// The input's uniform value over the column's input region.
at::Tensor GlassRun::column_input() const {
  const at::Tensor& u = step_.uniform(s_.input);
  if (!u.defined())
    throw Error("internal: glass in segment " + std::to_string(index_) +
                " without its input's uniform value");
  const Region r = column_needs()[static_cast<size_t>(s_.input)];
  return u.expand({1, u.size(1), r.y.size(), r.x.size()}).contiguous();
}

void GlassRun::before_forward() {
  if (!tiles().any()) return;
  const at::NoGradGuard no_grad;
  const std::vector<Region> need = column_needs();
  const at::Tensor y = step_.run_tile(s_.input, s_.output, need,
                                      {column_input(), need[static_cast<size_t>(s_.input)]});
  step_.uniform(s_.output) = y.contiguous();
}

at::Tensor GlassRun::output_tile(const Region& tile) const {
  const at::Tensor& u = step_.uniform(s_.output);
  return u.expand({1, u.size(1), tile.y.size(), tile.x.size()}).contiguous();
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
  if (tiles().backward_count() == 0) return;
  at::Tensor seed = grad_sum_;
  at::Tensor& carried = step_.glass_grad(s_.output);
  if (carried.defined()) seed = seed.defined() ? seed + carried : carried;
  carried = at::Tensor();
  grad_sum_ = at::Tensor();
  if (!seed.defined()) return;
  const at::AutoGradMode grad_mode(true);
  const std::vector<Region> need = column_needs();
  const at::Tensor x = column_input();
  if (step_.wants_input_grad(s_)) x.requires_grad_(true);
  const at::Tensor y =
      step_.run_tile(s_.input, s_.output, need, {x, need[static_cast<size_t>(s_.input)]});
  if (!y.requires_grad()) return;
  seeded(y, seed.to(y.scalar_type()).view_as(y)).backward();
  if (x.grad().defined()) {
    step_.glass_grad(s_.input) = x.grad().sum({2, 3}, /*keepdim=*/true, at::kDouble);
  }
}

}  // namespace tessel::core
