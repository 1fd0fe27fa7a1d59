#include "core/graph/graph.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <algorithm>

#include "core/error.h"
#include "core/graph/fill.h"

namespace tessel::core {

namespace {

// A norm's per-channel parameters: weight 1, bias 0, and batch norm's running statistics.
std::shared_ptr<torch::nn::Module> norm_layer(const std::string& name, int64_t channels,
                                              bool running_statistics) {
  auto layer = std::make_shared<torch::nn::Module>(name);
  layer->register_parameter("weight", at::ones({channels}));
  layer->register_parameter("bias", at::zeros({channels}));
  if (running_statistics) {
    layer->register_buffer("running_mean", at::zeros({channels}));
    layer->register_buffer("running_var", at::ones({channels}));
  }
  return layer;
}

}  // namespace

Graph::Graph(int64_t in_channels) : module_(std::make_shared<torch::nn::Module>("Graph")) {
  if (in_channels <= 0) throw Error("a network needs at least one input channel");
  Node in;
  in.kind = OpKind::kInput;
  in.name = "input";
  in.channels = in_channels;
  add_node(std::move(in));
}

const Node& Graph::checked(NodeId id, const char* op) const {
  if (id < 0 || id >= size()) {
    throw Error(std::string(op) + ": input node " + std::to_string(id) + " does not exist");
  }
  return nodes_[static_cast<size_t>(id)];
}

std::string Graph::layer_name(const std::string& requested, const char* kind) {
  if (!requested.empty()) {
    if (requested.find('.') != std::string::npos) {
      throw Error("layer name '" + requested + "' has a dot; parameters are '<layer>.weight'");
    }
    if (names_.contains(requested)) throw Error("two layers are named '" + requested + "'");
    return requested;
  }
  // Default names follow the op kind and the order of that kind: conv1, conv2, ..., linear1.
  // Names are only ever added, so the first free number of a kind only grows.
  int& n = first_free_.try_emplace(kind, 1).first->second;
  while (names_.contains(std::string(kind) + std::to_string(n))) ++n;
  return std::string(kind) + std::to_string(n);
}

NodeId Graph::add_node(Node node) {
  node.id = size();
  for (NodeId in : node.inputs) consumers_[static_cast<size_t>(in)].push_back(node.id);
  names_.insert(node.name);
  nodes_.push_back(std::move(node));
  consumers_.emplace_back();
  return nodes_.back().id;
}

NodeId Graph::conv(NodeId x, const ConvSpec& spec, const std::string& name) {
  const Node& in = checked(x, "conv");
  Node n;
  n.kind = OpKind::kConv;
  n.name = layer_name(name, "conv");
  if (!in.spatial()) throw Error(n.name + ": a convolution needs a spatial input");
  if (spec.in_channels != in.channels) {
    throw Error(n.name + ": expects " + std::to_string(spec.in_channels) +
                " input channels but its input has " + std::to_string(in.channels));
  }
  for (size_t a = 0; a < 2; ++a) {
    if (spec.kernel_size[a] < 1 || spec.stride_[a] < 1 || spec.dilation_[a] < 1 ||
        spec.padding_[a] < 0 || spec.padding_end_[a] < 0) {
      throw Error(n.name + ": kernel, stride and dilation must be >= 1 and padding >= 0");
    }
  }
  if (spec.groups_ < 1 || spec.in_channels % spec.groups_ != 0 ||
      spec.out_channels % spec.groups_ != 0 || spec.out_channels < 1) {
    throw Error(n.name + ": groups must divide the input and output channels");
  }
  n.inputs = {x};
  n.conv = std::make_shared<ConvSpec>(spec);
  n.channels = spec.out_channels;
  n.layer = std::make_shared<torch::nn::Module>(n.name);
  n.layer->register_parameter(
      "weight", at::empty({spec.out_channels, spec.in_channels / spec.groups_, spec.kernel_size[0],
                           spec.kernel_size[1]}));
  if (spec.bias_) n.layer->register_parameter("bias", at::zeros({spec.out_channels}));
  module_->register_module(n.name, n.layer);
  return add_node(std::move(n));
}

namespace {

// LibTorch's ceil mode counts windows from the leading padding alone; with a different trailing
// padding the whole image's and a tile's output sizes would follow different rules.
void check_pool_padding(const std::string& name, const PoolSpec& spec) {
  if (spec.ceil_mode_ && spec.padding_ != spec.padding_end_) {
    throw Error(name + ": ceil mode with different padding on the two sides is not supported");
  }
}

}  // namespace

NodeId Graph::max_pool(NodeId x, const PoolSpec& spec) {
  const Node& in = checked(x, "max_pool");
  Node n;
  n.kind = OpKind::kMaxPool;
  n.name = layer_name("", "maxpool");
  if (!in.spatial()) throw Error(n.name + ": pooling needs a spatial input");
  for (size_t a = 0; a < 2; ++a) {
    if (spec.kernel_size[a] < 1 || spec.stride_[a] < 1 || spec.dilation_[a] < 1) {
      throw Error(n.name + ": kernel, stride and dilation must be >= 1");
    }
    // LibTorch's own rule; it also keeps -inf padding from ever reaching an output.
    if (std::min(spec.padding_[a], spec.padding_end_[a]) < 0 ||
        std::max(spec.padding_[a], spec.padding_end_[a]) * 2 > spec.kernel_size[a]) {
      throw Error(n.name + ": padding must be at most half the kernel size");
    }
  }
  check_pool_padding(n.name, spec);
  n.inputs = {x};
  n.pool = std::make_shared<PoolSpec>(spec);
  n.channels = in.channels;
  return add_node(std::move(n));
}

NodeId Graph::avg_pool(NodeId x, const PoolSpec& spec) {
  const Node& in = checked(x, "avg_pool");
  Node n;
  n.kind = OpKind::kAvgPool;
  n.name = layer_name("", "avgpool");
  if (!in.spatial()) throw Error(n.name + ": pooling needs a spatial input");
  for (size_t a = 0; a < 2; ++a) {
    if (spec.kernel_size[a] < 1 || spec.stride_[a] < 1) {
      throw Error(n.name + ": kernel and stride must be >= 1");
    }
    if (spec.dilation_[a] != 1) throw Error(n.name + ": average pooling has no dilation");
    if (std::min(spec.padding_[a], spec.padding_end_[a]) < 0 ||
        std::max(spec.padding_[a], spec.padding_end_[a]) * 2 > spec.kernel_size[a]) {
      throw Error(n.name + ": padding must be at most half the kernel size");
    }
  }
  check_pool_padding(n.name, spec);
  if (spec.divisor_override_ < 0) throw Error(n.name + ": divisor_override must be positive");
  n.inputs = {x};
  n.pool = std::make_shared<PoolSpec>(spec);
  n.channels = in.channels;
  return add_node(std::move(n));
}

NodeId Graph::pointwise(NodeId x, Pointwise op, const std::string& name) {
  const Node& in = checked(x, "pointwise");
  Node n;
  n.kind = OpKind::kPointwise;
  n.pointwise = op;
  n.name = layer_name(name, "act");
  if (!in.spatial()) throw Error(n.name + ": pointwise ops here act on spatial activations");
  n.inputs = {x};
  n.channels = in.channels;
  return add_node(std::move(n));
}

NodeId Graph::leaky_relu(NodeId x, double slope) {
  const NodeId id = pointwise(x, Pointwise::kLeakyRelu);
  nodes_.back().slope = slope;
  return id;
}

NodeId Graph::hard_sigmoid(NodeId x, double alpha, double beta) {
  const NodeId id = pointwise(x, Pointwise::kHardSigmoid);
  nodes_.back().coeff = {alpha, beta};
  return id;
}

NodeId Graph::clamp(NodeId x, double lo, double hi) {
  if (!(lo <= hi)) {
    throw Error("clamp: the minimum " + std::to_string(lo) + " is above the maximum " +
                std::to_string(hi));
  }
  const NodeId id = pointwise(x, Pointwise::kClamp);
  nodes_.back().coeff = {lo, hi};
  return id;
}

NodeId Graph::scalar(NodeId x, double scale, double shift) {
  if (!std::isfinite(scale) || !std::isfinite(shift)) {
    throw Error("scalar: the constants must be finite numbers");
  }
  const NodeId id = pointwise(x, Pointwise::kScalar);
  nodes_.back().coeff = {scale, shift};
  return id;
}

NodeId Graph::scale(NodeId x, bool bias, const std::string& name) {
  const NodeId id = pointwise(x, Pointwise::kScale, name.empty() ? layer_name("", "scale") : name);
  Node& n = nodes_.back();
  n.layer = std::make_shared<torch::nn::Module>(n.name);
  n.layer->register_parameter("weight", at::ones({n.channels}));
  if (bias) n.layer->register_parameter("bias", at::zeros({n.channels}));
  module_->register_module(n.name, n.layer);
  return id;
}

NodeId Graph::channel_norm(NodeId x, double eps, const std::string& name) {
  if (!(eps > 0.0)) throw Error("channel_norm: eps must be positive");
  const NodeId id =
      pointwise(x, Pointwise::kChannelNorm, name.empty() ? layer_name("", "norm") : name);
  Node& n = nodes_.back();
  n.eps = eps;
  n.layer = norm_layer(n.name, n.channels, /*running_statistics=*/false);
  module_->register_module(n.name, n.layer);
  return id;
}

NodeId Graph::frozen_batch_norm(NodeId x, const std::string& name, double eps) {
  const Node& in = checked(x, "frozen_batch_norm");
  Node n;
  n.kind = OpKind::kPointwise;
  n.pointwise = Pointwise::kAffine;
  n.name = layer_name(name, "bn");
  if (!in.spatial()) throw Error(n.name + ": batch norm here acts on spatial activations");
  n.inputs = {x};
  n.channels = in.channels;
  n.eps = eps;
  n.layer = norm_layer(n.name, in.channels, /*running_statistics=*/true);
  module_->register_module(n.name, n.layer);
  return add_node(std::move(n));
}

namespace {

void check_eps(const std::string& name, double eps) {
  if (!(eps > 0.0) || !std::isfinite(eps)) throw Error(name + ": eps must be a positive number");
}

}  // namespace

NodeId Graph::batch_norm(NodeId x, const std::string& name, double eps, double momentum) {
  const Node& in = checked(x, "batch_norm");
  Node n;
  n.kind = OpKind::kBarrier;
  n.barrier = BarrierOp::kBatchNorm;
  n.name = layer_name(name, "bn");
  if (!in.spatial()) throw Error(n.name + ": batch norm here acts on spatial activations");
  check_eps(n.name, eps);
  if (!(momentum >= 0.0 && momentum <= 1.0)) {
    throw Error(n.name + ": momentum must be in [0, 1]");
  }
  n.inputs = {x};
  n.channels = in.channels;
  n.eps = eps;
  n.momentum = momentum;
  n.layer = norm_layer(n.name, in.channels, /*running_statistics=*/true);
  module_->register_module(n.name, n.layer);
  return add_node(std::move(n));
}

NodeId Graph::group_norm(NodeId x, int64_t groups, const std::string& name, double eps) {
  const Node& in = checked(x, "group_norm");
  Node n;
  n.kind = OpKind::kBarrier;
  n.barrier = BarrierOp::kGroupNorm;
  n.name = layer_name(name, "gn");
  if (!in.spatial()) throw Error(n.name + ": group norm here acts on spatial activations");
  check_eps(n.name, eps);
  if (groups < 1 || in.channels % groups != 0) {
    throw Error(n.name + ": " + std::to_string(groups) + " groups do not divide " +
                std::to_string(in.channels) + " channels");
  }
  n.inputs = {x};
  n.channels = in.channels;
  n.eps = eps;
  n.groups = groups;
  n.layer = norm_layer(n.name, in.channels, /*running_statistics=*/false);
  module_->register_module(n.name, n.layer);
  return add_node(std::move(n));
}

NodeId Graph::squeeze_excite(NodeId x, const SqueezeSpec& spec, const std::string& name) {
  const Node& in = checked(x, "squeeze_excite");
  Node n;
  n.kind = OpKind::kBarrier;
  n.barrier = BarrierOp::kSqueezeExcite;
  n.name = layer_name(name, "se");
  if (!in.spatial()) throw Error(n.name + ": squeeze-and-excitation acts on spatial activations");
  if (spec.squeeze_channels < 1 || spec.squeeze_channels > (int64_t{1} << 20)) {
    throw Error(n.name + ": needs between 1 and 2^20 squeeze channels");
  }
  if (spec.activation != Pointwise::kRelu && spec.activation != Pointwise::kSilu) {
    throw Error(n.name + ": the activation between the gate's convs must be relu or silu");
  }
  if (spec.gate != Pointwise::kSigmoid && spec.gate != Pointwise::kHardSigmoid) {
    throw Error(n.name + ": the gate must be a sigmoid or a hard sigmoid");
  }
  n.inputs = {x};
  n.channels = in.channels;
  n.squeeze = std::make_shared<SqueezeSpec>(spec);
  n.layer = std::make_shared<torch::nn::Module>(n.name);
  auto fc = [&](const char* fc_name, int64_t out, int64_t inc) {
    auto m = std::make_shared<torch::nn::Module>(fc_name);
    m->register_parameter("weight", at::empty({out, inc, 1, 1}));
    m->register_parameter("bias", at::zeros({out}));
    n.layer->register_module(fc_name, m);
  };
  fc("fc1", spec.squeeze_channels, in.channels);
  fc("fc2", in.channels, spec.squeeze_channels);
  module_->register_module(n.name, n.layer);
  return add_node(std::move(n));
}

NodeId Graph::binary(NodeId a, NodeId b, Binary op) {
  static const char* const kNames[] = {"add", "sub", "mul", "div"};
  const char* kind = kNames[static_cast<int>(op)];
  const Node& na = checked(a, kind);
  const Node& nb = checked(b, kind);
  Node n;
  n.kind = OpKind::kBinary;
  n.binary = op;
  n.name = layer_name("", kind);
  if (!na.spatial() || !nb.spatial()) {
    throw Error(n.name + ": " + kind + " joins spatial activations");
  }
  if (na.channels != nb.channels) {
    throw Error(n.name + ": joins " + na.name + " (" + std::to_string(na.channels) +
                " channels) and " + nb.name + " (" + std::to_string(nb.channels) + " channels)");
  }
  n.inputs = {a, b};
  n.channels = na.channels;
  return add_node(std::move(n));
}

NodeId Graph::concat(const std::vector<NodeId>& xs) {
  Node n;
  n.kind = OpKind::kConcat;
  n.name = layer_name("", "concat");
  if (xs.size() < 2) throw Error(n.name + ": concat needs at least two inputs");
  for (NodeId x : xs) {
    const Node& in = checked(x, "concat");
    if (!in.spatial()) throw Error(n.name + ": concat joins spatial activations");
    n.channels += in.channels;
  }
  n.inputs = xs;
  return add_node(std::move(n));
}

NodeId Graph::global_avg_pool(NodeId x) {
  const Node& in = checked(x, "global_avg_pool");
  Node n;
  n.kind = OpKind::kGlobalAvgPool;
  n.name = layer_name("", "gap");
  if (!in.spatial()) throw Error(n.name + ": global pooling needs a spatial input");
  n.inputs = {x};
  n.channels = in.channels;
  return add_node(std::move(n));
}

NodeId Graph::global_max_pool(NodeId x) {
  const Node& in = checked(x, "global_max_pool");
  Node n;
  n.kind = OpKind::kGlobalMaxPool;
  n.name = layer_name("", "gmp");
  if (!in.spatial()) throw Error(n.name + ": global pooling needs a spatial input");
  n.inputs = {x};
  n.channels = in.channels;
  return add_node(std::move(n));
}

NodeId Graph::flatten(NodeId x) {
  const Node& in = checked(x, "flatten");
  Node n;
  n.kind = OpKind::kFlatten;
  n.name = layer_name("", "flatten");
  if (in.spatial()) {
    throw Error(n.name +
                ": flatten of a whole-slide activation has no fixed size; use a global "
                "pool before it");
  }
  n.inputs = {x};
  n.channels = in.channels;
  return add_node(std::move(n));
}

NodeId Graph::attention_pool(NodeId x, int64_t branches, const std::string& name) {
  const Node& in = checked(x, "attention_pool");
  Node n;
  n.kind = OpKind::kAttentionPool;
  n.name = layer_name(name, "attention_pool");
  if (!in.spatial()) throw Error(n.name + ": attention pooling needs a spatial input");
  if (branches < 1 || branches >= in.channels) {
    throw Error(n.name + ": " + std::to_string(branches) + " attention branches need more than " +
                std::to_string(branches) +
                " input channels (scores, then features); the input has " +
                std::to_string(in.channels));
  }
  n.inputs = {x};
  n.branches = branches;
  n.channels = branches * (in.channels - branches);
  return add_node(std::move(n));
}

NodeId Graph::linear(NodeId x, int64_t out_features, const std::string& name, int64_t groups) {
  const Node& in = checked(x, "linear");
  Node n;
  n.kind = OpKind::kLinear;
  n.name = layer_name(name, "linear");
  if (in.spatial()) throw Error(n.name + ": linear needs a pooled input (add a global pool)");
  if (out_features < 1) throw Error(n.name + ": needs at least one output feature");
  if (groups < 1 || in.channels % groups != 0 || out_features % groups != 0) {
    throw Error(n.name + ": " + std::to_string(groups) + " groups must divide both the " +
                std::to_string(in.channels) + " input and the " + std::to_string(out_features) +
                " output features");
  }
  n.inputs = {x};
  n.channels = out_features;
  n.groups = groups;
  n.layer = std::make_shared<torch::nn::Module>(n.name);
  n.layer->register_parameter("weight", at::empty({out_features, in.channels / groups}));
  n.layer->register_parameter("bias", at::zeros({out_features}));
  module_->register_module(n.name, n.layer);
  return add_node(std::move(n));
}

NodeId Graph::dropout(NodeId x, double p) {
  const Node& in = checked(x, "dropout");
  if (p < 0.0 || p >= 1.0) throw Error("dropout: the probability must be in [0, 1)");
  if (in.spatial()) {
    const NodeId id = pointwise(x, Pointwise::kDropout, layer_name("", "dropout"));
    nodes_.back().dropout_p = p;
    return id;
  }
  Node n;
  n.kind = OpKind::kDropout;
  n.name = layer_name("", "dropout");
  n.inputs = {x};
  n.channels = in.channels;
  n.dropout_p = p;
  return add_node(std::move(n));
}

std::vector<Shape> Graph::shapes(const Shape& input) const {
  if (input.channels != nodes_[0].channels) {
    throw Error("the network expects " + std::to_string(nodes_[0].channels) +
                " input channels, the image has " + std::to_string(input.channels));
  }
  if (input.height <= 0 || input.width <= 0) {
    throw Error("the input image is empty (" + to_string(input) + ")");
  }
  std::vector<Shape> out(nodes_.size());
  out[0] = input;
  for (size_t i = 1; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    const Shape& in = out[static_cast<size_t>(n.inputs[0])];
    Shape s{n.channels, in.height, in.width};
    switch (n.kind) {
      case OpKind::kConv:
      case OpKind::kMaxPool:
      case OpKind::kAvgPool: {
        s.height = output_size(n.axis_op(0), in.height);
        s.width = output_size(n.axis_op(1), in.width);
        if (s.height <= 0 || s.width <= 0) {
          throw Error(n.name + " (" + describe(n) + "): the kernel is larger than its padded " +
                      to_string(in) + " input");
        }
        break;
      }
      case OpKind::kBinary:
      case OpKind::kConcat:
        for (NodeId other : n.inputs) {
          const Shape& o = out[static_cast<size_t>(other)];
          if (o.height != in.height || o.width != in.width) {
            throw Error(n.name + ": joins " + to_string(in) + " and " + to_string(o) +
                        " activations of different sizes");
          }
        }
        break;
      case OpKind::kGlobalAvgPool:
      case OpKind::kGlobalMaxPool:
      case OpKind::kAttentionPool:
      case OpKind::kFlatten:
      case OpKind::kLinear:
      case OpKind::kDropout:
        s.height = s.width = 1;
        break;
      default:
        break;
    }
    out[i] = s;
  }
  return out;
}

void Graph::init_parameters(uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::NoGradGuard no_grad;
  auto kaiming = [&](torch::nn::Module& layer) {
    auto weight = layer.named_parameters(false)["weight"];
    const int64_t fan_in = weight.numel() / weight.size(0);
    const double std = std::sqrt(2.0 / static_cast<double>(fan_in));  // Kaiming, ReLU gain
    fill_normal(weight, 0.0, std, gen);
    if (auto* bias = layer.named_parameters(false).find("bias")) bias->zero_();
  };
  for (const Node& n : nodes_) {
    if (!n.layer || n.kind == OpKind::kPointwise) continue;
    if (n.kind == OpKind::kBarrier) {
      // Norms keep weight 1 and bias 0; a squeeze-and-excitation gate's convs are drawn.
      for (const auto& child : n.layer->children()) kaiming(*child);
      continue;
    }
    kaiming(*n.layer);
  }
}

namespace {

// `draw` fills a CPU tensor in place; a tensor elsewhere gets a CPU draw copied over.
template <typename Draw>
void fill_on_cpu(const at::Tensor& t, Draw draw) {
  at::NoGradGuard no_grad;
  at::Tensor target = t.is_cpu() ? t : at::empty(t.sizes(), t.options().device(at::kCPU));
  draw(target);
  if (!t.is_cpu()) t.copy_(target);
}

}  // namespace

int64_t parameter_elements(const Node& node) {
  int64_t n = 0;
  if (!node.layer) return n;
  for (const auto& p : node.layer->parameters(/*recurse=*/true)) n += p.numel();
  return n;
}

void fill_normal(const at::Tensor& t, double mean, double std, at::Generator& gen) {
  fill_on_cpu(t, [&](at::Tensor& x) { x.normal_(mean, std, gen); });
}

void fill_uniform(const at::Tensor& t, double from, double to, at::Generator& gen) {
  fill_on_cpu(t, [&](at::Tensor& x) { x.uniform_(from, to, gen); });
}

}  // namespace tessel::core
