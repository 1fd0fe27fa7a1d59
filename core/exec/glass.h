// Glass under tiling (core/plan/glass.h says which tiles are glass), on tensors. A segment's glass
// tiles are not run:
// - Forward, their output is the segment's uniform value over the tile. That value is computed
//   once, on one output position of a glass tile (the representative column: the regions that
//   position needs, every position the input's uniform value), from the input's uniform value
//   (the image's background colour, or the previous segment's column).
// - Backward, each glass tile's share of a parameter's gradient is a linear function of its
//   output gradient with the same Jacobians at every position, and its sum over the tile's cone
//   depends on that gradient's sum over the tile alone. So the column's backward, seeded with
//   the output gradient summed over every glass tile (and the next segment's glass tiles' sum
//   of this output's gradient), gives all glass tiles' shares at once; the sum of its input's
//   gradient is what this segment's glass tiles hand the previous segment's (whose glass tiles
//   cover every position theirs read: the previous segment's SegmentGlass::output).
#pragma once

#include <ATen/core/Tensor.h>

#include "core/exec/step.h"
#include "core/plan/glass.h"

namespace tessel::core {

class GlassRun {
 public:
  GlassRun(Step& step, int index);

  const SegmentGlass& tiles() const;
  bool forward(int64_t t) const { return tiles().forward[static_cast<size_t>(t)] != 0; }
  bool backward(int64_t t) const { return tiles().backward[static_cast<size_t>(t)] != 0; }

  // Before the forward's tiles: the segment's uniform value (where it has glass tiles).
  void before_forward();
  // Glass tile `tile`'s output: the uniform value over it.
  at::Tensor output_tile(const Region& tile) const;
  // Backward glass tile `t`: its output gradient's sum joins the column's seed. `grad_out`,
  // `stored_grad_out`: the output's gradient as the segment's backward has it.
  void add_output_grad(const Region& tile, const at::Tensor& grad_out,
                       StoredActivation* stored_grad_out);
  // After the backward's tiles: the column's backward (the glass tiles' shares of the
  // parameters' gradients; the sum of the input's gradient to the previous segment).
  void after_backward();

 private:
  std::vector<Region> column_needs() const;
  at::Tensor column_input() const;

  Step& step_;
  int index_;
  const Segment& s_;
  Region column_;  // the representative column's output position
  at::Tensor grad_sum_;
};

}  // namespace tessel::core
