// Barriers under tiling (DESIGN.md "Barriers", docs/barriers.md): ops whose output at a position
// depends on a statistic of the whole input (train-mode batch norm, group norm,
// squeeze-and-excitation). Inside tiles the statistic is a constant; what a constant leaves out
// of the gradient is added exactly from per-channel sums over the whole image:
//   forward:  a streaming pass adds the input's tiles to the statistic (each position once);
//   backward: the gradient at the barrier's output, summed over all positions, gives the
//             coefficients of a correction whose gradient with respect to the input is the term
//             through the statistic; the segment adds it once per position.
// Everything is a sum of tile terms, so the gradients are those of plain autograd.
#pragma once

#include <ATen/core/Tensor.h>

#include "core/exec/ranks.h"
#include "core/graph/graph.h"

namespace tessel::core {

// Node `barrier` on a whole activation with autograd through its statistic, as LibTorch runs it:
// batch norm in training (`training`, updating the running statistics) or evaluation, group
// norm, squeeze-and-excitation. The plain reference, the tile form's definition, and how a
// one-tile segment runs it (WholeBarriers). `update_running` false: batch norm in
// training leaves its running statistics (a recompute of a forward that updated them).
at::Tensor barrier_plain(const Node& barrier, const at::Tensor& x, bool training,
                         bool update_running = true);

// Batch norm in evaluation on any region: the running statistics as a per-channel affine.
at::Tensor batch_norm_eval(const Node& barrier, const at::Tensor& x);

// Whether `node` needs whole-image statistics in this kind of pass: group norm and
// squeeze-and-excitation always, batch norm only while training.
bool needs_statistics(const Node& node, bool training);

// One barrier's statistic and gradient sums over one step.
class BarrierState {
 public:
  // `options`: the dtype and device the tiles compute in. Sums are kept in float64. `ranks`: a
  // step split over ranks (core/exec/ranks.h), each adding its own tiles; the statistic and the
  // sums are those of every rank's, summed when finished (each finish_* call is collective).
  BarrierState(const Node& barrier, const at::TensorOptions& options, Ranks* ranks = nullptr);

  // The forward's statistic pass: `x` (1×C×h×w) is the barrier's input over a region no other
  // call adds (the regions partition the activation).
  void add_input(const at::Tensor& x);
  // The same for `positions` positions that all hold `u` (1×C×1×1): glass (core/exec/glass.h).
  void add_uniform_input(const at::Tensor& u, int64_t positions);
  // After the last add_input: the constants the tiles use. Batch norm in training updates its
  // running mean and (unbiased) variance as BatchNorm2d does. Throws tessel::Error naming the
  // layer when the statistic is undefined (batch norm over a single position per channel).
  void finish_statistics(bool update_running);
  bool statistics_done() const { return mean_.defined() || gate_.defined(); }

  // The barrier on a tile of its input, the statistic a constant.
  at::Tensor forward(const at::Tensor& x) const;

  // The backward's sums: `dy` is (a tile's share of) the gradient at the barrier's output over
  // some region, `x` the input over the same region. Shares of one position from several tiles
  // may each be added: the sums are linear in the gradient.
  void add_output_grad(const at::Tensor& x, const at::Tensor& dy);
  // After the last add_output_grad: the correction's coefficients. Squeeze-and-excitation also
  // runs its gate's backward here, adding to the gate parameters' gradients.
  void finish_sums();
  bool sums_done() const { return sums_done_; }

  // A scalar whose gradient with respect to `x` (the barrier's input over a region) is the part
  // of the input's gradient that runs through the statistic, at the positions of that region:
  // summed over regions that partition the activation, each position gets its term once.
  at::Tensor correction(const at::Tensor& x) const;
  // The gradient of correction(x) with respect to x, computed directly (an inner checkpoint's
  // gradient takes it whole).
  at::Tensor correction_gradient(const at::Tensor& x) const;

 private:
  // Adds a share's per-group mean and sum of squared deviations over `n` values (float64).
  void merge(const at::Tensor& share_mean, const at::Tensor& share_m2, int64_t n);
  // Split over ranks: every rank's count, sum and squared deviations merged into this one's.
  void merge_ranks();

  const Node& node_;
  at::TensorOptions options_;
  Ranks* ranks_ = nullptr;  // split over more than one rank, else null
  int64_t groups_ = 1;      // statistic groups: channels (batch norm, SE) or the norm's groups
  int64_t count_ = 0;       // positions (× channels per group) added so far, per group
  at::Tensor mean64_, m2_;  // per group, float64: sums until finished, then means (Chan)
  at::Tensor mean_, rstd_;  // norms: per channel, 1×C×1×1, the tiles' dtype
  at::Tensor mean_flat_, var_flat_;  // the same mean and the biased variance, C
  at::Tensor squeezed_, gate_;       // SE: the channel means and the gate, 1×C×1×1
  at::Tensor sum_a_, sum_b_;  // per channel, float64: norms Σ dy·γ and Σ dy·γ·x̂; SE Σ dy·x
  at::Tensor coeff_a_, coeff_b_;  // the correction's coefficients, 1×C×1×1
  bool sums_done_ = false;
};

// Split over ranks: batch norm's running statistics in the barriers of nodes (input, output],
// on every rank as the rank that ran them left them (`ran`: this one did). A one-tile segment
// runs its barriers whole on one rank (WholeBarriers); collective.
void share_running_statistics(const Graph& graph, NodeId input, NodeId output, bool ran,
                              Ranks& ranks);

}  // namespace tessel::core
