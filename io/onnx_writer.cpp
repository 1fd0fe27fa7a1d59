#include "io/onnx_writer.h"

#include <ATen/ATen.h>
#include <onnx/onnx_pb.h>
#include <torch/nn/module.h>

#include <bit>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <numbers>
#include <set>
#include <vector>

#include "core/error.h"
#include "io/durable.h"

namespace tessel::io {
namespace {

static_assert(std::endian::native == std::endian::little,
              "ONNX raw_data is little-endian; this writer copies the tensors' bytes as they are");

using core::Node;
using core::OpKind;
using core::Pointwise;

// The dtype every weight is written in: the parameters' own (float32 or float64).
at::ScalarType weights_dtype(const core::Graph& graph, const std::filesystem::path& file) {
  for (const Node& n : graph.nodes()) {
    if (!n.layer) continue;
    for (const auto& p : n.layer->named_parameters(false)) {
      const at::ScalarType type = p.value().scalar_type();
      if (type != at::kFloat && type != at::kDouble) {
        throw Error("ONNX file " + file.string() + ": the network's weights are " +
                    std::string(c10::toString(type)) +
                    "; Tessel exports float32 or float64 weights");
      }
      return type;
    }
  }
  return at::kFloat;
}

// Whether `v` survives a float32 attribute unchanged (ONNX's FLOAT attributes are float32). With
// float32 weights LibTorch rounds an op's scalar to float32 as the attribute does; with float64
// weights an attribute that float32 cannot hold is written as arithmetic on float64 constants.
bool exact_in_float(double v) { return static_cast<double>(static_cast<float>(v)) == v; }

class Writer {
 public:
  Writer(const core::Graph& graph, const std::filesystem::path& file)
      : g_(graph), file_(file), dtype_(weights_dtype(graph, file)) {}

  std::string run(const std::string& producer, const std::map<std::string, std::string>& metadata) {
    if (g_.size() < 2) fail("the network has no layers");
    onnx::ModelProto model;
    model.set_ir_version(kExportIrVersion);
    onnx::OperatorSetIdProto* opset = model.add_opset_import();
    opset->set_domain("");
    opset->set_version(kExportOpset);
    const size_t space = producer.find(' ');
    model.set_producer_name(producer.substr(0, space));
    if (space != std::string::npos) model.set_producer_version(producer.substr(space + 1));
    for (const auto& [key, text] : metadata) {
      onnx::StringStringEntryProto* entry = model.add_metadata_props();
      entry->set_key(key);
      entry->set_value(text);
    }
    graph_ = model.mutable_graph();
    graph_->set_name("tessel");

    taken_ = {"image", "output"};
    values_.resize(static_cast<size_t>(g_.size()));
    values_[0] = "image";
    add_value_info(graph_->add_input(), "image", g_.node(g_.input()), true);
    for (const Node& n : g_.nodes()) {
      if (n.kind == OpKind::kInput) continue;
      current_ = &n;
      values_[static_cast<size_t>(n.id)] = n.id == g_.output() ? "output" : unique(n.name);
      write(n);
    }
    current_ = nullptr;
    add_value_info(graph_->add_output(), "output", g_.node(g_.output()), false);
    std::string bytes;
    if (!model.SerializeToString(&bytes)) fail("the model could not be serialised");
    return bytes;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    std::string where;
    if (current_) where = "layer '" + current_->name + "' (" + core::describe(*current_) + "): ";
    throw Error("ONNX file " + file_.string() + ": " + where + why);
  }

  onnx::TensorProto::DataType onnx_type() const {
    return dtype_ == at::kDouble ? onnx::TensorProto::DOUBLE : onnx::TensorProto::FLOAT;
  }

  // An N×C×H×W image (or the N×K pooled output): batch and spatial sizes left open.
  void add_value_info(onnx::ValueInfoProto* v, const std::string& name, const Node& n, bool input) {
    v->set_name(name);
    onnx::TypeProto::Tensor* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx_type());
    onnx::TensorShapeProto* shape = t->mutable_shape();
    shape->add_dim()->set_dim_param("batch");
    shape->add_dim()->set_dim_value(n.channels);
    if (!n.spatial()) return;
    if (input) {
      shape->add_dim()->set_dim_param("height");
      shape->add_dim()->set_dim_param("width");
    } else {
      shape->add_dim();  // the output's size follows the image's: unknown here
      shape->add_dim();
    }
  }

  // A value name no other value has: `base`, else `base_2`, `base_3`, ...
  std::string unique(const std::string& base) {
    std::string name = base;
    for (int i = 2; taken_.contains(name); ++i) name = base + "_" + std::to_string(i);
    taken_.insert(name);
    return name;
  }

  const std::string& value(core::NodeId id) const { return values_.at(static_cast<size_t>(id)); }
  const std::string& out() const { return value(current_->id); }
  const std::string& in(size_t i = 0) const { return value(current_->inputs.at(i)); }

  // A node of the current layer. `output` empty: a fresh intermediate "<layer>/<step>".
  onnx::NodeProto* add(const std::string& op, std::initializer_list<std::string> inputs,
                       const std::string& step, const std::string& output = "") {
    onnx::NodeProto* node = graph_->add_node();
    node->set_op_type(op);
    const std::string result = output.empty() ? unique(current_->name + "/" + step) : output;
    node->set_name(output.empty() ? result : current_->name);
    for (const std::string& i : inputs) node->add_input(i);
    node->add_output(result);
    return node;
  }
  static const std::string& output_of(const onnx::NodeProto* node) { return node->output(0); }

  static void set(onnx::NodeProto* node, const std::string& name, int64_t v) {
    onnx::AttributeProto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void set(onnx::NodeProto* node, const std::string& name, std::vector<int64_t> v) {
    onnx::AttributeProto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void set_float(onnx::NodeProto* node, const std::string& name, double v) {
    onnx::AttributeProto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(static_cast<float>(v));
  }

  // An initializer of the weights' dtype, its bytes as they are in memory (little-endian).
  std::string initializer(const std::string& name, const at::Tensor& t) {
    const at::Tensor c = t.detach().to(at::kCPU, dtype_).contiguous();
    onnx::TensorProto* p = graph_->add_initializer();
    const std::string unique_name = unique(name);
    p->set_name(unique_name);
    p->set_data_type(onnx_type());
    for (int64_t d : c.sizes()) p->add_dims(d);
    p->set_raw_data(std::string(static_cast<const char*>(c.data_ptr()), c.nbytes()));
    return unique_name;
  }
  // A scalar constant "<layer>/<what>" (not a parameter: none of the module's names).
  std::string constant(const std::string& what, double v) {
    return initializer(current_->name + "/" + what,
                       at::scalar_tensor(v, at::TensorOptions().dtype(at::kDouble)));
  }
  // The layer's parameter or buffer as the module names it, "<layer>.<name>".
  std::string parameter(const char* name, std::vector<int64_t> shape = {}) {
    at::Tensor t;
    if (current_->layer) {  // recursive: squeeze-and-excitation's "fc1.weight"
      if (auto* p = current_->layer->named_parameters(true).find(name)) t = *p;
      if (auto* b = current_->layer->named_buffers(true).find(name)) t = *b;
    }
    if (!t.defined()) fail(std::string("has no parameter '") + name + "'");
    return initializer(current_->name + "." + name, shape.empty() ? t : t.reshape(shape));
  }
  bool has_parameter(const char* name) const {
    return current_->layer && current_->layer->named_parameters(false).find(name) != nullptr;
  }

  // ---- ops ----

  void write(const Node& n) {
    switch (n.kind) {
      case OpKind::kInput:
        return;
      case OpKind::kConv:
        return conv(n);
      case OpKind::kMaxPool:
      case OpKind::kAvgPool:
        return pool(n);
      case OpKind::kPointwise:
        return pointwise(n);
      case OpKind::kBinary: {
        static const char* const kOps[] = {"Add", "Sub", "Mul", "Div"};
        add(kOps[static_cast<int>(n.binary)], {in(0), in(1)}, "", out());
        return;
      }
      case OpKind::kBarrier:
        return barrier(n);
      case OpKind::kConcat: {
        onnx::NodeProto* node = add("Concat", {}, "", out());
        node->clear_input();
        for (core::NodeId i : n.inputs) node->add_input(value(i));
        set(node, "axis", int64_t{1});
        return;
      }
      case OpKind::kGlobalAvgPool:
      case OpKind::kGlobalMaxPool: {
        // ONNX keeps N×C×1×1; core's pooled value is N×C.
        const bool avg = n.kind == OpKind::kGlobalAvgPool;
        const auto* pooled = add(avg ? "GlobalAveragePool" : "GlobalMaxPool", {in()}, "pool");
        set(add("Flatten", {output_of(pooled)}, "", out()), "axis", int64_t{1});
        return;
      }
      case OpKind::kFlatten:  // of the pooled N×C: unchanged
        set(add("Flatten", {in()}, "", out()), "axis", int64_t{1});
        return;
      case OpKind::kAttentionPool:
        return attention_pool(n);
      case OpKind::kLinear: {
        if (n.groups == 1) {
          set(add("Gemm", {in(), parameter("weight"), parameter("bias")}, "", out()), "transB",
              int64_t{1});
          return;
        }
        // Grouped (CLAM-MB's per-class classifiers): N×G×1×(in/G) times G×(in/G)×(out/G).
        const int64_t g = n.groups, out_per = n.channels / g;
        const at::Tensor w = current_->layer->named_parameters(false)["weight"];
        const int64_t in_per = w.size(1);
        const auto* x = add("Reshape", {in(), shape_constant("grouped", {0, g, 1, in_per})}, "x");
        const std::string weight = initializer(
            n.name + ".weight", w.detach().reshape({g, out_per, in_per}).transpose(1, 2));
        const auto* y = add("MatMul", {output_of(x), weight}, "matmul");
        const auto* flat = add("Reshape", {output_of(y), shape_constant("flat", {0, -1})}, "flat");
        add("Add", {output_of(flat), parameter("bias")}, "", out());
        return;
      }
      case OpKind::kDropout:  // inference
        add("Identity", {in()}, "", out());
        return;
    }
    fail("is an op the ONNX writer does not know");
  }

  void conv(const Node& n) {
    const core::ConvSpec& c = *n.conv;
    onnx::NodeProto* node = add("Conv", {in(), parameter("weight")}, "", out());
    if (c.bias_) node->add_input(parameter("bias"));
    set(node, "kernel_shape", {c.kernel_size[0], c.kernel_size[1]});
    set(node, "strides", {c.stride_[0], c.stride_[1]});
    set(node, "pads", {c.padding_[0], c.padding_[1], c.padding_end_[0], c.padding_end_[1]});
    set(node, "dilations", {c.dilation_[0], c.dilation_[1]});
    set(node, "group", c.groups_);
  }

  void pool(const Node& n) {
    const core::PoolSpec& p = *n.pool;
    const bool max = n.kind == OpKind::kMaxPool;
    bool ceil = p.ceil_mode_;
    bool include_pad = p.count_include_pad_;
    const bool divisor = !max && p.divisor_override_ > 0;
    if (divisor) {
      // sums / d = AveragePool(count_include_pad) · (kernel area / d) wherever every window lies
      // inside the padded input, so that its divisor is the kernel's area. Ceil mode with a
      // stride above 1 adds windows that run past it, whose divisor depends on the image size.
      // With stride 1, ceil mode adds no window at all.
      if (ceil && (p.stride_[0] > 1 || p.stride_[1] > 1)) {
        fail(
            "an average pool with divisor_override in ceil mode has no exact ONNX form (the "
            "windows that run past the image divide by a count that depends on its size)");
      }
      ceil = false;
      include_pad = true;
    }
    onnx::NodeProto* node =
        add(max ? "MaxPool" : "AveragePool", {in()}, "pool", divisor ? "" : out());
    set(node, "kernel_shape", {p.kernel_size[0], p.kernel_size[1]});
    set(node, "strides", {p.stride_[0], p.stride_[1]});
    set(node, "pads", {p.padding_[0], p.padding_[1], p.padding_end_[0], p.padding_end_[1]});
    set(node, "ceil_mode", int64_t{ceil});
    if (max) {
      set(node, "dilations", {p.dilation_[0], p.dilation_[1]});
    } else {
      set(node, "count_include_pad", int64_t{include_pad});
    }
    if (divisor) {
      const double area = static_cast<double>(p.kernel_size[0] * p.kernel_size[1]);
      add("Mul",
          {output_of(node),
           constant("area_over_divisor", area / static_cast<double>(p.divisor_override_))},
          "", out());
    }
  }

  // As PyTorch exports these in eval mode: batch norm with its running statistics (and the
  // momentum, which a re-import in training mode reads back), group norm as Reshape,
  // InstanceNormalization, Reshape, Mul, Add (opset 17 has no GroupNormalization), squeeze-and-
  // excitation as its global pool, two 1×1 Convs, activation, gate and Mul.
  void barrier(const Node& n) {
    switch (n.barrier) {
      case core::BarrierOp::kBatchNorm: {
        auto* node = add("BatchNormalization",
                         {in(), parameter("weight"), parameter("bias"), parameter("running_mean"),
                          parameter("running_var")},
                         "", out());
        set_float(node, "epsilon", n.eps);
        set_float(node, "momentum", 1.0 - n.momentum);  // ONNX's keeps, PyTorch's replaces
        return;
      }
      case core::BarrierOp::kGroupNorm: {
        const auto* shape = add("Shape", {in()}, "shape");
        const auto* grouped =
            add("Reshape", {in(), shape_constant("groups", {0, n.groups, -1})}, "grouped");
        const std::vector<int64_t> groups{n.groups};
        auto* norm = add("InstanceNormalization",
                         {output_of(grouped), initializer(n.name + "/ones", at::ones(groups)),
                          initializer(n.name + "/zeros", at::zeros(groups))},
                         "norm");
        set_float(norm, "epsilon", n.eps);
        const auto* back = add("Reshape", {output_of(norm), output_of(shape)}, "ungrouped");
        const std::vector<int64_t> per_channel{n.channels, 1, 1};
        const auto* mul = add("Mul", {output_of(back), parameter("weight", per_channel)}, "mul");
        add("Add", {output_of(mul), parameter("bias", per_channel)}, "", out());
        return;
      }
      case core::BarrierOp::kSqueezeExcite: {
        const core::SqueezeSpec& se = *n.squeeze;
        const auto* pooled = add("GlobalAveragePool", {in()}, "squeeze");
        const auto* fc1 =
            add("Conv", {output_of(pooled), parameter("fc1.weight"), parameter("fc1.bias")}, "fc1");
        std::string h = output_of(fc1);
        if (se.activation == Pointwise::kSilu) {
          const auto* sigmoid = add("Sigmoid", {h}, "act_sigmoid");
          h = output_of(add("Mul", {h, output_of(sigmoid)}, "act"));
        } else {
          h = output_of(add("Relu", {h}, "act"));
        }
        const auto* fc2 = add("Conv", {h, parameter("fc2.weight"), parameter("fc2.bias")}, "fc2");
        const std::string gate =
            se.gate == Pointwise::kHardSigmoid
                ? hard_sigmoid(output_of(fc2), se.gate_coeff[0], se.gate_coeff[1], "gate")
                : output_of(add("Sigmoid", {output_of(fc2)}, "gate"));
        add("Mul", {in(), gate}, "", out());
        return;
      }
    }
    fail("is a barrier the ONNX writer does not know");
  }

  // N×(B+C)×H×W → N×(B·C): the softmax over the positions of the B score channels weights the
  // C feature channels (core/exec/attention.h), branch-major as core's.
  void attention_pool(const Node& n) {
    const int64_t b = n.branches;
    const auto* flat = add("Reshape", {in(), shape_constant("flat", {0, 0, -1})}, "flat");
    const std::string axes = shape_constant("axes", {1});
    const auto* scores = add("Slice",
                             {output_of(flat), shape_constant("scores_begin", {0}),
                              shape_constant("scores_end", {b}), axes},
                             "scores");
    const auto* features =
        add("Slice",
            {output_of(flat), shape_constant("features_begin", {b}),
             shape_constant("features_end", {std::numeric_limits<int64_t>::max()}), axes},
            "features");
    auto* alpha = add("Softmax", {output_of(scores)}, "alpha");
    set(alpha, "axis", int64_t{2});
    auto* by_position = add("Transpose", {output_of(features)}, "features_t");
    set(by_position, "perm", std::vector<int64_t>{0, 2, 1});
    const auto* pooled = add("MatMul", {output_of(alpha), output_of(by_position)}, "pooled");
    set(add("Flatten", {output_of(pooled)}, "", out()), "axis", int64_t{1});
  }

  // An int64 constant (a Reshape's shape).
  std::string shape_constant(const std::string& what, const std::vector<int64_t>& values) {
    const at::Tensor t = at::tensor(values, at::kLong);
    onnx::TensorProto* p = graph_->add_initializer();
    const std::string name = unique(current_->name + "/" + what);
    p->set_name(name);
    p->set_data_type(onnx::TensorProto::INT64);
    p->add_dims(t.numel());
    p->set_raw_data(std::string(static_cast<const char*>(t.data_ptr()), t.nbytes()));
    return name;
  }

  // max(0, min(1, alpha·x + beta)) into `output` (empty: a fresh "<layer>/<step>"): ONNX's
  // HardSigmoid where its float32 attributes hold the coefficients, else as float64 arithmetic.
  std::string hard_sigmoid(const std::string& x, double alpha, double beta, const std::string& step,
                           const std::string& output = "") {
    if (dtype_ == at::kFloat || (exact_in_float(alpha) && exact_in_float(beta))) {
      auto* node = add("HardSigmoid", {x}, step, output);
      set_float(node, "alpha", alpha);
      set_float(node, "beta", beta);
      return output_of(node);
    }
    const auto* mul = add("Mul", {x, constant("alpha", alpha)}, step + "_mul");
    const auto* plus = add("Add", {output_of(mul), constant("beta", beta)}, step + "_add");
    return output_of(
        add("Clip", {output_of(plus), constant("min", 0.0), constant("max", 1.0)}, step, output));
  }

  void pointwise(const Node& n) {
    const std::string& x = in();
    switch (n.pointwise) {
      case Pointwise::kIdentity:
        add("Identity", {x}, "", out());
        return;
      case Pointwise::kRelu:
        add("Relu", {x}, "", out());
        return;
      case Pointwise::kLeakyRelu:
        if (dtype_ == at::kFloat || exact_in_float(n.slope)) {
          set_float(add("LeakyRelu", {x}, "", out()), "alpha", n.slope);
        } else {
          // relu(x) − slope · relu(−x): exact, with the slope as a float64 constant.
          const auto* neg = add("Mul", {x, constant("minus_one", -1.0)}, "neg");
          const auto* relu_neg = add("Relu", {output_of(neg)}, "relu_neg");
          const auto* scaled = add("Mul", {output_of(relu_neg), constant("slope", n.slope)}, "mul");
          const auto* relu = add("Relu", {x}, "relu");
          add("Sub", {output_of(relu), output_of(scaled)}, "", out());
        }
        return;
      case Pointwise::kGelu: {
        // x · (1 + erf(x / √2)) · 0.5: opset 17 has no Gelu; what torch.onnx writes.
        const auto* div = add("Div", {x, constant("sqrt2", std::numbers::sqrt2)}, "div");
        const auto* erf = add("Erf", {output_of(div)}, "erf");
        const auto* plus = add("Add", {output_of(erf), constant("one", 1.0)}, "add");
        const auto* mul = add("Mul", {output_of(plus), x}, "mul");
        add("Mul", {output_of(mul), constant("half", 0.5)}, "", out());
        return;
      }
      case Pointwise::kGeluTanh: {
        // 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³))) (Hendrycks & Gimpel), x³ as
        // products: what at::gelu(x, "tanh") computes.
        const double beta = std::numbers::sqrt2 * std::numbers::inv_sqrtpi, kappa = 0.044715;
        const auto* square = add("Mul", {x, x}, "square");
        const auto* cube = add("Mul", {output_of(square), x}, "cube");
        const auto* term = add("Mul", {output_of(cube), constant("kappa", kappa)}, "kappa_cube");
        const auto* inner = add("Add", {x, output_of(term)}, "inner");
        const auto* scaled = add("Mul", {output_of(inner), constant("beta", beta)}, "scaled");
        const auto* tanh = add("Tanh", {output_of(scaled)}, "tanh");
        const auto* plus = add("Add", {output_of(tanh), constant("one", 1.0)}, "add");
        const auto* half = add("Mul", {x, constant("half", 0.5)}, "half_x");
        add("Mul", {output_of(half), output_of(plus)}, "", out());
        return;
      }
      case Pointwise::kSilu: {
        const auto* sigmoid = add("Sigmoid", {x}, "sigmoid");
        add("Mul", {x, output_of(sigmoid)}, "", out());
        return;
      }
      case Pointwise::kSigmoid:
        add("Sigmoid", {x}, "", out());
        return;
      case Pointwise::kTanh:
        add("Tanh", {x}, "", out());
        return;
      case Pointwise::kErf:
        add("Erf", {x}, "", out());
        return;
      case Pointwise::kHardSwish:
        add("HardSwish", {x}, "", out());
        return;
      case Pointwise::kHardSigmoid:
        hard_sigmoid(x, n.coeff[0], n.coeff[1], "hard_sigmoid", out());
        return;
      case Pointwise::kClamp: {
        // A side at infinity is left out (Clip's inputs are optional).
        const double lo = n.coeff[0], hi = n.coeff[1];
        auto* node = add("Clip", {x}, "", out());
        if (std::isfinite(lo) || std::isfinite(hi)) {
          node->add_input(std::isfinite(lo) ? constant("min", lo) : "");
        }
        if (std::isfinite(hi)) node->add_input(constant("max", hi));
        return;
      }
      case Pointwise::kScalar: {
        const double scale = n.coeff[0], shift = n.coeff[1];
        if (scale == 1.0 && shift == 0.0) {
          add("Identity", {x}, "", out());
        } else if (shift == 0.0) {
          add("Mul", {x, constant("scale", scale)}, "", out());
        } else if (scale == 1.0) {
          add("Add", {x, constant("shift", shift)}, "", out());
        } else {
          const auto* mul = add("Mul", {x, constant("scale", scale)}, "mul");
          add("Add", {output_of(mul), constant("shift", shift)}, "", out());
        }
        return;
      }
      case Pointwise::kScale: {
        const std::vector<int64_t> per_channel{1, n.channels, 1, 1};
        if (!has_parameter("bias")) {
          add("Mul", {x, parameter("weight", per_channel)}, "", out());
          return;
        }
        const auto* mul = add("Mul", {x, parameter("weight", per_channel)}, "mul");
        add("Add", {output_of(mul), parameter("bias", per_channel)}, "", out());
        return;
      }
      case Pointwise::kAffine: {
        auto* node = add("BatchNormalization",
                         {x, parameter("weight"), parameter("bias"), parameter("running_mean"),
                          parameter("running_var")},
                         "", out());
        set_float(node, "epsilon", n.eps);
        return;
      }
      case Pointwise::kChannelNorm: {
        // LayerNorm over each position's channels, channels-last and back (ConvNeXt's
        // LayerNorm2d, as torch.onnx writes it).
        auto* last = add("Transpose", {x}, "to_nhwc");
        set(last, "perm", {0, 2, 3, 1});
        auto* norm = add("LayerNormalization",
                         {output_of(last), parameter("weight"), parameter("bias")}, "norm");
        set(norm, "axis", int64_t{-1});
        set_float(norm, "epsilon", n.eps);
        set(add("Transpose", {output_of(norm)}, "", out()), "perm", {0, 3, 1, 2});
        return;
      }
      case Pointwise::kDropout:  // inference
        add("Identity", {x}, "", out());
        return;
    }
    fail("is a pointwise op the ONNX writer does not know");
  }

  const core::Graph& g_;
  std::filesystem::path file_;
  at::ScalarType dtype_;
  onnx::GraphProto* graph_ = nullptr;
  const Node* current_ = nullptr;
  std::vector<std::string> values_;  // per core node, the ONNX value that holds its output
  std::set<std::string> taken_;      // value names in use
};

}  // namespace

void write_onnx(const core::Graph& graph, const std::filesystem::path& file,
                const std::string& producer, const std::map<std::string, std::string>& metadata) {
  const std::string bytes = Writer(graph, file).run(producer, metadata);
  write_file_atomically(file, bytes, "ONNX file");
}

}  // namespace tessel::io
