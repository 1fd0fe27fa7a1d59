// A network as a DAG of nodes in execution order (DESIGN.md "Graph"). Nodes are added in
// topological order by the builder methods; parameters live in a torch::nn::Module so optimizers,
// named_parameters() and checkpoints see them ("<layer>.weight", "<layer>.bias").
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/graph/window.h"

// The parameters' module, by reference only: the graph's structure (all the planner reads) builds
// without LibTorch's headers (core/plan/ compiles without them).
namespace torch::nn {
class Module;
}

namespace tessel::core {

using NodeId = int;

// Op descriptors: required arguments in the constructor, chained setters for the rest.
struct ConvSpec {
  ConvSpec(int64_t in_channels, int64_t out_channels, int64_t kernel)
      : in_channels(in_channels), out_channels(out_channels), kernel_size{kernel, kernel} {}
  ConvSpec& kernel(int64_t ky, int64_t kx) {
    kernel_size = {ky, kx};
    return *this;
  }
  ConvSpec& stride(int64_t s) { return stride(s, s); }
  ConvSpec& stride(int64_t sy, int64_t sx) {
    stride_ = {sy, sx};
    return *this;
  }
  ConvSpec& padding(int64_t p) { return padding(p, p); }
  ConvSpec& padding(int64_t py, int64_t px) { return padding(py, px, py, px); }
  // Different padding on each side (ONNX pads, TensorFlow's SAME).
  ConvSpec& padding(int64_t top, int64_t left, int64_t bottom, int64_t right) {
    padding_ = {top, left};
    padding_end_ = {bottom, right};
    return *this;
  }
  ConvSpec& dilation(int64_t d) { return dilation(d, d); }
  ConvSpec& dilation(int64_t dy, int64_t dx) {
    dilation_ = {dy, dx};
    return *this;
  }
  ConvSpec& groups(int64_t g) {
    groups_ = g;
    return *this;
  }
  ConvSpec& bias(bool b) {
    bias_ = b;
    return *this;
  }

  int64_t in_channels, out_channels;
  std::array<int64_t, 2> kernel_size;
  std::array<int64_t, 2> stride_{1, 1}, padding_{0, 0}, dilation_{1, 1};
  std::array<int64_t, 2> padding_end_{0, 0};  // bottom, right
  int64_t groups_ = 1;
  bool bias_ = true;
};

struct PoolSpec {
  explicit PoolSpec(int64_t kernel) : kernel_size{kernel, kernel}, stride_{kernel, kernel} {}
  PoolSpec& kernel(int64_t ky, int64_t kx) {
    kernel_size = {ky, kx};
    return *this;
  }
  PoolSpec& stride(int64_t s) { return stride(s, s); }
  PoolSpec& stride(int64_t sy, int64_t sx) {
    stride_ = {sy, sx};
    return *this;
  }
  PoolSpec& padding(int64_t p) { return padding(p, p); }
  PoolSpec& padding(int64_t py, int64_t px) { return padding(py, px, py, px); }
  PoolSpec& padding(int64_t top, int64_t left, int64_t bottom, int64_t right) {
    padding_ = {top, left};
    padding_end_ = {bottom, right};
    return *this;
  }
  PoolSpec& dilation(int64_t d) {
    dilation_ = {d, d};
    return *this;
  }  // max pool only
  PoolSpec& ceil_mode(bool c) {
    ceil_mode_ = c;
    return *this;
  }
  PoolSpec& count_include_pad(bool c) {
    count_include_pad_ = c;
    return *this;
  }  // avg only
  PoolSpec& divisor_override(int64_t d) {
    divisor_override_ = d;
    return *this;
  }  // avg only

  std::array<int64_t, 2> kernel_size;
  std::array<int64_t, 2> stride_, padding_{0, 0}, dilation_{1, 1};
  std::array<int64_t, 2> padding_end_{0, 0};  // bottom, right
  bool ceil_mode_ = false;
  bool count_include_pad_ = true;
  int64_t divisor_override_ = 0;  // 0: none
};

enum class OpKind {
  kInput,
  // tileable
  kConv,
  kMaxPool,
  kAvgPool,
  kPointwise,
  kBinary,  // two activations of one shape, element by element (add, sub, mul, div)
  kConcat,
  // A barrier (core/exec/barrier.h): the output at a position depends on a statistic of the whole
  // input (train-mode batch norm, group norm, squeeze-and-excitation). Tiled with the statistic
  // computed in a streaming pass and its gradient terms added exactly (DESIGN.md "Barriers").
  kBarrier,
  // tail (whole, small activation)
  kGlobalAvgPool,
  kGlobalMaxPool,
  // Attention pooling (core/exec/attention.h): a softmax over every position of per-position scores
  // weights the features; its input is [scores (branches) | features] at each position.
  kAttentionPool,
  kFlatten,
  kLinear,
  kDropout,
};

// Ops on one activation that read one position (all channels at most): the window is the
// identity. Arguments: `slope` (leaky relu), `eps` (affine, channel norm), `coeff` (clamp: min,
// max; hard sigmoid: alpha, beta as ONNX's max(0, min(1, alpha·x + beta)); scalar: x·c0 + c1).
// Parameters: affine (frozen batch norm: weight, bias, running_mean, running_var), scale
// (per-channel weight, optional bias: LayerScale), channel norm (LayerNorm over the channels of
// each position, as ConvNeXt's LayerNorm2d: weight, bias).
enum class Pointwise {
  kIdentity,
  kRelu,
  kLeakyRelu,
  kGelu,  // erf form
  kSigmoid,
  kTanh,
  kAffine,
  kGeluTanh,
  kSilu,
  kHardSigmoid,
  kHardSwish,
  kClamp,
  kErf,
  kScalar,
  kScale,
  kChannelNorm,
  // Dropout inside a tiled segment: the mask a function of the position (core/exec/dropout.h);
  // dropout_p. Active in training steps only.
  kDropout,
};

enum class Binary { kAdd, kSub, kMul, kDiv };

// Barriers. Batch norm in training mode (N = 1: per channel over the positions; running mean and
// variance updated as BatchNorm2d does, and used in evaluation), group norm (per group of
// channels over the positions), squeeze-and-excitation (x · gate(mean of x per channel), the
// gate two 1×1 convs with an activation between and a sigmoid or hard sigmoid after).
enum class BarrierOp { kBatchNorm, kGroupNorm, kSqueezeExcite };

struct SqueezeSpec {
  int64_t squeeze_channels = 0;
  Pointwise activation = Pointwise::kRelu;  // between the convs: relu or silu
  Pointwise gate = Pointwise::kSigmoid;     // sigmoid or hard sigmoid (coefficients below)
  std::array<double, 2> gate_coeff{1.0 / 6.0, 0.5};
};

struct Node {
  NodeId id = 0;
  OpKind kind = OpKind::kInput;
  std::string name;  // layer name: parameters are "<name>.weight" etc.
  std::vector<NodeId> inputs;
  std::shared_ptr<ConvSpec> conv;  // kConv
  std::shared_ptr<PoolSpec> pool;  // kMaxPool, kAvgPool
  Pointwise pointwise = Pointwise::kIdentity;
  Binary binary = Binary::kAdd;               // kBinary
  BarrierOp barrier = BarrierOp::kBatchNorm;  // kBarrier
  int64_t groups = 1;                         // group norm; linear (grouped: CLAM-MB)
  int64_t branches = 1;                       // attention pool
  double momentum = 0.1;                      // batch norm's running statistics
  std::shared_ptr<SqueezeSpec> squeeze;       // squeeze-and-excitation
  double slope = 0.01;                        // leaky relu
  double eps = 1e-5;                          // frozen batch norm, channel norm
  std::array<double, 2> coeff{0.0, 0.0};      // clamp, hard sigmoid, scalar (see Pointwise)
  double dropout_p = 0.0;                     // kDropout
  int64_t channels = 0;                       // output channels (features for tail ops)
  std::shared_ptr<torch::nn::Module> layer;   // parameters, when the op has any

  bool tileable() const { return kind != OpKind::kInput && kind < OpKind::kGlobalAvgPool; }
  bool spatial() const { return kind == OpKind::kInput || tileable(); }
  bool is_barrier() const { return kind == OpKind::kBarrier; }
  // The per-axis sliding window (identity for pointwise, add and concat).
  AxisOp axis_op(int axis) const;
  // The value an op's explicit padding holds: 0 for conv and avg pool, -inf for max pool.
  double pad_value() const;
  // Whether a sliding-window op pads both sides of each axis alike.
  bool symmetric_padding() const;
};

struct Shape {
  int64_t channels = 0, height = 0, width = 0;  // spatial nodes; tail nodes use channels only
  bool operator==(const Shape&) const = default;
};
std::string to_string(const Shape& s);

class Graph {
 public:
  explicit Graph(int64_t in_channels);
  // Move-only: a copy would share the parameters' module with the original.
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  NodeId input() const { return 0; }
  NodeId conv(NodeId x, const ConvSpec& spec, const std::string& name = "");
  NodeId max_pool(NodeId x, const PoolSpec& spec);
  NodeId avg_pool(NodeId x, const PoolSpec& spec);
  NodeId relu(NodeId x) { return pointwise(x, Pointwise::kRelu); }
  NodeId leaky_relu(NodeId x, double slope);
  NodeId gelu(NodeId x) { return pointwise(x, Pointwise::kGelu); }
  NodeId sigmoid(NodeId x) { return pointwise(x, Pointwise::kSigmoid); }
  NodeId tanh(NodeId x) { return pointwise(x, Pointwise::kTanh); }
  NodeId identity(NodeId x) { return pointwise(x, Pointwise::kIdentity); }
  NodeId gelu_tanh(NodeId x) { return pointwise(x, Pointwise::kGeluTanh); }
  NodeId silu(NodeId x) { return pointwise(x, Pointwise::kSilu); }
  NodeId hard_swish(NodeId x) { return pointwise(x, Pointwise::kHardSwish); }
  NodeId erf(NodeId x) { return pointwise(x, Pointwise::kErf); }
  // max(0, min(1, alpha·x + beta)) (ONNX HardSigmoid; PyTorch's is alpha 1/6, beta 0.5).
  NodeId hard_sigmoid(NodeId x, double alpha, double beta);
  // min(max(x, lo), hi); ReLU6 is clamp(x, 0, 6).
  NodeId clamp(NodeId x, double lo, double hi);
  // x · scale + shift with constants (ONNX Add/Sub/Mul/Div by a scalar).
  NodeId scalar(NodeId x, double scale, double shift);
  // x · weight (+ bias) per channel, trainable (LayerScale): weight 1, bias 0 until set.
  NodeId scale(NodeId x, bool bias, const std::string& name = "");
  // LayerNorm over the channels of each position, weight 1 and bias 0 until set.
  NodeId channel_norm(NodeId x, double eps, const std::string& name = "");
  // Batch norm with frozen statistics: a per-channel affine y = x * scale + shift, where scale
  // and shift come from weight, bias, running mean and var (buffers) and eps.
  NodeId frozen_batch_norm(NodeId x, const std::string& name = "", double eps = 1e-5);
  // Batch norm in training mode: batch statistics while training (a barrier), the running
  // statistics in evaluation; weight 1, bias 0, running mean 0, var 1 until set.
  NodeId batch_norm(NodeId x, const std::string& name = "", double eps = 1e-5,
                    double momentum = 0.1);
  // Group norm over `groups` groups of channels (which must divide them); weight 1, bias 0.
  NodeId group_norm(NodeId x, int64_t groups, const std::string& name = "", double eps = 1e-5);
  // Squeeze-and-excitation: x · gate(fc2(act(fc1(mean of x)))), fc1/fc2 1×1 convs with biases
  // ("<name>.fc1.weight", ...), initialised by init_parameters.
  NodeId squeeze_excite(NodeId x, const SqueezeSpec& spec, const std::string& name = "");
  NodeId add(NodeId a, NodeId b) { return binary(a, b, Binary::kAdd); }
  NodeId binary(NodeId a, NodeId b, Binary op);
  NodeId concat(const std::vector<NodeId>& xs);
  NodeId global_avg_pool(NodeId x);
  NodeId global_max_pool(NodeId x);
  // Attention pooling over every position (core/exec/attention.h): `x` holds `branches` score
  // channels, then the C feature channels; the output is the B pooled feature vectors, 1×(B·C),
  // branch-major.
  NodeId attention_pool(NodeId x, int64_t branches, const std::string& name = "");
  NodeId flatten(NodeId x);
  // `groups` > 1: the inputs and outputs in that many groups, each output group a linear map of
  // its input group alone (weight out × in/groups): CLAM-MB's per-class classifiers, one for
  // each branch of an attention pool.
  NodeId linear(NodeId x, int64_t out_features, const std::string& name = "", int64_t groups = 1);
  // Dropout with probability p: after a global pool (the tail, LibTorch's), or on a spatial
  // activation (inside tiled segments: its mask a function of the global position, so tiles
  // and their recompute draw the whole image's mask; core/exec/dropout.h).
  NodeId dropout(NodeId x, double p);

  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(NodeId id) const { return nodes_.at(static_cast<size_t>(id)); }
  NodeId output() const { return static_cast<NodeId>(nodes_.size()) - 1; }
  int size() const { return static_cast<int>(nodes_.size()); }
  bool has_layer(const std::string& name) const { return names_.contains(name); }
  // Consumers of each node, in execution order.
  const std::vector<std::vector<NodeId>>& consumers() const { return consumers_; }
  torch::nn::Module& module() { return *module_; }
  std::shared_ptr<torch::nn::Module> module_ptr() { return module_; }

  // Output shape of every node for an input of `input` (C×H×W). Throws tessel::Error naming the
  // node when a shape does not fit (channel mismatch, kernel larger than the padded input, ...).
  std::vector<Shape> shapes(const Shape& input) const;

  // Kaiming-normal conv/linear weights, zero biases; frozen batch norm: weight 1, bias 0,
  // running mean 0, var 1 (callers may overwrite). Deterministic for a seed, and the same
  // values on every device (drawn on the CPU).
  void init_parameters(uint64_t seed);

 private:
  NodeId add_node(Node node);
  NodeId pointwise(NodeId x, Pointwise op, const std::string& name = "");
  std::string layer_name(const std::string& requested, const char* kind);
  const Node& checked(NodeId id, const char* op) const;

  std::vector<Node> nodes_;
  std::vector<std::vector<NodeId>> consumers_;
  std::shared_ptr<torch::nn::Module> module_;
  // The layer names taken, and per kind the number below which every default name is taken:
  // naming stays O(log n) a layer (an imported file may have thousands of layers).
  std::set<std::string> names_;
  std::map<std::string, int> first_free_;
};

std::string to_string(OpKind kind);
// "conv3x3/s2/p1", "maxpool2x2/s2", "relu", ... for plans and errors.
std::string describe(const Node& node);

// Tensor-free facts of an op, shared by the planner's model and the executor's tensor work.
// Whether `node`'s output is a tensor it owns (freshly allocated, or its input overwritten when
// that was fresh): every op but identity, which returns its input. The no-grad forward may then
// let a single reader overwrite it (the planner counts the same).
bool allocates_output(const Node& node);
// Whether a pointwise op can overwrite its input (relu, leaky relu, sigmoid, tanh, affine).
bool runs_in_place(const Node& node);
// Whether `node`'s backward keeps its own output rather than its input (relu, sigmoid, tanh:
// LibTorch saves their result).
bool keeps_own_output(const Node& node);
// The elements of `node`'s parameters (its layer's, buffers not counted; 0 without a layer).
int64_t parameter_elements(const Node& node);
// The region of node `node`'s input `input_shape` that output region `out` reads, clipped to
// the activation (DESIGN.md rule 1). Empty when the window is pure padding.
Region needed_input(const Node& node, const Region& out, const Shape& input_shape);

}  // namespace tessel::core
