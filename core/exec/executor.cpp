#include "core/exec/executor.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/module.h>

#include <spdlog/spdlog.h>

#include <chrono>
#include <limits>

#include "core/device/memory.h"
#include "core/error.h"
#include "core/exec/dropout.h"
#include "core/exec/ranks.h"
#include "core/exec/step.h"
#include "core/exec/tile_ops.h"

namespace tessel::core {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Runs the nodes after `first` on whole activations with `value` as node `first`'s output (the
// plain reference from the image, or the head from the last checkpoint), freeing each
// activation after its last consumer as an ordinary PyTorch forward does. Returns the output.
// `training`: batch norm uses its batch statistics (and updates the running ones).
at::Tensor run_from(Graph& graph, NodeId first, const at::Tensor& value, bool training) {
  std::vector<at::Tensor> values(static_cast<size_t>(graph.size()));
  std::vector<size_t> uses(static_cast<size_t>(graph.size()), 0);
  for (NodeId v = first; v < graph.size(); ++v) {
    uses[static_cast<size_t>(v)] = graph.consumers()[static_cast<size_t>(v)].size();
  }
  values[static_cast<size_t>(first)] = value;
  for (NodeId v = first + 1; v < graph.size(); ++v) {
    const Node& node = graph.node(v);
    std::vector<at::Tensor> ins;
    for (NodeId p : node.inputs) {
      if (p < first) {
        throw Error(node.name + ": the head reads " + graph.node(p).name +
                    ", which lies before the last checkpoint");
      }
      ins.push_back(values[static_cast<size_t>(p)]);
    }
    values[static_cast<size_t>(v)] = forward_plain(node, ins, training);
    for (NodeId p : node.inputs) {
      if (--uses[static_cast<size_t>(p)] == 0) values[static_cast<size_t>(p)] = at::Tensor();
    }
  }
  return values.back();
}

// One element of `t` (any strides) set to NaN.
void set_nan(at::Tensor t) {
  at::NoGradGuard no_grad;
  while (t.dim() > 0) t = t.select(0, 0);
  t.fill_(std::numeric_limits<double>::quiet_NaN());
}

// Fault::kNanGrad and kNanStat, after a tiled step's backward.
void inject_nan(Graph& graph, Fault fault) {
  if (fault == Fault::kNanGrad) {
    for (auto& p : graph.module().parameters()) {
      if (p.grad().defined() && p.grad().numel() > 0) return set_nan(p.grad());
    }
    throw Error("cannot inject nan-grad: the network has no parameter gradient");
  }
  if (fault == Fault::kNanStat) {
    for (auto& b : graph.module().named_buffers()) {
      if (b.key().find("running_") != std::string::npos && b.value().is_floating_point() &&
          b.value().numel() > 0) {
        return set_nan(b.value());
      }
    }
    throw Error(
        "cannot inject nan-stat: the network has no running statistics (batch norm in "
        "training mode has them: --norm batch)");
  }
}

at::Tensor read_whole(TileSource& source, const at::TensorOptions& options) {
  return to_compute(source.read({{0, source.height()}, {0, source.width()}}), options);
}

void check_plan(const Graph& graph, const Plan& plan, const TileSource& source) {
  if (plan.input.channels != source.channels() || plan.input.height != source.height() ||
      plan.input.width != source.width()) {
    throw Error("the plan was made for a " + to_string(plan.input) + " input, the image is " +
                std::to_string(source.channels()) + "×" + std::to_string(source.height()) + "×" +
                std::to_string(source.width()));
  }
  if (static_cast<int>(plan.shapes.size()) != graph.size()) {
    throw Error("the plan was made for another network (" + std::to_string(plan.shapes.size()) +
                " nodes, this one has " + std::to_string(graph.size()) + ")");
  }
}

// The parameters' gradients of a step split over ranks (StepOptions::ranks): what the step adds
// to them is summed over the ranks. The tiled segments' part differs by rank (each ran its own
// tiles); the head's is the same on every rank (each ran it whole), so only rank 0's counts.
// Made before the step defines the gradients it starts from zero: those need no copy of what
// they were (the first slide of a batch), and every sum is made in the gradients themselves.
class SplitGradients {
 public:
  SplitGradients(Graph& graph, Ranks* ranks) {
    if (ranks == nullptr || ranks->size() < 2) return;
    ranks_ = ranks;
    at::NoGradGuard no_grad;
    for (auto& p : graph.module().parameters()) {
      if (!p.requires_grad()) continue;
      grads_.push_back({p, p.grad().defined() ? p.grad().clone() : at::Tensor()});
    }
  }
  // After the head's backward, before the tiled segments': the head's part on ranks but 0.
  void after_head() {
    if (ranks_ == nullptr || ranks_->rank() == 0) return;
    at::NoGradGuard no_grad;
    for (auto& [p, before] : grads_) {
      if (before.defined()) {
        p.mutable_grad().copy_(before);
      } else {
        p.mutable_grad().zero_();
      }
    }
  }
  // After the step: each gradient is what it was plus the sum over ranks of what each added.
  // Returns the bytes summed.
  int64_t sum() {
    if (ranks_ == nullptr) return 0;
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> added;
    int64_t bytes = 0;
    for (auto& [p, before] : grads_) {
      if (before.defined()) p.mutable_grad().sub_(before);
      added.push_back(p.grad());
      bytes += static_cast<int64_t>(added.back().nbytes());
    }
    ranks_->allreduce_sum(added);
    for (auto& [p, before] : grads_) {
      if (before.defined()) p.mutable_grad().add_(before);
    }
    return bytes;
  }

 private:
  Ranks* ranks_ = nullptr;
  // Each parameter, its gradient before the step (undefined: none, so zeros).
  std::vector<std::pair<at::Tensor, at::Tensor>> grads_;
};

}  // namespace

StepResult train_step(Graph& graph, const Plan& plan, TileSource& source, const at::Tensor& target,
                      const LossFn& loss_fn, const StepOptions& options) {
  check_plan(graph, plan, source);
  StepResult result;
  result.predicted = plan.predicted;
  const at::TensorOptions compute = compute_options(graph, source);
  const c10::Device device = compute.device();
  const MemoryReading at_start = memory_reading(device);
  reset_memory_peak(device);
  const PrecisionScope precision(device, options.precision);
  const DropoutScope dropout(options.dropout_seed);
  const auto t0 = Clock::now();

  if (plan.strategy == Strategy::kNone || plan.segments.empty()) {
    at::Tensor image = read_whole(source, compute);
    if (options.input_gradient) image = image.detach().requires_grad_(true);
    const at::Tensor logits = run_from(graph, 0, image, /*training=*/true);
    const at::Tensor loss = loss_fn(logits, target);
    result.forward_ms = ms_since(t0);
    const auto t1 = Clock::now();
    loss.backward();
    result.backward_ms = ms_since(t1);
    result.loss = loss.detach();
    result.logits = logits.detach();
    if (options.input_gradient) result.input_grad = image.grad();
  } else {
    Step step(graph, plan, source, options, /*training=*/true);
    // Every parameter's gradient defined before the first tile's backward: AccumulateGrad would
    // otherwise adopt that tile's incoming gradient as .grad, and for a one-pixel tile a frozen
    // batch norm's bias gradient is a view of a buffer autograd later changes in place (found
    // by `tessel gradcheck --model resnet18 --tile 1`: 0.94 relative error). Plain autograd
    // defines a gradient for every parameter the step uses, so no value changes.
    SplitGradients split(graph, options.ranks);
    for (auto& p : graph.module().parameters()) {
      if (p.requires_grad() && !p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    }
    const at::Tensor head_in = step.forward().detach().requires_grad_(true);
    result.offload_forward_wait_ms = step.store_stats().wait_ms;
    const at::Tensor logits = run_from(graph, plan.tail_input, head_in, /*training=*/true);
    const at::Tensor loss = loss_fn(logits, target);
    result.forward_ms = ms_since(t0);
    const auto t1 = Clock::now();
    loss.backward();
    at::Tensor grad = head_in.grad();
    if (!grad.defined()) grad = at::zeros_like(head_in);
    split.after_head();
    result.input_grad = step.backward(grad);
    const int64_t summed_grads = split.sum();
    if (!options.input_gradient) result.input_grad = at::Tensor();
    inject_nan(graph, options.inject);
    result.backward_ms = ms_since(t1);
    result.loss = loss.detach();
    result.logits = logits.detach();
    result.forward_tiles = step.forward_tiles;
    result.backward_tiles = step.backward_tiles;
    result.glass_forward_tiles = step.glass_forward_tiles;
    result.glass_backward_tiles = step.glass_backward_tiles;
    result.glass_filled = step.glass_filled;
    result.summed_bytes = step.summed_bytes + summed_grads;
    result.offload = step.store_stats();
  }
  const MemoryReading at_end = memory_reading(device);
  if (at_end.peak >= 0) result.measured_peak_bytes = at_end.peak - at_start.live;
  if (at_end.peak_reserved >= 0) {
    result.measured_peak_reserved_bytes = at_end.peak_reserved - at_start.reserved;
  }
  const MemoryBreakdown& p = plan.predicted;
  spdlog::debug(
      "step ({}): loss {:.6g}, {:.0f} ms forward + {:.0f} ms backward, {}/{} tiles; peak "
      "predicted {} (gradients + checkpoints + tile + head), measured {}",
      to_string(plan.strategy), result.loss.item<double>(), result.forward_ms, result.backward_ms,
      result.forward_tiles, result.backward_tiles, format_bytes(p.step()),
      result.measured_peak_bytes < 0 ? "n/a (no tracker)"
                                     : format_bytes(result.measured_peak_bytes));
  return result;
}

at::Tensor infer(Graph& graph, const Plan& plan, TileSource& source, const StepOptions& options) {
  check_plan(graph, plan, source);
  at::NoGradGuard no_grad;
  const at::TensorOptions compute = compute_options(graph, source);
  const PrecisionScope precision(compute.device(), options.precision);
  if (plan.strategy == Strategy::kNone || plan.segments.empty()) {
    return run_from(graph, 0, read_whole(source, compute), /*training=*/false);
  }
  Step step(graph, plan, source, options, /*training=*/false);
  return run_from(graph, plan.tail_input, step.forward(), /*training=*/false);
}

}  // namespace tessel::core
