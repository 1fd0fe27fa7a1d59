// A node's tensor-free facts: its windows per axis, how it prints, whether it allocates or
// runs in place, the input region an output region needs. Shared by the planner (compiled
// without LibTorch, like this file) and the executor.
#include <array>
#include <limits>
#include <string>

#include "core/graph/graph.h"

namespace tessel::core {

AxisOp Node::axis_op(int axis) const {
  const auto a = static_cast<size_t>(axis);
  switch (kind) {
    case OpKind::kConv:
      return {conv->kernel_size[a], conv->stride_[a], conv->padding_[a], conv->dilation_[a], false,
              conv->padding_end_[a]};
    case OpKind::kMaxPool:
    case OpKind::kAvgPool:
      return {pool->kernel_size[a], pool->stride_[a], pool->padding_[a],
              pool->dilation_[a],   pool->ceil_mode_, pool->padding_end_[a]};
    default:
      return {};
  }
}

double Node::pad_value() const {
  return kind == OpKind::kMaxPool ? -std::numeric_limits<double>::infinity() : 0.0;
}

bool Node::symmetric_padding() const {
  if (conv) return conv->padding_ == conv->padding_end_;
  if (pool) return pool->padding_ == pool->padding_end_;
  return true;
}

std::string to_string(const Shape& s) {
  return std::to_string(s.channels) + "×" + std::to_string(s.height) + "×" +
         std::to_string(s.width);
}

std::string to_string(OpKind kind) {
  switch (kind) {
    case OpKind::kInput:
      return "input";
    case OpKind::kConv:
      return "conv";
    case OpKind::kMaxPool:
      return "maxpool";
    case OpKind::kAvgPool:
      return "avgpool";
    case OpKind::kPointwise:
      return "pointwise";
    case OpKind::kBinary:
      return "binary";
    case OpKind::kConcat:
      return "concat";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kGlobalAvgPool:
      return "global-avgpool";
    case OpKind::kGlobalMaxPool:
      return "global-maxpool";
    case OpKind::kAttentionPool:
      return "attention-pool";
    case OpKind::kFlatten:
      return "flatten";
    case OpKind::kLinear:
      return "linear";
    case OpKind::kDropout:
      return "dropout";
  }
  return "?";
}

namespace {

std::string pair_str(const std::array<int64_t, 2>& v) {
  return v[0] == v[1] ? std::to_string(v[0]) : std::to_string(v[0]) + "x" + std::to_string(v[1]);
}

std::string window_str(const std::array<int64_t, 2>& k, const std::array<int64_t, 2>& s,
                       const std::array<int64_t, 2>& p, const std::array<int64_t, 2>& pe,
                       const std::array<int64_t, 2>& d) {
  std::string out = std::to_string(k[0]) + "x" + std::to_string(k[1]);
  if (s != std::array<int64_t, 2>{1, 1}) out += "/s" + pair_str(s);
  if (p != pe) {
    out += "/p" + std::to_string(p[0]) + "," + std::to_string(p[1]) + "," + std::to_string(pe[0]) +
           "," + std::to_string(pe[1]);
  } else if (p != std::array<int64_t, 2>{0, 0}) {
    out += "/p" + pair_str(p);
  }
  if (d != std::array<int64_t, 2>{1, 1}) out += "/d" + pair_str(d);
  return out;
}

std::string pointwise_name(const Node& n) {
  switch (n.pointwise) {
    case Pointwise::kIdentity:
      return "identity";
    case Pointwise::kRelu:
      return "relu";
    case Pointwise::kLeakyRelu:
      return "leaky-relu";
    case Pointwise::kGelu:
      return "gelu";
    case Pointwise::kSigmoid:
      return "sigmoid";
    case Pointwise::kTanh:
      return "tanh";
    case Pointwise::kAffine:
      return "frozen-bn";
    case Pointwise::kGeluTanh:
      return "gelu-tanh";
    case Pointwise::kSilu:
      return "silu";
    case Pointwise::kHardSigmoid:
      return "hard-sigmoid";
    case Pointwise::kHardSwish:
      return "hard-swish";
    case Pointwise::kClamp:
      return "clamp";
    case Pointwise::kErf:
      return "erf";
    case Pointwise::kScalar:
      return "scalar";
    case Pointwise::kScale:
      return "scale";
    case Pointwise::kChannelNorm:
      return "channel-norm";
    case Pointwise::kDropout:
      return "dropout p=" + std::to_string(n.dropout_p).substr(0, 4);
  }
  return "pointwise";
}

std::string barrier_name(const Node& n) {
  switch (n.barrier) {
    case BarrierOp::kBatchNorm:
      return "batch-norm";
    case BarrierOp::kGroupNorm:
      return "group-norm/" + std::to_string(n.groups);
    case BarrierOp::kSqueezeExcite:
      return "squeeze-excite " + std::to_string(n.channels) + "→" +
             std::to_string(n.squeeze->squeeze_channels);
  }
  return "barrier";
}

// A conv or a pool: its window, and what else sets it apart.
std::string window_name(const Node& n) {
  if (n.kind == OpKind::kConv) {
    const ConvSpec& c = *n.conv;
    std::string out =
        "conv" + window_str(c.kernel_size, c.stride_, c.padding_, c.padding_end_, c.dilation_) +
        " " + std::to_string(c.in_channels) + "→" + std::to_string(c.out_channels);
    if (c.groups_ != 1) out += " g" + std::to_string(c.groups_);
    if (!c.bias_) out += " nobias";
    return out;
  }
  const PoolSpec& p = *n.pool;
  std::string out = to_string(n.kind) +
                    window_str(p.kernel_size, p.stride_, p.padding_, p.padding_end_, p.dilation_);
  if (p.ceil_mode_) out += " ceil";
  if (n.kind == OpKind::kAvgPool && !p.count_include_pad_) out += " excl-pad";
  return out;
}

}  // namespace

std::string describe(const Node& n) {
  switch (n.kind) {
    case OpKind::kConv:
    case OpKind::kMaxPool:
    case OpKind::kAvgPool:
      return window_name(n);
    case OpKind::kPointwise:
      return pointwise_name(n);
    case OpKind::kBinary: {
      static const char* const kNames[] = {"add", "sub", "mul", "div"};
      return kNames[static_cast<int>(n.binary)];
    }
    case OpKind::kBarrier:
      return barrier_name(n);
    case OpKind::kAttentionPool:
      return "attention-pool ×" + std::to_string(n.branches);
    case OpKind::kLinear:
      return n.groups == 1
                 ? "linear →" + std::to_string(n.channels)
                 : "linear →" + std::to_string(n.channels) + " g" + std::to_string(n.groups);
    case OpKind::kDropout:
      return "dropout p=" + std::to_string(n.dropout_p).substr(0, 4);
    default:
      return to_string(n.kind);
  }
}

bool allocates_output(const Node& node) {
  return node.kind != OpKind::kPointwise || node.pointwise != Pointwise::kIdentity;
}

bool runs_in_place(const Node& node) {
  if (node.kind != OpKind::kPointwise) return false;
  switch (node.pointwise) {
    case Pointwise::kRelu:
    case Pointwise::kLeakyRelu:
    case Pointwise::kSigmoid:
    case Pointwise::kTanh:
    case Pointwise::kAffine:
    case Pointwise::kSilu:
    case Pointwise::kHardSwish:
    case Pointwise::kHardSigmoid:
    case Pointwise::kClamp:
    case Pointwise::kErf:
    case Pointwise::kScalar:
      return true;
    default:
      return false;
  }
}

bool keeps_own_output(const Node& node) {
  return node.kind == OpKind::kPointwise &&
         (node.pointwise == Pointwise::kRelu || node.pointwise == Pointwise::kSigmoid ||
          node.pointwise == Pointwise::kTanh);
}

Region needed_input(const Node& node, const Region& out, const Shape& in) {
  if (out.empty()) return {};
  const Region window{input_window(node.axis_op(0), out.y), input_window(node.axis_op(1), out.x)};
  return intersect(window, Region{{0, in.height}, {0, in.width}});
}

}  // namespace tessel::core
