#include "core/exec/barrier.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>

#include <string>

#include "core/error.h"

namespace tessel::core {

namespace {

at::Tensor param(const Node& n, const char* name) {
  auto* p = n.layer->named_parameters(true).find(name);
  return p ? *p : at::Tensor();
}

at::Tensor buffer(const Node& n, const char* name) { return n.layer->named_buffers(false)[name]; }

at::Tensor per_channel(const at::Tensor& v) { return v.view({1, -1, 1, 1}); }

at::Tensor activation(Pointwise op, const std::array<double, 2>& coeff, const at::Tensor& x) {
  switch (op) {
    case Pointwise::kRelu:
      return at::relu(x);
    case Pointwise::kSilu:
      return at::silu(x);
    case Pointwise::kSigmoid:
      return at::sigmoid(x);
    case Pointwise::kHardSigmoid:
      return at::clamp(at::mul(x, coeff[0]).add_(coeff[1]), 0.0, 1.0);
    default:
      throw Error("internal: squeeze-and-excitation activation");
  }
}

// Squeeze-and-excitation's gate on the channel means (1×C×1×1): the op's only parameters.
at::Tensor gate(const Node& n, const at::Tensor& squeezed) {
  const SqueezeSpec& se = *n.squeeze;
  at::Tensor h = at::conv2d(squeezed, param(n, "fc1.weight"), param(n, "fc1.bias"));
  h = activation(se.activation, {}, h);
  h = at::conv2d(h, param(n, "fc2.weight"), param(n, "fc2.bias"));
  return activation(se.gate, se.gate_coeff, h);
}

// The group of each channel, for per-group float64 vectors expanded to 1×C×1×1.
at::Tensor expand_groups(const at::Tensor& per_group, int64_t channels,
                         const at::TensorOptions& options) {
  const int64_t groups = per_group.size(0);
  return per_channel(per_group.repeat_interleave(channels / groups)).to(options);
}

}  // namespace

bool needs_statistics(const Node& node, bool training) {
  return node.is_barrier() && (node.barrier != BarrierOp::kBatchNorm || training);
}

at::Tensor batch_norm_eval(const Node& n, const at::Tensor& x) {
  const at::Tensor scale = param(n, "weight") * at::rsqrt(buffer(n, "running_var") + n.eps);
  const at::Tensor shift = param(n, "bias") - buffer(n, "running_mean") * scale;
  return at::mul(x, per_channel(scale)).add_(per_channel(shift));
}

at::Tensor barrier_plain(const Node& n, const at::Tensor& x, bool training, bool update_running) {
  switch (n.barrier) {
    case BarrierOp::kBatchNorm:
      if (training && x.size(2) * x.size(3) < 2) {
        throw Error(n.name + ": batch norm in training needs more than one position per channel (" +
                    "its input is " + std::to_string(x.size(2)) + "×" + std::to_string(x.size(3)) +
                    ")");
      }
      if (training && !update_running) {
        return at::batch_norm(x, param(n, "weight"), param(n, "bias"), {}, {}, true, n.momentum,
                              n.eps, true);
      }
      return at::batch_norm(x, param(n, "weight"), param(n, "bias"), buffer(n, "running_mean"),
                            buffer(n, "running_var"), training, n.momentum, n.eps, true);
    case BarrierOp::kGroupNorm:
      return at::group_norm(x, n.groups, param(n, "weight"), param(n, "bias"), n.eps);
    case BarrierOp::kSqueezeExcite:
      return x * gate(n, x.mean({2, 3}, /*keepdim=*/true));
  }
  throw Error(n.name + ": unknown barrier");
}

BarrierState::BarrierState(const Node& barrier, const at::TensorOptions& options, Ranks* ranks)
    : node_(barrier),
      options_(options),
      ranks_(ranks != nullptr && ranks->size() > 1 ? ranks : nullptr) {
  const int64_t c = barrier.channels;
  groups_ = barrier.barrier == BarrierOp::kGroupNorm ? barrier.groups : c;
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(options.device());
  mean64_ = at::zeros({groups_}, f64);
  m2_ = at::zeros({groups_}, f64);
  sum_a_ = at::zeros({c}, f64);
  sum_b_ = at::zeros({c}, f64);
}

void BarrierState::add_input(const at::Tensor& x) {
  if (x.numel() == 0) return;
  at::NoGradGuard no_grad;
  if (node_.barrier == BarrierOp::kSqueezeExcite) {
    mean64_ += x.sum({0, 2, 3}).to(at::kDouble);
    count_ += x.size(2) * x.size(3);
    return;
  }
  // Chan et al.'s merge of the tile's mean and sum of squared deviations (computed in the
  // tile's dtype) into the running ones, in float64, the mean kept as a sum: a constant image's
  // variance is 0, or the rounding noise LibTorch's own kernel leaves over it. Per channel:
  // LibTorch's own batch-norm statistics kernel (the mean, then the centred sum of squares,
  // vectorised), as plain train-mode batch norm computes them (var_mean's Welford loop took 7%
  // of a resnet50 step, 7–15× longer: bench/NOTES.md, session 20); per group, on a 5-d view.
  const bool per_channel_groups = groups_ == x.size(1);
  const auto [mean, var] =
      per_channel_groups ? at::batch_norm_update_stats(x, std::nullopt, std::nullopt, 0.0) : [&] {
        const auto [v, m] =
            at::var_mean(x.unflatten(1, {groups_, x.size(1) / groups_}), {0, 2, 3, 4}, false);
        return std::make_tuple(m, v);
      }();
  const int64_t n = x.numel() / groups_;
  merge(mean.to(at::kDouble), var.to(at::kDouble) * static_cast<double>(n), n);
}

void BarrierState::merge(const at::Tensor& share_mean, const at::Tensor& share_m2, int64_t n) {
  if (count_ > 0) {
    const at::Tensor delta = share_mean - mean64_ / static_cast<double>(count_);
    m2_ += delta * delta *
           (static_cast<double>(count_) * static_cast<double>(n) / static_cast<double>(count_ + n));
  }
  m2_ += share_m2;
  mean64_ += share_mean * static_cast<double>(n);  // the sum until finish_statistics
  count_ += n;
}

// One all-gather of every rank's count, sums and squared deviations, merged here in rank order
// as tiles are (Chan's pairwise merge): the same on every rank, and one wait where a sum of the
// counts and sums, then of the deviations moved to their mean, took two.
void BarrierState::merge_ranks() {
  const at::Tensor mine =
      at::cat({at::full({1}, static_cast<double>(count_), mean64_.options()), mean64_, m2_});
  std::vector<at::Tensor> all;
  for (int q = 0; q < ranks_->size(); ++q) all.push_back(at::empty_like(mine));
  ranks_->allgather(mine, all);
  count_ = 0;
  mean64_.zero_();
  m2_.zero_();
  for (const at::Tensor& theirs : all) {
    const auto n = static_cast<int64_t>(theirs[0].item<double>());
    if (n == 0) continue;
    const at::Tensor sum = theirs.narrow(0, 1, groups_);
    if (node_.barrier == BarrierOp::kSqueezeExcite) {
      mean64_ += sum;
      count_ += n;
    } else {
      merge(sum / static_cast<double>(n), theirs.narrow(0, 1 + groups_, groups_), n);
    }
  }
}

void BarrierState::add_uniform_input(const at::Tensor& u, int64_t positions) {
  if (positions == 0) return;
  at::NoGradGuard no_grad;
  const at::Tensor v = u.detach().flatten().to(at::kDouble).view({groups_, -1});
  if (node_.barrier == BarrierOp::kSqueezeExcite) {
    mean64_ += v.flatten() * static_cast<double>(positions);
    count_ += positions;
    return;
  }
  // Per group: the channels' values, each at every position.
  const at::Tensor mean = v.mean(1);
  const at::Tensor m2 = (v - mean.unsqueeze(1)).square().sum(1) * static_cast<double>(positions);
  merge(mean, m2, positions * v.size(1));
}

void BarrierState::finish_statistics(bool update_running) {
  at::NoGradGuard no_grad;
  if (ranks_ != nullptr) merge_ranks();
  const int64_t c = node_.channels;
  if (count_ == 0) throw Error("internal: " + node_.name + " saw no input");
  if (node_.barrier == BarrierOp::kSqueezeExcite) {
    squeezed_ = per_channel(mean64_ / static_cast<double>(count_)).to(options_);
    gate_ = gate(node_, squeezed_);
    return;
  }
  mean64_ /= static_cast<double>(count_);
  const at::Tensor var = m2_ / static_cast<double>(count_);
  mean_ = expand_groups(mean64_, c, options_);
  rstd_ = expand_groups(at::rsqrt(var + node_.eps), c, options_);
  mean_flat_ = mean_.flatten();
  var_flat_ = expand_groups(var, c, options_).flatten();
  if (node_.barrier == BarrierOp::kBatchNorm && update_running) {
    if (count_ < 2) {
      throw Error(node_.name +
                  ": batch norm in training needs more than one position per channel (its "
                  "input is 1×1)");
    }
    at::Tensor running_mean = buffer(node_, "running_mean");
    at::Tensor running_var = buffer(node_, "running_var");
    const double m = node_.momentum;
    const at::Tensor unbiased = var * (static_cast<double>(count_) / (count_ - 1));
    running_mean.mul_(1 - m).add_(mean64_.to(running_mean.scalar_type()), m);
    running_var.mul_(1 - m).add_(unbiased.to(running_var.scalar_type()), m);
  }
}

at::Tensor BarrierState::forward(const at::Tensor& x) const {
  if (node_.barrier == BarrierOp::kSqueezeExcite) return x * gate_;
  if (!mean_.defined()) {
    if (node_.barrier != BarrierOp::kBatchNorm) {
      throw Error("internal: " + node_.name + " runs before its statistic");
    }
    return batch_norm_eval(node_, x);
  }
  // LibTorch's batch norm in evaluation form, the statistic as its "running" mean and variance
  // (constants to autograd): one fused kernel each way, one pass over memory (a per-channel
  // mul and add were two, measured: bench/NOTES.md session 20), x̂ computed as plain LibTorch
  // computes it (γ's gradient is Σ dy·x̂, exactly 0 over a constant image).
  return at::batch_norm(x, param(node_, "weight"), param(node_, "bias"), mean_flat_, var_flat_,
                        /*training=*/false, 0.0, node_.eps, true);
}

void BarrierState::add_output_grad(const at::Tensor& x, const at::Tensor& dy) {
  if (dy.numel() == 0) return;
  at::NoGradGuard no_grad;
  if (node_.barrier == BarrierOp::kSqueezeExcite) {
    sum_a_ += (dy * x).sum({0, 2, 3}).to(at::kDouble);
    return;
  }
  // Σ dy and Σ dy·x̂ per channel in one fused pass: LibTorch's batch norm backward in
  // evaluation form (the statistic as its running mean and variance) computes exactly these as
  // the bias's and weight's gradients; scaled by γ, they are Σ dz and Σ dz·x̂ (dz = γ·dy).
  // The saved statistics are empty, not undefined: CUDA's kernel (unlike the CPU's) asserts they
  // are defined when it skips the input gradient, and takes empty ones as "use the running".
  const at::Tensor none = at::empty({0}, mean_flat_.options());
  const at::Tensor ones = at::ones_like(mean_flat_);  // γ: its gradients do not depend on it
  const auto grads =
      at::native_batch_norm_backward(dy, x, ones, mean_flat_, var_flat_,
                                     /*save_mean=*/none, /*save_invstd=*/none,
                                     /*train=*/false, node_.eps, {false, true, true});
  const at::Tensor gamma = param(node_, "weight");
  sum_a_ += (std::get<2>(grads) * gamma).to(at::kDouble);
  sum_b_ += (std::get<1>(grads) * gamma).to(at::kDouble);
}

void BarrierState::finish_sums() {
  const int64_t c = node_.channels;
  if (ranks_ != nullptr) {
    at::NoGradGuard no_grad;
    ranks_->allreduce_sum({sum_a_, sum_b_});
  }
  if (node_.barrier == BarrierOp::kSqueezeExcite) {
    // The gate's own backward on the C-vector: its parameters' gradients and ∂L/∂mean. Split
    // over ranks, every rank has the same sums, and only rank 0 adds to the parameters'
    // gradients (they are summed over the ranks after the step).
    at::AutoGradMode grad_mode(true);
    const at::Tensor squeezed = squeezed_.detach().requires_grad_(true);
    const at::Tensor g = gate(node_, squeezed);
    const at::Tensor seed = per_channel(sum_a_).to(g.options());
    if (ranks_ == nullptr || ranks_->rank() == 0) {
      torch::autograd::backward({g}, {seed});
      coeff_a_ = (squeezed.grad() / static_cast<double>(count_)).detach();
    } else {
      coeff_a_ = (torch::autograd::grad({g}, {squeezed}, {seed})[0] / static_cast<double>(count_))
                     .detach();
    }
    sums_done_ = true;
    return;
  }
  at::NoGradGuard no_grad;
  const at::Tensor a = sum_a_.view({groups_, -1}).sum(1);
  const at::Tensor b = sum_b_.view({groups_, -1}).sum(1);
  const at::Tensor var = m2_ / static_cast<double>(count_);
  const at::Tensor rstd = at::rsqrt(var + node_.eps);
  const auto m = static_cast<double>(count_);
  coeff_a_ = expand_groups(-rstd * a / m, c, options_);
  coeff_b_ = expand_groups(-rstd * rstd * b / (2 * m), c, options_);
  sums_done_ = true;
}

at::Tensor BarrierState::correction_gradient(const at::Tensor& x) const {
  if (!sums_done_) throw Error("internal: " + node_.name + "'s correction before its sums");
  at::NoGradGuard no_grad;
  if (node_.barrier == BarrierOp::kSqueezeExcite) return coeff_a_.expand_as(x);
  return (x - mean_).mul_(coeff_b_ * 2).add_(coeff_a_);
}

namespace {
// A zero whose gradient with respect to x is a + 2b·(x − μ) (`a_only`, squeeze-and-excitation:
// a alone). As a function of its own it saves only x, which the
// barrier's tile form holds anyway; written as (x·a + (x − μ)²·b).sum() autograd kept the
// centred copy and its products, three or four tiles beyond what the planner counts (a rounds
// plan's backward measured 11% above its prediction, bench/NOTES.md session 34).
struct Correction : torch::autograd::Function<Correction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& a, const at::Tensor& b, const at::Tensor& mean,
                            bool a_only) {
    ctx->save_for_backward({x, a, b, mean});
    ctx->saved_data["a_only"] = a_only;
    return at::zeros({}, x.options());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &a = saved[1], &b = saved[2], &mean = saved[3];
    at::Tensor g = ctx->saved_data["a_only"].toBool() ? a.expand_as(x).clone()
                                                      : (x - mean).mul_(b * 2).add_(a);
    if (grads[0].defined()) g.mul_(grads[0]);
    return {g.to(x.scalar_type()), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
}  // namespace

at::Tensor BarrierState::correction(const at::Tensor& x) const {
  if (!sums_done_) throw Error("internal: " + node_.name + "'s correction before its sums");
  if (node_.barrier == BarrierOp::kSqueezeExcite) {
    return Correction::apply(x, coeff_a_, coeff_a_, coeff_a_, true);
  }
  return Correction::apply(x, coeff_a_, coeff_b_, mean_, false);
}

void share_running_statistics(const Graph& graph, NodeId input, NodeId output, bool ran,
                              Ranks& ranks) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> buffers, shared;
  for (NodeId v = input + 1; v <= output; ++v) {
    const Node& n = graph.node(v);
    if (!n.is_barrier() || n.barrier != BarrierOp::kBatchNorm) continue;
    for (const char* name : {"running_mean", "running_var"}) {
      const at::Tensor b = buffer(n, name);
      buffers.push_back(b);
      shared.push_back(ran ? b.clone() : at::zeros_like(b));
    }
  }
  if (shared.empty()) return;
  ranks.allreduce_sum(shared);
  // Not a change autograd sees: the one rank's kept graph saved these buffers (batch norm's
  // backward in training reads only its batch statistics), and its values stay as they are.
  for (size_t i = 0; i < buffers.size(); ++i) buffers[i].variable_data().copy_(shared[i]);
}

}  // namespace tessel::core
