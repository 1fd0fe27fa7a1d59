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
  // Norm-wise, ‖a − b‖₂ / ‖b‖₂: the output, the input gradient, and every parameter's gradient
  // as one vector. Reduced precisions (tf32, bf16) are judged so: their max-abs errors are
  // rounding noise of the order of the value wherever a sum cancels (a bias's gradient, the
  // loss), in plain as much as tiled.
  double output_norm = 0, input_grad_norm = 0, params_norm = 0;
  int64_t offload_bytes = 0;  // the tiled step's bytes to and from the host or disk tier
  // Buffers after the step (batch norm's running statistics), both steps starting alike.
  double worst_buffer = 0;
  std::string worst_buffer_name;
  double worst() const { return std::max({loss, logits, input_grad, worst_param, worst_buffer}); }
  std::string to_string() const;
};

// Whether a tiled step in `precision` (float32 weights) rounds like the plain one, from `c`
// (tiled against plain) and `floor` (plain against plain float64, rounding_of_plain): a tiled
// step that rounds no worse than the plain one lies within twice plain's own error of it (the
// triangle inequality). float32: the worst max-abs error within max(1e-4, 2 × floor's worst).
// tf32 and bf16: each norm-wise error within max(4 unit roundoffs (2^-11, 2^-8), 2 × floor's).
bool within_rounding(const Comparison& c, const Comparison& floor, Precision precision);
// The bar within_rounding applies to each quantity, for messages: "max(0.0156, 2 × floor)".
double least_tolerance(Precision precision);

// ‖a − b‖₂ / max(‖b‖₂, 1e-30) over the tensors as one vector, in float64.
double norm_relative_error(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b);

// max |a - b| / max(max |b|, 1e-30).
double relative_error(const at::Tensor& a, const at::Tensor& b);

// Random weights of the parameters' dtype (frozen batch norm statistics too) from `seed`.
void randomise(Graph& graph, uint64_t seed);

// One step of `plan` and one plain step on `image` (1×C×H×W), same weights; the loss is a fixed
// random projection of the output (linear, so no gradient vanishes or saturates).
Comparison compare_with_plain(Graph& graph, const Plan& plan, const at::Tensor& image,
                              uint64_t seed, const StepOptions& options = {});

// The plain step's own rounding in the graph's dtype and `options.precision`, against plain in
// float64 on the same weights, image and loss: the floor of a float32, tf32 or bf16 check
// (within_rounding).
Comparison rounding_of_plain(Graph& graph, const Plan& plan, const at::Tensor& image, uint64_t seed,
                             const StepOptions& options = {});

}  // namespace tessel::core
