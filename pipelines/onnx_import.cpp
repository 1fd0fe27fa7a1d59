#include "pipelines/onnx_import.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "core/error.h"
#include "pipelines/onnx_fuse.h"

namespace tessel::pipelines {
namespace {

using core::NodeId;
using core::OpKind;
using io::OnnxModel;
using io::OnnxNode;

// What an ONNX value is on Tessel's side.
struct Value {
  NodeId node = -1;     // the graph node that computes it; -1 for a constant
  at::Tensor constant;  // a constant's value
  bool nhwc = false;    // the node's activation seen channels-last (between two Transposes)
  std::array<int64_t, 4> pad{0, 0, 0, 0};  // a Pad's top, left, bottom, right, for its consumer
  // Non-empty: the value belongs to a head left out, which began at this node ("'n' (Op)").
  std::string left_out_from;
  std::string made_by;  // the ONNX node that made it, for messages

  bool is_constant() const { return node < 0 && left_out_from.empty(); }
  bool padded() const { return pad != std::array<int64_t, 4>{0, 0, 0, 0}; }
};

std::string describe(const OnnxNode& n) { return "node '" + n.name + "' (" + n.op_type + ")"; }

constexpr const char* kSqueezeExcitePattern =
    "GlobalAveragePool or ReduceMean over H and W → Conv 1×1 → Relu or SiLU → Conv 1×1 → Sigmoid "
    "or HardSigmoid → Mul with the pooled activation";

// The decimal a float32 attribute was written from: the shortest one that rounds to it ("0.9"
// for 0.89999998). ONNX's FLOAT attributes are float32, so PyTorch's momentum 0.1 is written as
// 1 − 0.1 rounded to float32; 1 − 0.89999998 would update the running statistics with a
// momentum 1e-8 off.
double shortest_decimal(double attribute) {
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof text, static_cast<float>(attribute));
  if (error != std::errc()) return attribute;
  return std::strtod(std::string(text, end).c_str(), nullptr);
}

// Bounds far beyond any real network's, so that a damaged file is refused before the window
// arithmetic (core/graph/window.h) overflows or the graph allocates from a channel count.
constexpr int64_t kMaxWindow = int64_t{1} << 20;    // a kernel, stride, dilation or padding
constexpr int64_t kMaxChannels = int64_t{1} << 24;  // of one activation
// Values the importer may compute from constants (shape arithmetic, weights stored transposed):
// this many plus twice the file's own.
constexpr int64_t kFoldedValues = int64_t{1} << 24;

std::string shape_str(at::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}
std::string shape_str(const at::Tensor& t) { return shape_str(t.sizes()); }

// The number of values of a shape, saturating instead of overflowing.
int64_t count_values(at::IntArrayRef shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return std::numeric_limits<int64_t>::max();
  }
  return n;
}

// NumPy's broadcasting of two shapes (ONNX's multidirectional broadcasting), or none.
std::optional<std::vector<int64_t>> broadcast(at::IntArrayRef a, at::IntArrayRef b) {
  std::vector<int64_t> out(std::max(a.size(), b.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[out.size() - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

class Importer {
 public:
  // `head_left_out`: the reason a first import left the file's head out after mapping part of
  // it; this one ends the trunk at the global pool.
  Importer(const OnnxModel& model, const ImportOptions& options,
           const std::string& head_left_out = "")
      : model_(model), options_(options), head_left_out_(head_left_out) {
    result_.graph = core::Graph(model.input_shape[1]);
    values_[model.input].node = result_.graph.input();
    for (const auto& [name, t] : model.constants) {
      values_[name].constant = t;
      fold_budget_ += 2 * t.numel();
    }
    nodes_ = fuse_onnx_patterns(model, result_.notes);
    for (size_t i = 0; i < nodes_.size(); ++i) {
      for (const std::string& in : nodes_[i].inputs) {
        ++readers_[in];
        reader_[in] = i;
      }
    }
    dtype_ = weights_dtype();
  }

  // Set by run() when the head was left out after a part of it was mapped (a linear, then an op
  // Tessel's heads do not have): the reason, for an import that ends at the pool.
  std::string partial_head() const { return partial_head_; }

  ImportedNetwork run() {
    for (current_ = 0; current_ < nodes_.size(); ++current_) {
      const OnnxNode& n = nodes_[current_];
      if (!n.outputs.empty() && folded_.contains(n.outputs[0])) {
        values_[n.outputs[0]] = values_.at(aliases_.at(n.outputs[0]));
        continue;
      }
      if (const std::string from = left_out_input(n); !from.empty()) {
        leave_out(n, from);
        continue;
      }
      if (!head_left_out_.empty() && on_pooled(n)) {
        leave_out_head(n, "the head left out");
        continue;
      }
      map(n);
    }
    finish();
    if (options_.batch_norm == BatchNormImport::kTrain) {
      result_.notes.push_back(
          train_batch_norms_
              ? std::to_string(train_batch_norms_) +
                    " BatchNormalization as batch norm in training mode (batch statistics while "
                    "training, the file's running statistics to start from)"
              : "no BatchNormalization to import in training mode: an exporter in eval mode "
                "folds a batch norm that follows a Conv into it (export with "
                "do_constant_folding=False, or dynamo=True with optimize=False)");
    }
    return std::move(result_);
  }

 private:
  using Handler = void (Importer::*)(const OnnxNode&);

  // ---- errors and values ----

  [[noreturn]] void refuse(const OnnxNode& n, const std::string& why) const {
    throw Error("ONNX file " + model_.file.string() + ": " + describe(n) + ": " + why);
  }

  const Value& input(const OnnxNode& n, size_t i) const {
    if (i >= n.inputs.size() || n.inputs[i].empty()) {
      refuse(n, "input " + std::to_string(i + 1) + " is missing");
    }
    auto it = values_.find(n.inputs[i]);
    if (it == values_.end()) refuse(n, "reads '" + n.inputs[i] + "', which no earlier node makes");
    return it->second;
  }

  bool has_input(const OnnxNode& n, size_t i) const {
    return i < n.inputs.size() && !n.inputs[i].empty();
  }

  at::Tensor constant(const OnnxNode& n, size_t i, const char* what) const {
    const Value& v = input(n, i);
    if (!v.is_constant()) {
      refuse(n, std::string("its ") + what +
                    " is computed while the network runs; Tessel needs it as a constant "
                    "(export with do_constant_folding, or with the dynamo exporter)");
    }
    return v.constant;
  }

  // A parameter of one value per channel (`any_shape`: of any shape holding as many values),
  // checked before the graph allocates the layer from the activation's channel count: a damaged
  // count would otherwise allocate gigabytes.
  at::Tensor per_channel_constant(const OnnxNode& n, size_t i, const char* what, int64_t channels,
                                  bool any_shape = false) const {
    at::Tensor c = constant(n, i, what);
    if (any_shape ? c.numel() != channels : c.dim() != 1 || c.size(0) != channels) {
      refuse(n, std::string("its ") + what + " has shape " + shape_str(c) + ", expected [" +
                    std::to_string(channels) + "]");
    }
    return any_shape ? c.reshape({-1}) : c;
  }

  // An integer constant's values (a shape, axes, pads).
  std::vector<int64_t> int_values(const OnnxNode& n, size_t i, const char* what) const {
    const at::Tensor c = constant(n, i, what).to(at::kLong).contiguous();
    return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
  }

  const core::Node& node(const Value& v) const { return result_.graph.node(v.node); }

  // A spatial activation the op reads, channels-first unless `nhwc_ok`; a pending Pad only
  // where the op folds it.
  NodeId spatial(const OnnxNode& n, size_t i, bool nhwc_ok = false, bool pad_ok = false) const {
    const Value& v = input(n, i);
    if (v.is_constant()) refuse(n, "reads a constant where Tessel expects the image's activation");
    if (!node(v).spatial()) {
      refuse(n, "reads the output of " + v.made_by +
                    ", a global pool, where it expects a feature map: a global pool inside the "
                    "network needs the whole image; Tessel maps it only as squeeze-and-excitation "
                    "(" +
                    kSqueezeExcitePattern + ")");
    }
    if (v.nhwc && !nhwc_ok) {
      refuse(n,
             "reads a channels-last activation (after a Transpose) that only a LayerNorm, "
             "MatMul or pointwise op may read");
    }
    if (v.padded() && !pad_ok)
      refuse(n, "reads a Pad's output; Tessel folds a Pad only into a Conv");
    return v.node;
  }

  void set_output(const OnnxNode& n, Value v) {
    if (n.outputs.empty()) refuse(n, "has no output");
    if (v.made_by.empty()) v.made_by = describe(n);
    values_[n.outputs[0]] = std::move(v);
  }

  void alias(const OnnxNode& n, size_t i) { set_output(n, input(n, i)); }

  Value activation(NodeId id, bool nhwc = false) const {
    Value v;
    v.node = id;
    v.nhwc = nhwc;
    return v;
  }

  // ---- attributes ----

  static std::vector<int64_t> ints(const OnnxNode& n, const char* key,
                                   std::vector<int64_t> fallback) {
    auto it = n.ints.find(key);
    return it == n.ints.end() ? fallback : it->second;
  }
  static int64_t int_attr(const OnnxNode& n, const char* key, int64_t fallback) {
    auto it = n.ints.find(key);
    return it == n.ints.end() || it->second.empty() ? fallback : it->second[0];
  }
  static double float_attr(const OnnxNode& n, const char* key, double fallback) {
    auto it = n.floats.find(key);
    return it == n.floats.end() || it->second.empty() ? fallback : it->second[0];
  }

  // PyTorch's Hardsigmoid is x/6 + 1/2 exactly; its exporters write 1/6 as the float32
  // 0.16666667, which a float64 network would otherwise carry as an error of 3e-8.
  static double hard_sigmoid_alpha(const OnnxNode& n) {
    const double alpha = float_attr(n, "alpha", 0.2);
    return static_cast<float>(alpha) == static_cast<float>(1.0 / 6.0) ? 1.0 / 6.0 : alpha;
  }

  // kernel_shape, strides or dilations: one value per image axis, from 1 to kMaxWindow.
  std::array<int64_t, 2> window_attr(const OnnxNode& n, const char* key,
                                     std::array<int64_t, 2> fallback) const {
    auto it = n.ints.find(key);
    if (it == n.ints.end()) return fallback;
    const std::vector<int64_t>& v = it->second;
    if (v.size() != 2) {
      refuse(n, "has " + std::to_string(v.size()) + " " + key +
                    ", not 2: Tessel imports 2-D convolutions and pools");
    }
    for (int64_t x : v) check_window(n, key, x, 1);
    return {v[0], v[1]};
  }
  void check_window(const OnnxNode& n, const std::string& what, int64_t value,
                    int64_t lowest) const {
    if (value < lowest || value > kMaxWindow) {
      refuse(n, "has " + what + " " + std::to_string(value) + "; Tessel takes " +
                    std::to_string(lowest) + " to " + std::to_string(kMaxWindow));
    }
  }

  // ---- constants folded ----

  // A constant computed from constants, counted against the file's budget of folded values so
  // that a chain of broadcasts cannot ask for unbounded memory.
  void fold(const OnnxNode& n, int64_t numel, const std::function<at::Tensor()>& compute) {
    if (numel > fold_budget_ - folded_values_) {
      refuse(n, "computes " + std::to_string(numel) + " constant values after " +
                    std::to_string(folded_values_) + ", more than the file's network needs" +
                    "; Tessel folds at most " + std::to_string(fold_budget_) + " in this file");
    }
    folded_values_ += numel;
    Value v;
    v.constant = compute();
    set_output(n, v);
  }

  // ---- parameters ----

  // Float64 when the file holds any float64 tensor (weights or constants), else float32.
  at::ScalarType weights_dtype() const {
    for (const auto& [name, t] : model_.constants) {
      if (t.scalar_type() == at::kDouble) return at::kDouble;
    }
    return at::kFloat;
  }

  // A layer name from the weight's initializer ("layer1_0_conv1" from "layer1.0.conv1.weight"),
  // or "" (a default name) when it has none, an exporter's made-up one, or one already taken.
  std::string layer_name(const OnnxNode& n, size_t weight_input) const {
    if (!has_input(n, weight_input)) return "";
    std::string name = n.inputs[weight_input];
    if (name.ends_with(".weight")) name.resize(name.size() - 7);
    return plain_layer_name(name);
  }
  std::string plain_layer_name(std::string name) const {
    std::replace(name.begin(), name.end(), '.', '_');  // LibTorch's module names have no dots
    const bool plain = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
    });
    if (!plain || std::isdigit(static_cast<unsigned char>(name[0]))) return "";
    return result_.graph.has_layer(name) ? "" : name;
  }

  void set_param(const OnnxNode& n, NodeId id, const char* key, const at::Tensor& value,
                 bool buffer = false) {
    const core::Node& target = result_.graph.node(id);
    at::Tensor p =
        buffer ? target.layer->named_buffers(true)[key] : target.layer->named_parameters(true)[key];
    if (p.sizes() != value.sizes()) {
      refuse(n, std::string("its ") + key + " has shape " + shape_str(value) + ", expected " +
                    shape_str(p));
    }
    at::NoGradGuard no_grad;
    p.set_data(value.to(dtype_).clone());
  }

  // ---- the head left out ----

  // The left-out node an input comes from, if any.
  std::string left_out_input(const OnnxNode& n) const {
    for (const std::string& in : n.inputs) {
      auto it = values_.find(in);
      if (it != values_.end() && !it->second.left_out_from.empty()) return it->second.left_out_from;
    }
    return "";
  }

  void leave_out(const OnnxNode& n, const std::string& from) {
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      auto it = values_.find(n.inputs[i]);
      if (it != values_.end() && it->second.node >= 0 && node(it->second).spatial()) {
        refuse(n, "combines the image's activation with a value computed after the global pool " +
                      from +
                      ": a global pool inside the network needs the whole image; Tessel maps it "
                      "only as squeeze-and-excitation (" +
                      kSqueezeExcitePattern + ")");
      }
    }
    for (const std::string& out : n.outputs) values_[out].left_out_from = from;
  }

  // An op Tessel does not hold on the pooled vector: the head from here on is left out.
  void leave_out_head(const OnnxNode& n, const std::string& why) {
    Value v;
    v.left_out_from = describe(n) + " (" + why + ")";
    for (const std::string& out : n.outputs) values_[out] = v;
  }

  // Whether the op reads the pooled vector (the head), where Tessel holds only flatten, dropout
  // and linear.
  bool on_pooled(const OnnxNode& n) const {
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      auto it = values_.find(n.inputs[i]);
      if (it != values_.end() && it->second.node >= 0 && !node(it->second).spatial()) return true;
    }
    return false;
  }

  // ---- dispatch ----

  void map(const OnnxNode& n) {
    static const std::map<std::string, Handler> handlers = {
        {"Conv", &Importer::conv},
        {"BatchNormalization", &Importer::batch_norm},
        {"Relu", &Importer::activation_op},
        {"LeakyRelu", &Importer::activation_op},
        {"Sigmoid", &Importer::activation_op},
        {"Tanh", &Importer::activation_op},
        {"Erf", &Importer::activation_op},
        {"HardSwish", &Importer::activation_op},
        {"HardSigmoid", &Importer::activation_op},
        {"Clip", &Importer::activation_op},
        {"Gelu", &Importer::activation_op},
        {"Silu", &Importer::activation_op},
        {"Identity", &Importer::identity},
        {"Dropout", &Importer::identity},
        {"Add", &Importer::arithmetic},
        {"Sub", &Importer::arithmetic},
        {"Mul", &Importer::arithmetic},
        {"Div", &Importer::arithmetic},
        {"MaxPool", &Importer::pool},
        {"AveragePool", &Importer::pool},
        {"Pad", &Importer::pad},
        {"Concat", &Importer::concat},
        {"GlobalAveragePool", &Importer::global_pool},
        {"GlobalMaxPool", &Importer::global_pool},
        {"ReduceMean", &Importer::global_pool},
        {"ReduceMax", &Importer::global_pool},
        {"Flatten", &Importer::flatten},
        {"Reshape", &Importer::flatten},
        {"Squeeze", &Importer::flatten},
        {"Unsqueeze", &Importer::flatten},
        {"Gemm", &Importer::gemm},
        {"MatMul", &Importer::matmul},
        {"Transpose", &Importer::transpose},
        {"LayerNormalization", &Importer::layer_norm},
        {"SqueezeExcite", &Importer::squeeze_excite},
        {"GroupNorm", &Importer::group_norm},
    };
    auto h = handlers.find(n.op_type);
    if (h != handlers.end()) {
      (this->*h->second)(n);
      return;
    }
    if (on_pooled(n)) {
      leave_out_head(n, "an op Tessel's heads do not have");
      return;
    }
    refuse(n, unsupported_reason(n.op_type));
  }

  static std::string unsupported_reason(const std::string& op) {
    static const std::set<std::string> dynamic = {
        "Shape", "Gather", "Cast",    "Slice", "ConstantOfShape", "Unsqueeze", "Ceil", "Floor",
        "Range", "Expand", "NonZero", "Size",  "Where",           "Equal",     "Less", "Greater"};
    if (dynamic.contains(op)) {
      return "computes shapes while the network runs (a dynamic-shape subgraph); export with "
             "static shapes: torch.onnx.export(model, example, path, dynamo=True)";
    }
    if (op == "Resize" || op == "Upsample") {
      return "resizes its input; a resize is not tileable yet";
    }
    if (op == "InstanceNormalization") {
      return "normalises over the image's positions; Tessel maps it only within PyTorch's group "
             "norm (Reshape to [N, G, -1], InstanceNormalization with scale 1 and bias 0, Reshape "
             "back, Mul, Add)";
    }
    if (op == "Softmax" || op == "LogSoftmax") {
      return "a softmax over the image's positions (attention) needs the whole image at once";
    }
    return "is not an op Tessel imports (docs/models.md lists the supported ops)";
  }

  // ---- ops ----

  void conv(const OnnxNode& n) {
    const Value& xv = input(n, 0);
    const NodeId x = spatial(n, 0, false, true);
    const at::Tensor w = constant(n, 1, "weight");
    if (w.dim() != 4) refuse(n, "is not a 2-D convolution (weight " + shape_str(w) + ")");
    const int64_t groups = int_attr(n, "group", 1);
    const int64_t in_channels = node(xv).channels;
    // Checked against the weight before the graph allocates one from the channels.
    if (groups < 1 || in_channels % groups != 0 || w.size(1) != in_channels / groups) {
      refuse(n, "its weight " + shape_str(w) + " with " + std::to_string(groups) +
                    " groups does not fit its input of " + std::to_string(in_channels) +
                    " channels");
    }
    check_window(n, "a kernel of height", w.size(2), 1);
    check_window(n, "a kernel of width", w.size(3), 1);
    if (window_attr(n, "kernel_shape", {w.size(2), w.size(3)}) !=
        std::array<int64_t, 2>{w.size(2), w.size(3)}) {
      refuse(n, "its kernel_shape differs from its weight's " + shape_str(w));
    }
    const auto strides = window_attr(n, "strides", {1, 1});
    const auto dilations = window_attr(n, "dilations", {1, 1});
    const auto pads = window_pads(n, {w.size(2), w.size(3)}, xv.pad);
    const bool bias = has_input(n, 2);
    core::ConvSpec spec(in_channels, w.size(0), 1);
    spec.kernel(w.size(2), w.size(3))
        .stride(strides[0], strides[1])
        .padding(pads[0], pads[1], pads[2], pads[3])
        .dilation(dilations[0], dilations[1])
        .groups(groups)
        .bias(bias || bias_follows(n, w.size(0)));
    const NodeId id = add(n, [&] { return result_.graph.conv(x, spec, layer_name(n, 1)); });
    set_param(n, id, "weight", w);
    if (bias) set_param(n, id, "bias", constant(n, 2, "bias"));
    fold_following_bias(n, id);
    set_output(n, activation(id));
  }

  // Pads [top, left, bottom, right] from `pads` or auto_pad, plus a Pad folded in.
  std::array<int64_t, 4> window_pads(const OnnxNode& n, std::array<int64_t, 2> kernel,
                                     const std::array<int64_t, 4>& folded) const {
    auto pads = ints(n, "pads", {0, 0, 0, 0});
    if (pads.size() != 4) refuse(n, "has " + std::to_string(pads.size()) + " pads, not 4");
    for (int64_t p : pads) check_window(n, "pads of", p, 0);
    const auto it = n.strings.find("auto_pad");
    const std::string mode = it == n.strings.end() ? "NOTSET" : it->second;
    if (mode == "SAME_UPPER" || mode == "SAME_LOWER") {
      const auto strides = window_attr(n, "strides", {1, 1});
      const auto dil = window_attr(n, "dilations", {1, 1});
      for (size_t a = 0; a < 2; ++a) {
        if (strides[a] != 1) {
          refuse(n,
                 "pads SAME with a stride, which depends on the image size; export with "
                 "explicit pads (the dynamo exporter writes them)");
        }
        const int64_t total = dil[a] * (kernel[a] - 1);
        const int64_t small = total / 2, large = total - small;
        pads[a] = mode == "SAME_UPPER" ? small : large;
        pads[a + 2] = mode == "SAME_UPPER" ? large : small;
      }
    } else if (mode != "NOTSET" && mode != "VALID") {
      refuse(n, "has auto_pad '" + mode + "'");
    } else if (mode == "VALID") {
      pads = {0, 0, 0, 0};
    }
    std::array<int64_t, 4> out{};
    for (size_t i = 0; i < 4; ++i) {
      out[i] = pads[i] + folded[i];
      check_window(n, "pads (with a Pad folded in) of", out[i], 0);
    }
    return out;
  }

  // Add a node through `make`, turning core's own refusal into one naming the ONNX node.
  NodeId add(const OnnxNode& n, const std::function<NodeId()>& make) {
    try {
      return make();
    } catch (const Error& e) {
      refuse(n, e.what());
    }
  }

  // An Add of a per-channel constant right after a bias-less conv, MatMul or Gemm (how
  // torchvision's ConvNeXt writes its MLP): folded into the layer's bias.
  std::optional<size_t> following_bias(const OnnxNode& n, int64_t channels) const {
    if (n.outputs.empty() || readers_.count(n.outputs[0]) == 0 || readers_.at(n.outputs[0]) != 1) {
      return std::nullopt;
    }
    const size_t j = reader_.at(n.outputs[0]);
    const OnnxNode& a = nodes_[j];
    if (j <= current_ || a.op_type != "Add" || a.inputs.size() != 2 || a.outputs.empty() ||
        a.outputs[0].empty() || a.outputs[0] == n.outputs[0]) {
      return std::nullopt;
    }
    const std::string& other = a.inputs[0] == n.outputs[0] ? a.inputs[1] : a.inputs[0];
    auto c = values_.find(other);
    if (c == values_.end() || !c->second.is_constant() || c->second.constant.numel() != channels ||
        c->second.constant.dim() > 1) {
      return std::nullopt;
    }
    return j;
  }
  bool bias_follows(const OnnxNode& n, int64_t channels) const {
    return !has_input(n, 2) && following_bias(n, channels).has_value();
  }
  void fold_following_bias(const OnnxNode& n, NodeId id) {
    if (has_input(n, 2)) return;
    const auto j = following_bias(n, result_.graph.node(id).channels);
    if (!j) return;
    const OnnxNode& a = nodes_[*j];
    const std::string& other = a.inputs[0] == n.outputs[0] ? a.inputs[1] : a.inputs[0];
    set_param(a, id, "bias", values_.at(other).constant.reshape({-1}));
    folded_.insert(a.outputs[0]);
    aliases_[a.outputs[0]] = n.outputs[0];
  }

  // Frozen (a per-channel affine of the running statistics), or with --batch-norm train batch
  // norm in training mode, whichever mode the file was exported in.
  void batch_norm(const OnnxNode& n) {
    const bool train = options_.batch_norm == BatchNormImport::kTrain;
    if (int_attr(n, "training_mode", 0) != 0 && !train) {
      refuse(n,
             "normalises with the batch's statistics (training mode): import it with "
             "--batch-norm train, or export the network in eval mode");
    }
    for (size_t i = 1; i < n.outputs.size(); ++i) {
      if (readers_.count(n.outputs[i])) refuse(n, "its updated running statistics are read");
    }
    const NodeId x = spatial(n, 0);
    const int64_t channels = result_.graph.node(x).channels;
    const at::Tensor scale = per_channel_constant(n, 1, "scale", channels);
    const at::Tensor bias = per_channel_constant(n, 2, "bias", channels);
    const at::Tensor mean = per_channel_constant(n, 3, "mean", channels);
    const at::Tensor var = per_channel_constant(n, 4, "variance", channels);
    const double eps = float_attr(n, "epsilon", 1e-5);
    // ONNX's momentum keeps that much of the running statistic; PyTorch's replaces that much.
    const double momentum = 1.0 - shortest_decimal(float_attr(n, "momentum", 0.9));
    const NodeId id = add(n, [&] {
      return train ? result_.graph.batch_norm(x, layer_name(n, 1), shortest_decimal(eps), momentum)
                   : result_.graph.frozen_batch_norm(x, layer_name(n, 1), eps);
    });
    train_batch_norms_ += train;
    set_param(n, id, "weight", scale);
    set_param(n, id, "bias", bias);
    set_param(n, id, "running_mean", mean, true);
    set_param(n, id, "running_var", var, true);
    set_output(n, activation(id));
  }

  void activation_op(const OnnxNode& n) {
    if (on_pooled(n)) {
      leave_out_head(n, "an activation after the pool, which Tessel's heads do not have");
      return;
    }
    const Value& xv = input(n, 0);
    const NodeId x = spatial(n, 0, true);
    core::Graph& g = result_.graph;
    const std::string& op = n.op_type;
    NodeId id = 0;
    if (op == "Relu") {
      id = g.relu(x);
    } else if (op == "LeakyRelu") {
      id = g.leaky_relu(x, float_attr(n, "alpha", 0.01));
    } else if (op == "Sigmoid") {
      id = g.sigmoid(x);
    } else if (op == "Tanh") {
      id = g.tanh(x);
    } else if (op == "Erf") {
      id = g.erf(x);
    } else if (op == "HardSwish") {
      id = g.hard_swish(x);
    } else if (op == "HardSigmoid") {
      id = g.hard_sigmoid(x, hard_sigmoid_alpha(n), float_attr(n, "beta", 0.5));
    } else if (op == "Silu") {
      id = g.silu(x);
    } else if (op == "Gelu") {
      const auto it = n.strings.find("approximate");
      id = it != n.strings.end() && it->second == "tanh" ? g.gelu_tanh(x) : g.gelu(x);
    } else {  // Clip: min and max as optional constant inputs (opset 11 on)
      constexpr double kInf = std::numeric_limits<double>::infinity();
      const auto bound = [&](size_t i, double fallback) {
        if (!has_input(n, i)) return fallback;
        const at::Tensor c = constant(n, i, i == 1 ? "minimum" : "maximum");
        if (c.numel() != 1) refuse(n, "its bounds are not single numbers");
        return c.to(at::kDouble).item<double>();
      };
      const double lo = bound(1, -kInf), hi = bound(2, kInf);
      id = add(n, [&] { return g.clamp(x, lo, hi); });
    }
    set_output(n, activation(id, xv.nhwc));
  }

  void identity(const OnnxNode& n) {
    // Dropout at inference is the identity; its mask output must be unused.
    if (n.op_type == "Dropout" && n.outputs.size() > 1 && readers_.count(n.outputs[1])) {
      refuse(n, "its mask output is read");
    }
    alias(n, 0);
  }

  void arithmetic(const OnnxNode& n) {
    if (n.inputs.size() != 2) refuse(n, "does not have two inputs");
    if (on_pooled(n)) {
      leave_out_head(n, "arithmetic after the pool, which Tessel's heads do not have");
      return;
    }
    const Value& a = input(n, 0);
    const Value& b = input(n, 1);
    if (a.is_constant() && b.is_constant()) {  // folded here
      const auto shape = broadcast(a.constant.sizes(), b.constant.sizes());
      if (!shape) {
        refuse(n, "its constants " + shape_str(a.constant) + " and " + shape_str(b.constant) +
                      " do not broadcast");
      }
      // A division by zero stays IEEE's infinity, as in ONNX: a layer that takes the constant
      // refuses a value that is not finite where it matters (Graph::scalar).
      const std::string& op = n.op_type;
      fold(n, count_values(*shape), [&] {
        return op == "Add"   ? a.constant + b.constant
               : op == "Sub" ? a.constant - b.constant
               : op == "Mul" ? a.constant * b.constant
                             : a.constant / b.constant;
      });
      return;
    }
    if (!a.is_constant() && !b.is_constant()) {
      binary(n, a, b);
      return;
    }
    with_constant(n, a.is_constant() ? b : a, a.is_constant() ? a.constant : b.constant,
                  a.is_constant());
  }

  void binary(const OnnxNode& n, const Value& a, const Value& b) {
    const NodeId x = spatial(n, 0, true), y = spatial(n, 1, true);
    if (a.nhwc != b.nhwc) refuse(n, "joins a channels-first and a channels-last activation");
    static const std::map<std::string, core::Binary> ops = {{"Add", core::Binary::kAdd},
                                                            {"Sub", core::Binary::kSub},
                                                            {"Mul", core::Binary::kMul},
                                                            {"Div", core::Binary::kDiv}};
    const NodeId id = add(n, [&] { return result_.graph.binary(x, y, ops.at(n.op_type)); });
    set_output(n, activation(id, a.nhwc));
  }

  // x op c, or c op x when `constant_first`: a scalar c is a scalar node, a per-channel c a
  // scale node (trainable: LayerScale).
  void with_constant(const OnnxNode& n, const Value& xv, const at::Tensor& c, bool constant_first) {
    const NodeId x = spatial(n, constant_first ? 1 : 0, true);
    const std::string& op = n.op_type;
    core::Graph& g = result_.graph;
    if (c.numel() == 1) {
      const double k = c.to(at::kDouble).item<double>();
      double scale = 1.0, shift = 0.0;
      if (op == "Add") {
        shift = k;
      } else if (op == "Sub") {
        scale = constant_first ? -1.0 : 1.0;
        shift = constant_first ? k : -k;
      } else if (op == "Mul") {
        scale = k;
      } else if (constant_first) {
        refuse(n, "divides a constant by the activation; Tessel has no reciprocal op");
      } else if (k == 0.0) {
        refuse(n, "divides by zero, which makes every value infinite");
      } else {
        scale = 1.0 / k;
      }
      const NodeId id = add(n, [&] { return g.scalar(x, scale, shift); });
      set_output(n, activation(id, xv.nhwc));
      return;
    }
    const int64_t channels = node(xv).channels;
    if (!per_channel(c, channels, xv.nhwc)) {
      refuse(n, "its constant " + shape_str(c) +
                    " is neither one number nor one per channel; a constant of the image's size "
                    "would fix the image size");
    }
    const at::Tensor flat = c.reshape({-1}).to(at::kDouble);
    if (op == "Div" && constant_first) {
      refuse(n, "divides a constant by the activation; Tessel has no reciprocal op");
    }
    if (op == "Div" && (flat == 0).any().item<bool>()) {
      refuse(n, "divides by a constant that holds a zero, which makes a channel infinite");
    }
    const bool additive = op == "Add" || op == "Sub";
    const NodeId id =
        add(n, [&] { return g.scale(x, additive, layer_name(n, constant_first ? 0 : 1)); });
    at::Tensor weight = at::ones({channels}, flat.options());
    if (op == "Mul") weight = flat;
    if (op == "Div") weight = 1.0 / flat;
    if (op == "Sub" && constant_first) weight = -weight;
    set_param(n, id, "weight", weight);
    if (additive) set_param(n, id, "bias", op == "Sub" && !constant_first ? -flat : flat);
    set_output(n, activation(id, xv.nhwc));
  }

  // A constant that broadcasts one value per channel: [C,1,1] or [1,C,1,1] channels-first,
  // [C] or [1,1,1,C] channels-last.
  static bool per_channel(const at::Tensor& c, int64_t channels, bool nhwc) {
    if (c.numel() != channels) return false;
    const auto s = c.sizes();
    if (nhwc) return s.back() == channels;
    if (c.dim() < 3) return false;
    return s[s.size() - 3] == channels && s[s.size() - 1] == 1 && s[s.size() - 2] == 1;
  }

  void pool(const OnnxNode& n) {
    const NodeId x = spatial(n, 0);
    if (n.outputs.size() > 1 && readers_.count(n.outputs[1])) refuse(n, "its indices are read");
    if (!n.ints.contains("kernel_shape")) refuse(n, "has no kernel_shape");
    const auto kernel = window_attr(n, "kernel_shape", {0, 0});
    const auto strides = window_attr(n, "strides", {1, 1});
    const auto dilations = window_attr(n, "dilations", {1, 1});
    const auto pads = window_pads(n, kernel, {0, 0, 0, 0});
    core::PoolSpec spec(1);
    spec.kernel(kernel[0], kernel[1])
        .stride(strides[0], strides[1])
        .padding(pads[0], pads[1], pads[2], pads[3])
        .ceil_mode(int_attr(n, "ceil_mode", 0) != 0);
    const bool max = n.op_type == "MaxPool";
    if (max) {
      if (dilations[0] != dilations[1]) refuse(n, "has different dilations along the two axes");
      spec.dilation(dilations[0]);
    } else {
      if (dilations != std::array<int64_t, 2>{1, 1}) refuse(n, "dilates an average pool");
      spec.count_include_pad(int_attr(n, "count_include_pad", 0) != 0);
    }
    core::Graph& g = result_.graph;
    const NodeId id = add(n, [&] { return max ? g.max_pool(x, spec) : g.avg_pool(x, spec); });
    set_output(n, activation(id));
  }

  void pad(const OnnxNode& n) {
    const auto it = n.strings.find("mode");
    if (it != n.strings.end() && it->second != "constant") {
      refuse(n, "pads with '" + it->second + "' values; Tessel folds only zero padding");
    }
    const Value& xv = input(n, 0);
    spatial(n, 0, false, true);
    const at::Tensor pads = constant(n, 1, "pads");
    if (pads.numel() != 8) {
      refuse(n, "has pads " + shape_str(pads) + ", not 8 numbers (begin and end of N, C, H, W)");
    }
    const at::Tensor p = pads.to(at::kLong).reshape({-1});
    if (has_input(n, 2)) {
      const at::Tensor value = constant(n, 2, "value");
      if (value.numel() != 1 || value.to(at::kDouble).item<double>() != 0.0) {
        refuse(n, "pads with a value other than zero");
      }
    }
    if (has_input(n, 3)) refuse(n, "pads chosen axes; Tessel reads pads for all four axes");
    const auto pad_at = [&](int64_t i) { return p[i].item<int64_t>(); };
    if (pad_at(0) || pad_at(1) || pad_at(4) || pad_at(5)) {
      refuse(n, "pads the batch or channel axis");
    }
    // A negative pad crops, which a Conv's zero padding cannot hold.
    Value v = xv;
    const std::array<int64_t, 4> image_axes{pad_at(2), pad_at(3), pad_at(6), pad_at(7)};
    for (size_t i = 0; i < 4; ++i) {
      check_window(n, "pads of", image_axes[i], 0);
      v.pad[i] = xv.pad[i] + image_axes[i];
      check_window(n, "pads (with the Pads before it) of", v.pad[i], 0);
    }
    set_output(n, v);
  }

  void concat(const OnnxNode& n) {
    std::vector<NodeId> xs;
    bool nhwc = false;
    int64_t channels = 0;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      xs.push_back(spatial(n, i, true));
      nhwc = input(n, i).nhwc;
      if (nhwc != input(n, 0).nhwc) refuse(n, "joins channels-first and channels-last activations");
      // Concats of concats double the channels: bounded before they overflow.
      channels += result_.graph.node(xs.back()).channels;
      if (channels > kMaxChannels) {
        refuse(n, "makes more than " + std::to_string(kMaxChannels) +
                      " channels, more than Tessel holds in one activation");
      }
    }
    const int64_t axis = int_attr(n, "axis", 1);
    if (!(nhwc ? axis == 3 || axis == -1 : axis == 1 || axis == -3)) {
      refuse(n, "concatenates along an axis other than the channels");
    }
    const NodeId id = add(n, [&] { return result_.graph.concat(xs); });
    set_output(n, activation(id, nhwc));
  }

  // Whether a Reduce or Squeeze node's axes (an attribute, or an input from opsets 13/18) are
  // exactly the image's height and width of an N×C×H×W value.
  bool on_height_and_width(const OnnxNode& n) const {
    std::vector<int64_t> axes = ints(n, "axes", {});
    if (has_input(n, 1)) axes = int_values(n, 1, "axes");
    for (int64_t& a : axes) a = a < 0 ? a + 4 : a;
    std::sort(axes.begin(), axes.end());
    return axes == std::vector<int64_t>{2, 3};
  }

  void global_pool(const OnnxNode& n) {
    const bool reduce = n.op_type.starts_with("Reduce");
    if (reduce) {
      if (!on_height_and_width(n)) {
        if (on_pooled(n)) return leave_out_head(n, "a reduction of the pooled vector");
        refuse(n, "reduces over axes other than the image's height and width");
      }
    }
    const NodeId x = spatial(n, 0);
    core::Graph& g = result_.graph;
    const bool max = n.op_type == "GlobalMaxPool" || n.op_type == "ReduceMax";
    const NodeId id = add(n, [&] { return max ? g.global_max_pool(x) : g.global_avg_pool(x); });
    set_output(n, activation(id));
  }

  // A constant's shape after ONNX's Reshape: 0 keeps the input's size there (unless allowzero),
  // -1 (once) takes the rest; refused where the count of values would change.
  std::vector<int64_t> reshaped(const OnnxNode& n, const at::Tensor& c) const {
    std::vector<int64_t> shape = int_values(n, 1, "shape");
    const bool allow_zero = int_attr(n, "allowzero", 0) != 0;
    int64_t known = 1, open = -1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 0 && !allow_zero) {
        if (static_cast<int64_t>(i) >= c.dim()) refuse(n, "keeps an axis its input lacks");
        shape[i] = c.size(static_cast<int64_t>(i));
      }
      if (shape[i] == -1 && open < 0) {
        open = static_cast<int64_t>(i);
      } else if (shape[i] < 0) {
        refuse(n, "reshapes to " + shape_str(shape) +
                      ", which has more than one -1 or a size "
                      "below -1");
      } else {
        known = count_values({known, shape[i]});
      }
    }
    if (open >= 0 && known > 0 && c.numel() % known == 0) shape[open] = c.numel() / known;
    if (count_values(shape) != c.numel() || (open >= 0 && known == 0)) {
      refuse(n, "reshapes its constant " + shape_str(c) + " to " + shape_str(shape) +
                    ", which holds another count of values");
    }
    return shape;
  }

  // ONNX's Flatten: two axes, those before `axis` and those from it.
  std::vector<int64_t> flattened(const OnnxNode& n, const at::Tensor& c) const {
    int64_t axis = int_attr(n, "axis", 1);
    if (axis < -c.dim() || axis > c.dim()) {
      refuse(n, "flattens at axis " + std::to_string(axis) + " of a constant " + shape_str(c));
    }
    if (axis < 0) axis += c.dim();
    const int64_t outer = count_values(c.sizes().slice(0, static_cast<size_t>(axis)));
    return {outer, outer == 0 ? 0 : c.numel() / outer};
  }

  // ONNX's Squeeze: the axes given (an attribute before opset 13, then an input), each of size
  // 1, or every axis of size 1.
  std::vector<int64_t> squeezed(const OnnxNode& n, const at::Tensor& c) const {
    std::vector<int64_t> axes = ints(n, "axes", {});
    if (has_input(n, 1)) axes = int_values(n, 1, "axes");
    std::vector<bool> drop(static_cast<size_t>(c.dim()), axes.empty());
    for (int64_t a : axes) {
      if (a < -c.dim() || a >= c.dim() || c.size(a) != 1) {
        refuse(n, "squeezes axis " + std::to_string(a) + " of a constant " + shape_str(c) +
                      ", which is not of size 1");
      }
      drop[static_cast<size_t>(a < 0 ? a + c.dim() : a)] = true;
    }
    std::vector<int64_t> shape;
    for (int64_t d = 0; d < c.dim(); ++d) {
      if (!drop[static_cast<size_t>(d)] || c.size(d) != 1) shape.push_back(c.size(d));
    }
    return shape;
  }

  // ONNX's Unsqueeze: axes of size 1 inserted (an attribute before opset 13, then an input),
  // each an axis of the result.
  std::vector<int64_t> unsqueezed(const OnnxNode& n, const at::Tensor& c) const {
    std::vector<int64_t> axes = ints(n, "axes", {});
    if (has_input(n, 1)) axes = int_values(n, 1, "axes");
    const int64_t rank = c.dim() + static_cast<int64_t>(axes.size());
    std::vector<bool> inserted(static_cast<size_t>(rank), false);
    for (int64_t a : axes) {
      if (a < -rank || a >= rank || inserted[static_cast<size_t>(a < 0 ? a + rank : a)]) {
        refuse(n, "inserts axis " + std::to_string(a) + " into a constant " + shape_str(c) +
                      " twice or outside its " + std::to_string(rank) + " axes");
      }
      inserted[static_cast<size_t>(a < 0 ? a + rank : a)] = true;
    }
    std::vector<int64_t> shape;
    int64_t d = 0;
    for (bool one : inserted) shape.push_back(one ? 1 : c.size(d++));
    return shape;
  }

  // Flatten, Reshape or Squeeze of the pooled N×C×1×1 value to N×C; Unsqueeze only of constants.
  void flatten(const OnnxNode& n) {
    const Value& xv = input(n, 0);
    if (xv.is_constant()) {  // shape arithmetic on constants: keep the constant's values
      const at::Tensor c = xv.constant;
      const std::vector<int64_t> shape = n.op_type == "Reshape"     ? reshaped(n, c)
                                         : n.op_type == "Flatten"   ? flattened(n, c)
                                         : n.op_type == "Unsqueeze" ? unsqueezed(n, c)
                                                                    : squeezed(n, c);
      return fold(n, c.numel(), [&] { return c.reshape(shape); });
    }
    if (n.op_type == "Unsqueeze") {
      if (on_pooled(n)) return leave_out_head(n, "an op Tessel's heads do not have");
      refuse(n, unsupported_reason(n.op_type));
    }
    if (xv.node >= 0 && node(xv).spatial()) {
      if (readers_.count(n.outputs.empty() ? "" : n.outputs[0]) &&
          nodes_[reader_.at(n.outputs[0])].op_type == "InstanceNormalization") {
        refuse(n,
               "begins a group norm in a form Tessel does not map; it maps PyTorch's (Reshape "
               "to [N, G, -1], InstanceNormalization with scale 1 and bias 0, Reshape back to "
               "the input's shape, Mul, Add)");
      }
      refuse(n, "reshapes the image's activation, which would fix the image size");
    }
    const int64_t channels = node(xv).channels;
    bool ok = true;
    if (n.op_type == "Flatten") {
      ok = int_attr(n, "axis", 1) == 1;
    } else if (n.op_type == "Reshape") {
      const std::vector<int64_t> s = int_values(n, 1, "shape");
      ok = s.size() == 2 && (s[1] == channels || s[1] == -1) && s[0] >= -1 && s[0] <= 1;
    } else {  // Squeeze
      ok = on_height_and_width(n);
    }
    if (!ok) return leave_out_head(n, "a reshape of the pooled vector other than to N×C");
    const NodeId id = add(n, [&] { return result_.graph.flatten(xv.node); });
    set_output(n, activation(id));
  }

  void gemm(const OnnxNode& n) {
    if (!on_pooled(n)) refuse(n, "multiplies the image's activation as a matrix");
    if (int_attr(n, "transA", 0) != 0 || float_attr(n, "alpha", 1.0) != 1.0 ||
        float_attr(n, "beta", 1.0) != 1.0) {
      return leave_out_head(n, "a Gemm with transA, alpha or beta");
    }
    at::Tensor w = constant(n, 1, "weight");
    if (w.dim() != 2) refuse(n, "its weight " + shape_str(w) + " is not a matrix");
    if (int_attr(n, "transB", 0) == 0) w = w.t();
    linear(n, w, has_input(n, 2) ? constant(n, 2, "bias") : at::Tensor());
  }

  void linear(const OnnxNode& n, const at::Tensor& w, at::Tensor bias) {
    const Value& xv = input(n, 0);
    if (xv.is_constant() || node(xv).spatial()) {
      refuse(n, "multiplies a value other than the pooled vector by the weight");
    }
    if (w.dim() != 2 || w.size(1) != node(xv).channels) {
      refuse(n, "its weight " + shape_str(w) + " does not fit " +
                    std::to_string(node(xv).channels) + " features");
    }
    const NodeId id =
        add(n, [&] { return result_.graph.linear(xv.node, w.size(0), layer_name(n, 1)); });
    set_param(n, id, "weight", w);
    if (bias.defined()) {
      set_param(n, id, "bias", bias.reshape({-1}));
    } else if (auto j = following_bias(n, w.size(0))) {
      fold_following_bias(n, id);
    } else {
      set_param(n, id, "bias", at::zeros({w.size(0)}));
    }
    set_output(n, activation(id));
  }

  // MatMul by a constant: on a channels-last activation a 1×1 convolution (torchvision's
  // ConvNeXt MLP); on the pooled vector a linear layer.
  void matmul(const OnnxNode& n) {
    const Value& xv = input(n, 0);
    if (!has_input(n, 1) || !input(n, 1).is_constant()) {
      refuse(n,
             "multiplies two activations (attention over all positions), which needs the "
             "whole image at once");
    }
    const at::Tensor w = input(n, 1).constant;
    if (w.dim() != 2) refuse(n, "its weight " + shape_str(w) + " is not a matrix");
    if (on_pooled(n)) return linear(n, w.t(), at::Tensor());
    const NodeId x = spatial(n, 0, true);
    if (!xv.nhwc) refuse(n, "multiplies a channels-first activation as a matrix");
    if (w.size(0) != node(xv).channels) {
      refuse(n, "its weight " + shape_str(w) + " does not fit " +
                    std::to_string(node(xv).channels) + " channels");
    }
    core::ConvSpec spec(w.size(0), w.size(1), 1);
    spec.bias(bias_follows(n, w.size(1)));
    const NodeId id = add(n, [&] { return result_.graph.conv(x, spec, layer_name(n, 1)); });
    set_param(n, id, "weight", w.t().reshape({w.size(1), w.size(0), 1, 1}));
    fold_following_bias(n, id);
    set_output(n, activation(id, true));
  }

  void transpose(const OnnxNode& n) {
    const Value& xv = input(n, 0);
    auto perm = ints(n, "perm", {});
    if (xv.is_constant()) {  // a weight the exporter stores transposed
      const at::Tensor& c = xv.constant;
      if (perm.empty()) {  // ONNX's default: the axes reversed
        for (int64_t d = c.dim() - 1; d >= 0; --d) perm.push_back(d);
      }
      std::vector<int64_t> sorted = perm;
      std::sort(sorted.begin(), sorted.end());
      std::vector<int64_t> axes(static_cast<size_t>(c.dim()));
      std::iota(axes.begin(), axes.end(), 0);
      if (sorted != axes) {
        refuse(n, "permutes a constant " + shape_str(c) + " by " + shape_str(perm) +
                      ", which is not an order of its axes");
      }
      return fold(n, c.numel(), [&] { return c.permute(perm).contiguous(); });
    }
    if (on_pooled(n)) return leave_out_head(n, "a transpose of the pooled vector");
    spatial(n, 0, true);
    Value v = xv;
    if (!xv.nhwc && perm == std::vector<int64_t>{0, 2, 3, 1}) {
      v.nhwc = true;
    } else if (xv.nhwc && perm == std::vector<int64_t>{0, 3, 1, 2}) {
      v.nhwc = false;
    } else {
      refuse(n, "permutes the axes other than channels-last and back");
    }
    set_output(n, v);
  }

  void layer_norm(const OnnxNode& n) {
    if (on_pooled(n)) return leave_out_head(n, "a LayerNorm after the pool");
    const Value& xv = input(n, 0);
    const NodeId x = spatial(n, 0, true);
    const int64_t axis = int_attr(n, "axis", -1);
    if (!xv.nhwc || (axis != -1 && axis != 3)) {
      refuse(n,
             "normalises over the image's positions, which needs the whole image; Tessel "
             "takes LayerNorm over the channels (channels-last, axis -1)");
    }
    const int64_t channels = node(xv).channels;
    const at::Tensor scale = per_channel_constant(n, 1, "scale", channels, true);
    const at::Tensor bias = has_input(n, 2) ? per_channel_constant(n, 2, "bias", channels, true)
                                            : at::zeros({channels});
    const double eps = float_attr(n, "epsilon", 1e-5);
    const NodeId id = add(n, [&] { return result_.graph.channel_norm(x, eps, layer_name(n, 1)); });
    set_param(n, id, "weight", scale);
    set_param(n, id, "bias", bias);
    set_output(n, activation(id, true));
  }

  // A fused squeeze-and-excitation block (pipelines/onnx_fuse.h): x, then fc1's weight and bias,
  // fc2's weight and bias (a bias left out is zero).
  void squeeze_excite(const OnnxNode& n) {
    const NodeId x = spatial(n, 0);
    const int64_t channels = result_.graph.node(x).channels;
    const at::Tensor w1 = constant(n, 1, "first weight");
    if (w1.dim() != 4 || w1.size(1) != channels || w1.size(2) != 1 || w1.size(3) != 1 ||
        w1.size(0) < 1 || w1.size(0) > kMaxChannels) {
      refuse(n, "its first Conv's weight " + shape_str(w1) + " is not [S, " +
                    std::to_string(channels) + ", 1, 1]");
    }
    const int64_t squeeze = w1.size(0);
    const at::Tensor w2 = constant(n, 3, "second weight");
    if (w2.sizes() != at::IntArrayRef{channels, squeeze, 1, 1}) {
      refuse(n, "its second Conv's weight " + shape_str(w2) + " is not [" +
                    std::to_string(channels) + ", " + std::to_string(squeeze) + ", 1, 1]");
    }
    const auto bias = [&](size_t i, int64_t size) {
      return has_input(n, i) ? per_channel_constant(n, i, "bias", size) : at::zeros({size});
    };
    const at::Tensor b1 = bias(2, squeeze), b2 = bias(4, channels);
    // The fuser names them; a file's own node of this name must too.
    const auto act = n.strings.find("activation"), gate = n.strings.find("gate");
    if (act == n.strings.end() || gate == n.strings.end()) {
      refuse(n, "has no 'activation' or 'gate' attribute");
    }
    core::SqueezeSpec spec;
    spec.squeeze_channels = squeeze;
    spec.activation = act->second == "Silu" ? core::Pointwise::kSilu : core::Pointwise::kRelu;
    if (gate->second == "HardSigmoid") {
      spec.gate = core::Pointwise::kHardSigmoid;
      spec.gate_coeff = {hard_sigmoid_alpha(n), float_attr(n, "beta", 0.5)};
    } else {
      spec.gate = core::Pointwise::kSigmoid;
    }
    // "features.1.block.1" from "features.1.block.1.fc1.weight" (torchvision), "blocks.1.0.se"
    // from "blocks.1.0.se.conv_reduce.weight" (timm).
    std::string name = n.inputs[1];
    if (name.ends_with(".weight")) name.resize(name.size() - 7);
    if (const size_t dot = name.rfind('.'); dot != std::string::npos) name.resize(dot);
    const NodeId id =
        add(n, [&] { return result_.graph.squeeze_excite(x, spec, plain_layer_name(name)); });
    set_param(n, id, "fc1.weight", w1);
    set_param(n, id, "fc1.bias", b1);
    set_param(n, id, "fc2.weight", w2);
    set_param(n, id, "fc2.bias", b2);
    set_output(n, activation(id));
  }

  // A fused group norm (pipelines/onnx_fuse.h): x, the weight and the bias (any shape holding
  // one value per channel; left out: 1 and 0).
  void group_norm(const OnnxNode& n) {
    const NodeId x = spatial(n, 0);
    const int64_t channels = result_.graph.node(x).channels;
    const int64_t groups = int_attr(n, "groups", 1);
    const at::Tensor weight = has_input(n, 1) ? per_channel_constant(n, 1, "weight", channels, true)
                                              : at::ones({channels});
    const at::Tensor bias = has_input(n, 2) ? per_channel_constant(n, 2, "bias", channels, true)
                                            : at::zeros({channels});
    const double eps = shortest_decimal(float_attr(n, "epsilon", 1e-5));
    const NodeId id =
        add(n, [&] { return result_.graph.group_norm(x, groups, layer_name(n, 1), eps); });
    set_param(n, id, "weight", weight);
    set_param(n, id, "bias", bias);
    set_output(n, activation(id));
  }

  // ---- the end ----

  void finish() {
    if (model_.outputs.size() != 1) {
      throw Error("ONNX file " + model_.file.string() + " has " +
                  std::to_string(model_.outputs.size()) + " outputs; Tessel takes one");
    }
    // A folded node's output already holds its layer's value (run()).
    const std::string& out = model_.outputs[0];
    auto it = values_.find(out);
    if (it == values_.end()) {
      throw Error("ONNX file " + model_.file.string() + ": no node makes the output '" + out + "'");
    }
    const core::Graph& g = result_.graph;
    if (!head_left_out_.empty()) {
      result_.notes.push_back("the head after the global pool is left out (at " + head_left_out_ +
                              "): a run puts its own head on the trunk");
    } else if (!it->second.left_out_from.empty()) {
      const core::OpKind last = g.node(g.output()).kind;
      if (last != OpKind::kGlobalAvgPool && last != OpKind::kGlobalMaxPool &&
          !g.node(g.output()).spatial()) {
        partial_head_ = it->second.left_out_from;
      }
      result_.notes.push_back("the head from " + it->second.left_out_from +
                              " on is left out: a run puts its own head on the trunk");
    } else if (it->second.is_constant()) {
      throw Error("ONNX file " + model_.file.string() + ": the output is a constant");
    } else if (it->second.node != g.output()) {
      throw Error("ONNX file " + model_.file.string() + ": its output '" + out +
                  "' is not the last layer Tessel mapped (" + g.node(g.output()).name + ")");
    } else {
      result_.has_head = g.node(g.output()).kind == OpKind::kLinear;
    }
    if (g.size() < 2) throw Error("ONNX file " + model_.file.string() + " has no layers");
    const core::Node& last = g.node(g.output());
    if (last.spatial() && it->second.nhwc) {
      throw Error("ONNX file " + model_.file.string() + ": the network ends channels-last");
    }
  }

  const OnnxModel& model_;
  ImportOptions options_;
  std::string head_left_out_, partial_head_;
  ImportedNetwork result_;
  int train_batch_norms_ = 0;
  std::vector<OnnxNode> nodes_;
  size_t current_ = 0;
  std::map<std::string, Value> values_;
  std::map<std::string, int> readers_;
  std::map<std::string, size_t> reader_;        // a value's reader (the one, where readers_ is 1)
  std::set<std::string> folded_;                // outputs of nodes folded into a layer
  std::map<std::string, std::string> aliases_;  // a folded node's output → its layer's
  at::ScalarType dtype_ = at::kFloat;
  int64_t folded_values_ = 0, fold_budget_ = kFoldedValues;
};

}  // namespace

ImportedNetwork import_onnx(const io::OnnxModel& model, const ImportOptions& options) {
  Importer importer(model, options);
  ImportedNetwork net = importer.run();
  // A head left out after part of it was mapped (MobileNetV3's linear, hard swish, linear): the
  // trunk ends at the global pool instead, as for a head left out at once.
  if (!importer.partial_head().empty()) {
    return Importer(model, options, importer.partial_head()).run();
  }
  return net;
}

}  // namespace tessel::pipelines
