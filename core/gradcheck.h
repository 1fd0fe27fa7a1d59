// The engine's first law, checked: one step tiled and one plain on the same image and weights,
// every output and gradient compared by relative error (`tessel gradcheck`, the core tests).
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "core/executor.h"
#include "core/graph.h"
#include "core/planner.h"

namespace tessel::core {

struct Comparison {
  double loss = 0, logits = 0, input_grad = 0, worst_param = 0;
  std::string worst_param_name;
  int64_t offload_bytes = 0;  // the tiled step's bytes to and from the host or disk tier
  double worst() const { return std::max({loss, logits, input_grad, worst_param}); }
  std::string to_string() const;
};

// max |a - b| / max(max |b|, 1e-30).
double relative_error(const at::Tensor& a, const at::Tensor& b);

// Random weights of the parameters' dtype (frozen batch norm statistics too) from `seed`.
void randomise(Graph& graph, uint64_t seed);

// One step of `plan` and one plain step on `image` (1×C×H×W), same weights; the loss is a fixed
// random projection of the output (linear, so no gradient vanishes or saturates).
Comparison compare_with_plain(Graph& graph, const Plan& plan, const at::Tensor& image,
                              uint64_t seed, const StepOptions& options = {});

// The plain step's own rounding in the graph's dtype: plain in that dtype against plain in
// float64 on the same weights, image and loss. A float32 check's floor: a tiled step that rounds
// no worse than the plain one lies within twice this of it (the triangle inequality).
Comparison rounding_of_plain(Graph& graph, const Plan& plan, const at::Tensor& image,
                             uint64_t seed);

}  // namespace tessel::core
