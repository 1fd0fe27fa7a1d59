#include "core/exec/tile_ops.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/module.h>

#include <array>
#include <utility>

#include "core/error.h"
#include "core/exec/attention.h"
#include "core/exec/barrier.h"
#include "core/exec/dropout.h"

namespace tessel::core {

namespace {

at::IntArrayRef dims(const std::array<int64_t, 2>& a) { return {a.data(), a.size()}; }

at::Tensor param(const Node& n, const char* name) {
  auto* p = n.layer->named_parameters(false).find(name);
  return p ? *p : at::Tensor();
}

at::Tensor buffer(const Node& n, const char* name) { return n.layer->named_buffers(false)[name]; }

// Frozen batch norm as a per-channel affine (DESIGN.md "Batch norm"): x · scale + shift, with
// the shift added in place so that the op allocates one output, not a product and a sum (which
// held three activations at once: measured 1.66 GiB against 1.28 predicted, darknet19 2048²).
// Autograd allows it: mul's backward keeps its inputs, not its output.
std::pair<at::Tensor, at::Tensor> affine_terms(const Node& n) {
  const at::Tensor scale = param(n, "weight") * at::rsqrt(buffer(n, "running_var") + n.eps);
  const at::Tensor shift = param(n, "bias") - buffer(n, "running_mean") * scale;
  return {scale.view({1, -1, 1, 1}), shift.view({1, -1, 1, 1})};
}

at::Tensor affine(const Node& n, const at::Tensor& x) {
  const auto [scale, shift] = affine_terms(n);
  return at::mul(x, scale).add_(shift);
}

// x · weight (+ bias) per channel.
at::Tensor scale(const Node& n, const at::Tensor& x) {
  const at::Tensor y = at::mul(x, param(n, "weight").view({1, -1, 1, 1}));
  const at::Tensor bias = param(n, "bias");
  return bias.defined() ? y.add_(bias.view({1, -1, 1, 1})) : y;
}

// LayerNorm over each position's channels, as ConvNeXt's LayerNorm2d computes it (channels
// last, normalised, back): the same arithmetic as PyTorch's, so an imported network matches.
at::Tensor channel_norm(const Node& n, const at::Tensor& x) {
  const at::Tensor y = at::layer_norm(x.permute({0, 2, 3, 1}), {x.size(1)}, param(n, "weight"),
                                      param(n, "bias"), n.eps);
  return y.permute({0, 3, 1, 2}).contiguous();
}

// `region`: the part of the whole activation `x` holds (dropout's mask depends on it).
at::Tensor pointwise(const Node& n, const at::Tensor& x, const Region& region) {
  switch (n.pointwise) {
    case Pointwise::kIdentity:
      return x;
    case Pointwise::kRelu:
      return at::relu(x);
    case Pointwise::kLeakyRelu:
      return at::leaky_relu(x, n.slope);
    case Pointwise::kGelu:
      return at::gelu(x);
    case Pointwise::kSigmoid:
      return at::sigmoid(x);
    case Pointwise::kTanh:
      return at::tanh(x);
    case Pointwise::kAffine:
      return affine(n, x);
    case Pointwise::kGeluTanh:
      return at::gelu(x, "tanh");
    case Pointwise::kSilu:
      return at::silu(x);
    case Pointwise::kHardSigmoid:
      return at::clamp(at::mul(x, n.coeff[0]).add_(n.coeff[1]), 0.0, 1.0);
    case Pointwise::kHardSwish:
      return at::hardswish(x);
    case Pointwise::kClamp:
      return at::clamp(x, n.coeff[0], n.coeff[1]);
    case Pointwise::kErf:
      return at::erf(x);
    case Pointwise::kScalar:
      return at::mul(x, n.coeff[0]).add_(n.coeff[1]);
    case Pointwise::kScale:
      return scale(n, x);
    case Pointwise::kChannelNorm:
      return channel_norm(n, x);
    case Pointwise::kDropout:
      return spatial_dropout(n, x, region);
  }
  throw Error(n.name + ": unknown pointwise op");
}

// In place when the caller owns `x` and nothing else reads it (the no-grad forward).
at::Tensor pointwise_inplace(const Node& n, at::Tensor x, const Region& region) {
  switch (n.pointwise) {
    case Pointwise::kRelu:
      return x.relu_();
    case Pointwise::kLeakyRelu:
      return at::leaky_relu_(x, n.slope);
    case Pointwise::kSigmoid:
      return x.sigmoid_();
    case Pointwise::kTanh:
      return x.tanh_();
    case Pointwise::kAffine: {
      const auto [scale, shift] = affine_terms(n);
      return x.mul_(scale).add_(shift);
    }
    case Pointwise::kSilu:
      return at::silu_(x);
    case Pointwise::kHardSwish:
      return at::hardswish_(x);
    case Pointwise::kHardSigmoid:
      return x.mul_(n.coeff[0]).add_(n.coeff[1]).clamp_(0.0, 1.0);
    case Pointwise::kClamp:
      return x.clamp_(n.coeff[0], n.coeff[1]);
    case Pointwise::kErf:
      return x.erf_();
    case Pointwise::kScalar:
      return x.mul_(n.coeff[0]).add_(n.coeff[1]);
    default:
      return pointwise(n, x, region);
  }
}

at::Tensor binary(const Node& n, const at::Tensor& a, const at::Tensor& b) {
  switch (n.binary) {
    case Binary::kAdd:
      return a + b;
    case Binary::kSub:
      return a - b;
    case Binary::kMul:
      return a * b;
    case Binary::kDiv:
      return a / b;
  }
  throw Error(n.name + ": unknown binary op");
}

// Per axis, the divisor of each global output index of an avg pool over an input of `in`
// positions (DESIGN.md rule 3): the whole image's count, never the tile's.
at::Tensor avg_counts(const AxisOp& op, const PoolSpec& spec, Window out, int64_t in,
                      const at::TensorOptions& options) {
  std::vector<double> counts;
  counts.reserve(static_cast<size_t>(out.size()));
  for (int64_t o = out.begin; o < out.end; ++o) {
    const int64_t start = o * op.stride - op.padding;
    const int64_t end = std::min(start + op.kernel, in + op.end_padding());
    counts.push_back(static_cast<double>(
        spec.count_include_pad_ ? end - start : std::min(end, in) - std::max<int64_t>(start, 0)));
  }
  return at::tensor(counts, at::TensorOptions().dtype(at::kDouble)).to(options);
}

}  // namespace

namespace {

// A sliding-window op whose two sides pad differently, on a whole activation: the part both
// sides share is the op's own padding, the rest is padded explicitly with the op's pad value.
// Average pools divide by the count of real positions (count_include_pad false) or of real and
// padded ones (true), as ONNX's AveragePool does; ceil mode is refused with such padding.
at::Tensor forward_plain_asymmetric(const Node& n, const at::Tensor& x) {
  const AxisOp ay = n.axis_op(0), ax = n.axis_op(1);
  const std::array<int64_t, 2> own{std::min(ay.padding, ay.end_padding()),
                                   std::min(ax.padding, ax.end_padding())};
  const std::vector<int64_t> extra{ax.padding - own[1], ax.end_padding() - own[1],
                                   ay.padding - own[0], ay.end_padding() - own[0]};
  const at::Tensor padded = at::constant_pad_nd(x, extra, n.pad_value());
  if (n.kind == OpKind::kConv) {
    const ConvSpec& c = *n.conv;
    return at::conv2d(padded, param(n, "weight"), param(n, "bias"), dims(c.stride_), dims(own),
                      dims(c.dilation_), c.groups_);
  }
  const PoolSpec& p = *n.pool;
  if (n.kind == OpKind::kMaxPool) {
    return at::max_pool2d(padded, dims(p.kernel_size), dims(p.stride_), dims(own),
                          dims(p.dilation_), false);
  }
  const at::Tensor sums = at::avg_pool2d(padded, dims(p.kernel_size), dims(p.stride_), dims(own),
                                         false, true, c10::optional<int64_t>(1));
  if (p.divisor_override_ > 0) return sums / static_cast<double>(p.divisor_override_);
  // The divisor: window sums of a mask that is 1 where a position counts.
  at::Tensor mask = at::ones({1, 1, x.size(2), x.size(3)}, x.options());
  mask = at::constant_pad_nd(mask, extra, p.count_include_pad_ ? 1.0 : 0.0);
  if (p.count_include_pad_) mask = at::constant_pad_nd(mask, {own[1], own[1], own[0], own[0]}, 1);
  const at::Tensor counts = at::avg_pool2d(mask, dims(p.kernel_size), dims(p.stride_),
                                           p.count_include_pad_ ? at::IntArrayRef{0, 0} : dims(own),
                                           false, true, c10::optional<int64_t>(1));
  return sums / counts;
}

}  // namespace

at::Tensor forward_plain(const Node& n, const std::vector<at::Tensor>& in, bool training) {
  if ((n.conv || n.pool) && !n.symmetric_padding()) return forward_plain_asymmetric(n, in[0]);
  switch (n.kind) {
    case OpKind::kInput:
      return in.at(0);
    case OpKind::kConv: {
      const ConvSpec& c = *n.conv;
      return at::conv2d(in[0], param(n, "weight"), param(n, "bias"), dims(c.stride_),
                        dims(c.padding_), dims(c.dilation_), c.groups_);
    }
    case OpKind::kMaxPool: {
      const PoolSpec& p = *n.pool;
      return at::max_pool2d(in[0], dims(p.kernel_size), dims(p.stride_), dims(p.padding_),
                            dims(p.dilation_), p.ceil_mode_);
    }
    case OpKind::kAvgPool: {
      const PoolSpec& p = *n.pool;
      return at::avg_pool2d(
          in[0], dims(p.kernel_size), dims(p.stride_), dims(p.padding_), p.ceil_mode_,
          p.count_include_pad_,
          p.divisor_override_ > 0 ? c10::optional<int64_t>(p.divisor_override_) : c10::nullopt);
    }
    case OpKind::kPointwise:
      return pointwise(n, in[0], {{0, in[0].size(2)}, {0, in[0].size(3)}});
    case OpKind::kBinary:
      return binary(n, in[0], in[1]);
    case OpKind::kConcat:
      return at::cat(in, 1);
    case OpKind::kBarrier:
      return barrier_plain(n, in[0], training);
    case OpKind::kGlobalAvgPool:
      return in[0].mean({2, 3});
    case OpKind::kGlobalMaxPool:
      // First maximum in row-major order gets the gradient, as nn.AdaptiveMaxPool2d(1).
      return std::get<0>(at::adaptive_max_pool2d(in[0], {1, 1})).flatten(1);
    case OpKind::kFlatten:
      return in[0].flatten(1);
    case OpKind::kAttentionPool:
      return attention_pool_plain(n, in[0]);
    case OpKind::kLinear: {
      if (n.groups == 1) return at::linear(in[0], param(n, "weight"), param(n, "bias"));
      // Group g's outputs from group g's inputs: N×G×(in/G) against G×(out/G)×(in/G).
      const at::Tensor w = param(n, "weight");
      const int64_t g = n.groups;
      const at::Tensor x = in[0].reshape({in[0].size(0), g, -1});
      const at::Tensor y = at::einsum("ngc,goc->ngo", {x, w.reshape({g, -1, w.size(1)})});
      return y.reshape({in[0].size(0), -1}) + param(n, "bias");
    }
    case OpKind::kDropout:
      return at::dropout(in[0], n.dropout_p, at::GradMode::is_enabled());
  }
  throw Error(n.name + ": unknown op");
}

at::Tensor forward_tile(const Node& n, const Region& out, const std::vector<TileTensor>& in,
                        const std::vector<Shape>& shapes, bool may_overwrite_input) {
  switch (n.kind) {
    case OpKind::kPointwise:
      return may_overwrite_input && !at::GradMode::is_enabled()
                 ? pointwise_inplace(n, crop(in[0], out), out)
                 : pointwise(n, crop(in[0], out), out);
    case OpKind::kBinary:
      return binary(n, crop(in[0], out), crop(in[1], out));
    case OpKind::kConcat: {
      std::vector<at::Tensor> parts;
      parts.reserve(in.size());
      for (const TileTensor& t : in) parts.push_back(crop(t, out));
      return at::cat(parts, 1);
    }
    case OpKind::kConv:
    case OpKind::kMaxPool:
    case OpKind::kAvgPool:
      break;
    default:
      throw Error(n.name + ": " + to_string(n.kind) + " cannot run on a tile");
  }

  // Sliding-window ops: the unclipped window, what of it exists, and explicit border padding.
  const Shape& shape = shapes.at(0);
  const AxisOp ay = n.axis_op(0), ax = n.axis_op(1);
  const Region window{input_window(ay, out.y), input_window(ax, out.x)};
  const Region inside = intersect(window, Region{{0, shape.height}, {0, shape.width}});
  at::Tensor x;
  // Padding the op does itself: the part that is the same on both sides of an axis (an
  // explicit pad is a copy). The rest is padded explicitly.
  std::array<int64_t, 2> own{0, 0};
  if (inside.empty()) {
    // Rule 4: pure padding. The consumer sees its pad value.
    const at::Tensor& like = in[0].tensor;
    x = at::full({like.size(0), like.size(1), window.y.size(), window.x.size()}, n.pad_value(),
                 like.options());
  } else {
    x = crop(in[0], inside);
    const int64_t top = inside.y.begin - window.y.begin, bottom = window.y.end - inside.y.end;
    const int64_t left = inside.x.begin - window.x.begin, right = window.x.end - inside.x.end;
    own = {std::min(top, bottom), std::min(left, right)};
    if (top != bottom || left != right) {
      x = at::constant_pad_nd(x, {left - own[1], right - own[1], top - own[0], bottom - own[0]},
                              n.pad_value());
    }
  }

  if (n.kind == OpKind::kConv) {
    const ConvSpec& c = *n.conv;
    return at::conv2d(x, param(n, "weight"), param(n, "bias"), dims(c.stride_), dims(own),
                      dims(c.dilation_), c.groups_);
  }
  // Pools pad with -inf (max) or 0 (avg sums) themselves, as the explicit pad would; `own` never
  // exceeds the declared padding (the top/left side never does), so LibTorch accepts it.
  const PoolSpec& p = *n.pool;
  if (n.kind == OpKind::kMaxPool) {
    return at::max_pool2d(x, dims(p.kernel_size), dims(p.stride_), dims(own), dims(p.dilation_),
                          false);
  }
  // Rule 3: window sums on the zero-padded tile, divided by the whole image's divisors.
  const at::Tensor sums = at::avg_pool2d(x, dims(p.kernel_size), dims(p.stride_), dims(own), false,
                                         true, c10::optional<int64_t>(1));
  if (p.divisor_override_ > 0) return sums / static_cast<double>(p.divisor_override_);
  const at::Tensor cy = avg_counts(ay, p, out.y, shape.height, sums.options());
  const at::Tensor cx = avg_counts(ax, p, out.x, shape.width, sums.options());
  return sums / (cy.view({-1, 1}) * cx.view({1, -1}));
}

}  // namespace tessel::core
