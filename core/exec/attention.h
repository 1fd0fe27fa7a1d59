// Attention pooling (attention-based MIL, Ilse et al. 2018; CLAM's single- and multi-branch
// heads) over every position of the last feature map, streamed tile by tile.
//
// The graph computes the per-position scores with ordinary tileable ops (1×1 convs, tanh,
// sigmoid gate) and concatenates them before the features: node kAttentionPool reads that
// concat, [s_1 … s_B | h_1 … h_C] at each position k, and returns for every branch b
//   z_b = Σ_k α_kb h_k,   α_kb = exp(s_kb) / Σ_j exp(s_jb)   (a softmax over all positions).
// Forward: a running maximum m_b and rescaled running sums l_b = Σ exp(s_kb − m_b) and
// Σ exp(s_kb − m_b) h_k over the tiles (as memory-efficient attention does), so nothing of the
// slide's size is held. Backward: with g_b = ∂L/∂z_b, the gradient at a position is
//   ∂L/∂h_k = Σ_b α_kb g_b,   ∂L/∂s_kb = α_kb (g_b·h_k − g_b·z_b),
// which is the gradient of the tile's scalar Σ_{k in tile, b} α_kb(s) (g_b·h_k − g_b·z_b) with
// m, l, g and g·z held constant: its sum over tiles that partition the map is exactly the
// whole image's, so the tiles' backward is plain autograd's.
#pragma once

#include <ATen/core/Tensor.h>

#include "core/exec/ranks.h"
#include "core/graph/graph.h"

namespace tessel::core {

// Node `pool` (kAttentionPool) on its whole input x (1×(B+C)×H×W): 1×(B·C), branch-major.
at::Tensor attention_pool_plain(const Node& pool, const at::Tensor& x);

// The attention weights α of every position: 1×B×H×W from the scores (1×B×H×W), a softmax over
// the positions of each branch (heatmaps).
at::Tensor attention_weights(const at::Tensor& scores);

// One step's streaming attention pool.
class AttentionStream {
 public:
  // `options`: the dtype and device the tiles compute in; the sums are kept in float64.
  AttentionStream(const Node& pool, const at::TensorOptions& options);

  // The forward: `x` (1×(B+C)×h×w, no gradient needed) is the pool's input over a region no
  // other call adds (the regions partition the map).
  void add(const at::Tensor& x);
  // Split over ranks, after each rank's last add: every rank's running maxima and sums, merged in
  // rank order (the same on every rank, as if one had added every region). Returns the bytes
  // this rank gave.
  int64_t merge_ranks(Ranks& ranks);
  // After the last add: the pooled features, 1×(B·C), in `dtype`.
  at::Tensor pooled(at::ScalarType dtype);

  // The backward, after pooled(): a scalar whose gradient with respect to `x` (the pool's input
  // over a region, with its autograd history) is that region's part of the gradient of the
  // loss, given `grad` = ∂L/∂z (1×(B·C)).
  at::Tensor surrogate(const at::Tensor& x, const at::Tensor& grad) const;

 private:
  int64_t branches_;
  at::Tensor max_;     // B, float64: the running maximum of the scores
  at::Tensor sum_;     // B, float64: Σ exp(s − max)
  at::Tensor acc_;     // B×C, float64: Σ exp(s − max) h
  at::Tensor pooled_;  // B×C, float64, after pooled()
};

}  // namespace tessel::core
