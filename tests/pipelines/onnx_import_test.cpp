// ONNX import (issue 19) against PyTorch: networks exported by tests/onnx/make_networks.py (random
// weights, torchvision and timm) are imported, and Tessel's forward must equal PyTorch's on the
// same image (float32 1e-4, float64 1e-10); tiled training steps of each imported network must
// equal plain autograd; networks Tessel cannot tile are refused with the node and the reason.
// Barriers (issue 20): squeeze-and-excitation and group norm come in as one node each, batch norm
// in training mode when asked, and a tiled train-mode step of a network PyTorch exported gives
// PyTorch's own train-mode gradients and running statistics (tests/onnx/make_barrier_check.py).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/exec/executor.h"
#include "core/exec/gradcheck.h"
#include "core/exec/tile_ops.h"
#include "core/plan/planner.h"
#include "core/tile_source.h"
#include "io/onnx_model.h"
#include "pipelines/onnx_import.h"
#include "tests/io/temp_folder.h"
#include "tests/run_cli.h"

namespace tessel::pipelines {
namespace {

namespace fs = std::filesystem;

const fs::path kNets = TESSEL_ONNX_NETS;
const fs::path kBarrierCheck = TESSEL_BARRIER_CHECK;

nlohmann::json info(const std::string& name) {
  std::ifstream in(kNets / (name + ".json"));
  if (!in) throw Error("no " + (kNets / (name + ".json")).string() + ": run make_networks.py");
  return nlohmann::json::parse(in);
}

at::Tensor raw(const std::string& file, const std::vector<int64_t>& shape, at::ScalarType type) {
  std::ifstream in(kNets / file, std::ios::binary);
  if (!in) throw Error("no " + (kNets / file).string());
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(type));
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  if (in.gcount() != static_cast<std::streamsize>(t.nbytes())) throw Error("short " + file);
  return t;
}

// Every node on whole activations: the plain forward.
at::Tensor forward(const core::Graph& g, const at::Tensor& image) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> out(static_cast<size_t>(g.size()));
  out[0] = image;
  for (const core::Node& n : g.nodes()) {
    if (n.kind == core::OpKind::kInput) continue;
    std::vector<at::Tensor> in;
    for (core::NodeId p : n.inputs) in.push_back(out[static_cast<size_t>(p)]);
    out[static_cast<size_t>(n.id)] = core::forward_plain(n, in);
  }
  return out.back();
}

double max_relative(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-30);
}

std::vector<int64_t> shape_of(const nlohmann::json& j) { return j.get<std::vector<int64_t>>(); }

class Imported : public ::testing::TestWithParam<std::string> {};

TEST_P(Imported, ForwardEqualsPyTorch) {
  const nlohmann::json j = info(GetParam());
  const bool f64 = j.at("dtype") == "float64";
  const at::ScalarType type = f64 ? at::kDouble : at::kFloat;
  const std::string ext = f64 ? ".f64" : ".f32";
  ImportedNetwork net = import_onnx(io::read_onnx(kNets / (GetParam() + ".onnx")));
  const at::Tensor image = raw(GetParam() + ".input" + ext, shape_of(j.at("input_shape")), type);
  const at::Tensor got = forward(net.graph, image);
  const at::Tensor want =
      net.has_head ? raw(GetParam() + ".output" + ext, shape_of(j.at("output_shape")), type)
                   : raw(GetParam() + ".features" + ext, shape_of(j.at("features_shape")), type);
  ASSERT_EQ(got.sizes(), want.sizes()) << (net.has_head ? "logits" : "features");
  const double error = max_relative(got, want);
  EXPECT_LT(error, f64 ? 1e-10 : 1e-4) << GetParam() << (net.has_head ? " logits" : " features");
  RecordProperty("max_relative_error", std::to_string(error));
  std::cout << GetParam() << ": " << (net.has_head ? "logits" : "features")
            << " against PyTorch's, max relative error " << error << "\n";
}

// A tiled step of the imported network (float64, its own weights, 3×3 tiles per segment)
// equals plain autograd: loss, output, input gradient and every parameter's gradient.
class ImportedSteps : public ::testing::TestWithParam<std::string> {};

TEST_P(ImportedSteps, TiledStepsMatchPlainAutograd) {
  ImportedNetwork net = import_onnx(io::read_onnx(kNets / (GetParam() + ".onnx")));
  core::Graph& g = net.graph;
  g.module().to(at::kDouble);
  const core::Shape input{3, 75, 62};
  core::PlanOptions o;
  o.strategy = core::Strategy::kGrid;
  o.element_bytes = 8;
  o.overrides.tiles_y = 3;
  o.overrides.tiles_x = 3;
  const core::Plan plan = core::make_plan(g, input, 0, o);
  bool tiled = false;
  for (const core::Segment& s : plan.segments) tiled = tiled || s.forward.tiles() > 1;
  ASSERT_TRUE(tiled) << core::to_string(plan, g);
  const at::Tensor image = at::randn({1, 3, input.height, input.width}, at::kDouble);
  const core::Comparison c = core::compare_with_plain(g, plan, image, 7);
  EXPECT_LT(c.worst(), 1e-10) << GetParam() << "\n" << c.to_string();
}

INSTANTIATE_TEST_SUITE_P(Networks, Imported,
                         ::testing::Values("tv_resnet18", "tv_resnet50", "tv_densenet121",
                                           "tv_mobilenet_v3_small", "tv_regnet_y_400mf",
                                           "tv_convnext_tiny", "timm_resnet50d",
                                           "timm_convnext_nano", "timm_efficientnet_lite0",
                                           "timm_efficientnet_b0", "timm_tf_efficientnet_lite0",
                                           "tv_resnet18_legacy", "tv_resnet18_f64",
                                           "tv_resnet18_defaults"),
                         [](const auto& p) { return p.param; });

// timm_efficientnet_b0's step takes 15 s here (a squeeze-and-excitation in each of its 16
// blocks); mobilenet_v3_small and regnet_y_400mf tile squeeze-and-excitation in a few seconds.
INSTANTIATE_TEST_SUITE_P(Networks, ImportedSteps,
                         ::testing::Values("tv_resnet18", "tv_resnet50", "tv_densenet121",
                                           "tv_mobilenet_v3_small", "tv_regnet_y_400mf",
                                           "tv_convnext_tiny", "timm_resnet50d",
                                           "timm_convnext_nano", "timm_efficientnet_lite0",
                                           "timm_tf_efficientnet_lite0", "tv_resnet18_legacy",
                                           "tv_resnet18_f64"),
                         [](const auto& p) { return p.param; });

int count_barriers(const core::Graph& g, core::BarrierOp op) {
  return static_cast<int>(std::count_if(g.nodes().begin(), g.nodes().end(), [&](const auto& n) {
    return n.is_barrier() && n.barrier == op;
  }));
}

// Every squeeze-and-excitation block of the SE networks becomes one barrier node, with the
// block's gate and activation: no global pool is left inside the trunk.
TEST(OnnxImport, SqueezeExciteBlocksOfTheZooBecomeOneNodeEach) {
  const std::vector<std::tuple<std::string, int, core::Pointwise, core::Pointwise>> cases = {
      {"tv_mobilenet_v3_small", 9, core::Pointwise::kRelu, core::Pointwise::kHardSigmoid},
      {"tv_regnet_y_400mf", 16, core::Pointwise::kRelu, core::Pointwise::kSigmoid},
      {"timm_efficientnet_b0", 16, core::Pointwise::kSilu, core::Pointwise::kSigmoid}};
  for (const auto& [name, blocks, activation, gate] : cases) {
    ImportedNetwork net = import_onnx(io::read_onnx(kNets / (name + ".onnx")));
    const core::Graph& g = net.graph;
    EXPECT_EQ(count_barriers(g, core::BarrierOp::kSqueezeExcite), blocks) << name;
    int pools = 0;
    for (const core::Node& n : g.nodes()) {
      pools += n.kind == core::OpKind::kGlobalAvgPool;
      if (!n.is_barrier()) continue;
      EXPECT_EQ(n.squeeze->activation, activation) << name << " " << n.name;
      EXPECT_EQ(n.squeeze->gate, gate) << name << " " << n.name;
      if (gate == core::Pointwise::kHardSigmoid) {
        EXPECT_EQ(n.squeeze->gate_coeff, (std::array<double, 2>{1.0 / 6.0, 0.5})) << n.name;
      }
    }
    EXPECT_EQ(pools, 1) << name << ": the head's global pool only";
    EXPECT_NE(std::find(net.notes.begin(), net.notes.end(),
                        std::to_string(blocks) +
                            " squeeze-and-excitation fused from a global average pool, Conv, "
                            "activation, Conv, gate, Mul"),
              net.notes.end())
        << name;
  }
  // torchvision's names: "features.1.block.1.fc1.weight" is the layer features_1_block_1's.
  ImportedNetwork net = import_onnx(io::read_onnx(kNets / "tv_mobilenet_v3_small.onnx"));
  EXPECT_TRUE(net.graph.has_layer("features_1_block_1"));
}

// A weight of the wrong shape names its node and both shapes.
TEST(OnnxImport, AWeightOfTheWrongShapeNamesTheNode) {
  io::OnnxModel model = io::read_onnx(kNets / "tv_resnet18.onnx");
  for (const io::OnnxNode& n : model.nodes) {
    if (n.op_type != "BatchNormalization" && n.op_type != "Conv") continue;
    at::Tensor& w = model.constants.at(n.inputs[1]);
    w = at::zeros({w.size(0) + 1});
    try {
      import_onnx(model);
      FAIL() << "imported";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("node '" + n.name + "'"), std::string::npos) << e.what();
    }
    return;
  }
}

// Small hand-made ONNX graphs: one op (or pattern) each, against the same function in ATen.
class OnnxGraph {
 public:
  explicit OnnxGraph(int64_t channels) {
    model_.file = "hand-made.onnx";
    model_.opset = 18;
    model_.input = "x";
    model_.input_shape = {1, channels, -1, -1};
  }
  // Adds a node reading `inputs`, writing one output named after it; returns that name.
  std::string node(const std::string& op, const std::vector<std::string>& inputs,
                   std::map<std::string, std::vector<int64_t>> ints = {},
                   std::map<std::string, std::vector<double>> floats = {},
                   std::map<std::string, std::string> strings = {}) {
    io::OnnxNode n;
    n.name = op + std::to_string(model_.nodes.size());
    n.op_type = op;
    n.inputs = inputs;
    n.outputs = {n.name + "_out"};
    n.ints = std::move(ints);
    n.floats = std::move(floats);
    n.strings = std::move(strings);
    model_.nodes.push_back(n);
    return n.outputs[0];
  }
  std::string constant(const std::string& name, const at::Tensor& t) {
    model_.constants[name] = t;
    return name;
  }
  ImportedNetwork import(const std::string& output, const ImportOptions& options = {}) {
    model_.outputs = {output};
    return import_onnx(model_, options);
  }

 private:
  io::OnnxModel model_;
};

TEST(OnnxImport, PadFoldsIntoTheConvolutionsPerSidePadding) {
  OnnxGraph g(2);
  const at::Tensor w = at::randn({3, 2, 3, 3});
  const std::string padded =
      g.node("Pad", {"x", g.constant("pads", at::tensor({0, 0, 1, 0, 0, 0, 2, 1}, at::kLong))});
  const std::string y = g.node("Conv", {padded, g.constant("conv.weight", w)},
                               {{"strides", {2, 1}}, {"pads", {0, 1, 0, 0}}});
  ImportedNetwork net = g.import(y);
  const at::Tensor x = at::randn({1, 2, 11, 9});
  // pads: top 1, left 0+1, bottom 2, right 1
  const at::Tensor want = at::conv2d(at::constant_pad_nd(x, {1, 1, 1, 2}), w, {}, {2, 1});
  EXPECT_LT(max_relative(forward(net.graph, x), want), 1e-6);
  EXPECT_EQ(net.graph.node(1).conv->padding_end_, (std::array<int64_t, 2>{2, 1}));
}

TEST(OnnxImport, SamePaddingAtStrideOneIsPerSide) {
  OnnxGraph g(1);
  const at::Tensor w = at::randn({1, 1, 4, 4});
  const std::string y =
      g.node("Conv", {"x", g.constant("w", w)}, {}, {}, {{"auto_pad", "SAME_UPPER"}});
  ImportedNetwork net = g.import(y);
  const at::Tensor x = at::randn({1, 1, 7, 6});
  const at::Tensor want = at::conv2d(at::constant_pad_nd(x, {1, 2, 1, 2}), w);  // 3 = 1 + 2
  EXPECT_LT(max_relative(forward(net.graph, x), want), 1e-6);
  OnnxGraph strided(1);
  const std::string z = strided.node("Conv", {"x", strided.constant("w", w)}, {{"strides", {2, 2}}},
                                     {}, {{"auto_pad", "SAME_UPPER"}});
  EXPECT_THROW(strided.import(z), Error);
}

TEST(OnnxImport, ConstantsOnEitherSideOfArithmetic) {
  OnnxGraph g(3);
  const at::Tensor c = at::rand({1, 3, 1, 1}) + 0.5;
  std::string y = g.node("Sub", {g.constant("k", at::tensor(2.5)), "x"});  // 2.5 - x
  y = g.node("Div", {y, g.constant("c", c)});                              // / c per channel
  y = g.node("Mul", {g.constant("gamma", c), y});                          // c · (LayerScale)
  y = g.node("Add", {y, g.constant("beta", c * 3)});                       // + 3c
  y = g.node("Clip", {y, g.constant("lo", at::tensor(-1.0)), ""});         // max(·, -1)
  y = g.node("Mul", {y, g.node("Sigmoid", {y})});                          // SiLU
  ImportedNetwork net = g.import(y);
  const at::Tensor x = at::randn({1, 3, 5, 4});
  at::Tensor want = at::clamp_min((2.5 - x) / c * c + c * 3, -1.0);
  want = want * at::sigmoid(want);
  EXPECT_LT(max_relative(forward(net.graph, x), want), 1e-6);
  EXPECT_EQ(net.notes, std::vector<std::string>{"1 SiLU fused from Sigmoid, Mul"});
  // A constant divided by the activation has no op here.
  OnnxGraph r(3);
  const std::string q = r.node("Div", {r.constant("k", at::tensor(1.0)), "x"});
  EXPECT_THROW(r.import(q), Error);
}

// Squeeze-and-excitation in each form the exporters write, against the same function in ATen:
// ReduceMean (axes an input, opset 18) or GlobalAveragePool, SiLU as Sigmoid and Mul or Relu,
// a HardSigmoid or Sigmoid gate, the gate on either side of the Mul, a Conv without bias.
TEST(OnnxImport, SqueezeExciteBecomesOneBarrierWithTheSameForward) {
  for (int variant = 0; variant < 4; ++variant) {
    const bool reduce = variant & 1, silu = variant & 2;
    OnnxGraph g(6);
    at::manual_seed(variant);
    const at::Tensor w1 = at::randn({2, 6, 1, 1}), b1 = at::randn({2});
    const at::Tensor w2 = at::randn({6, 2, 1, 1}), b2 = at::randn({6});
    const std::string pooled =
        reduce ? g.node("ReduceMean", {"x", g.constant("axes", at::tensor({-1, -2}, at::kLong))})
               : g.node("GlobalAveragePool", {"x"});
    std::string h = reduce ? g.node("Conv", {pooled, g.constant("se.fc1.weight", w1),
                                             g.constant("se.fc1.bias", b1)})
                           : g.node("Conv", {pooled, g.constant("se.fc1.weight", w1)});
    h = silu ? g.node("Mul", {h, g.node("Sigmoid", {h})}) : g.node("Relu", {h});
    h = g.node("Conv", {h, g.constant("se.fc2.weight", w2), g.constant("se.fc2.bias", b2)});
    const std::string gate =
        silu ? g.node("HardSigmoid", {h}, {}, {{"alpha", {0.2}}}) : g.node("Sigmoid", {h});
    const std::string y = silu ? g.node("Mul", {"x", gate}) : g.node("Mul", {gate, "x"});
    ImportedNetwork net = g.import(y);
    ASSERT_EQ(net.graph.size(), 2) << variant;
    const core::Node& se = net.graph.node(1);
    ASSERT_TRUE(se.is_barrier()) << variant;
    EXPECT_EQ(se.barrier, core::BarrierOp::kSqueezeExcite);
    EXPECT_EQ(se.name, "se");
    const at::Tensor x = at::randn({1, 6, 7, 5});
    at::Tensor s = at::conv2d(x.mean({2, 3}, true), w1, reduce ? b1 : at::Tensor());
    s = silu ? at::silu(s) : at::relu(s);
    s = at::conv2d(s, w2, b2);
    s = silu ? at::clamp(s * 0.2 + 0.5, 0.0, 1.0) : at::sigmoid(s);
    EXPECT_LT(max_relative(forward(net.graph, x), x * s), 1e-6) << variant;
  }
}

// A global pool that anything other than the whole pattern reads stays refused, naming the node.
TEST(OnnxImport, AGlobalPoolReadOutsideTheSqueezeExcitePatternIsRefused) {
  for (int variant = 0; variant < 3; ++variant) {
    OnnxGraph g(4);
    const std::string pooled = g.node("GlobalAveragePool", {"x"});
    std::string h = g.node("Conv", {pooled, g.constant("w1", at::randn({2, 4, 1, 1}))});
    h = g.node("Relu", {h});
    h = g.node("Conv", {h, g.constant("w2", at::randn({4, 2, 1, 1}))},
               variant == 2 ? std::map<std::string, std::vector<int64_t>>{{"group", {2}}}
                            : std::map<std::string, std::vector<int64_t>>{});
    h = g.node("Sigmoid", {h});
    std::string y = variant == 0 ? g.node("Add", {"x", h}) : g.node("Mul", {"x", h});
    if (variant == 1) y = g.node("Add", {y, g.node("Mul", {"x", pooled})});  // a second reader
    try {
      g.import(y);
      ADD_FAILURE() << variant << " imported";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("hand-made.onnx: node '"), std::string::npos) << what;
      EXPECT_NE(what.find("a global pool inside the network needs the whole image"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("squeeze-and-excitation"), std::string::npos) << what;
    }
  }
}

// PyTorch's GroupNorm as its exporters write it: Reshape, InstanceNormalization, Reshape back
// (Shape(x), or the static shape of the export), Mul, Add (the weight Unsqueezed or not).
TEST(OnnxImport, GroupNormBecomesOneBarrierWithTheSameForward) {
  for (const bool legacy : {true, false}) {
    OnnxGraph g(6);
    const at::Tensor weight = at::randn({6}), bias = at::randn({6});
    const std::string grouped =
        g.node("Reshape", {"x", g.constant("to", at::tensor({0, 3, -1}, at::kLong))});
    const std::string norm =
        g.node("InstanceNormalization",
               {grouped, g.constant("ones", at::ones({3})), g.constant("zeros", at::zeros({3}))},
               {}, {{"epsilon", {1e-3}}});
    const std::string shape =
        legacy ? g.node("Shape", {"x"}) : g.constant("back", at::tensor({1, 6, 9, 8}, at::kLong));
    const std::string back = g.node("Reshape", {norm, shape});
    const std::string w =
        legacy ? g.node("Unsqueeze", {g.constant("gn.weight", weight),
                                      g.constant("axes", at::tensor({1, 2}, at::kLong))})
               : g.constant("gn.weight", weight.reshape({6, 1, 1}));
    const std::string y =
        g.node("Add", {g.node("Mul", {back, w}), g.constant("gn.bias", bias.reshape({6, 1, 1}))});
    ImportedNetwork net = g.import(y);
    ASSERT_EQ(count_barriers(net.graph, core::BarrierOp::kGroupNorm), 1) << legacy;
    EXPECT_EQ(net.graph.node(net.graph.output()).groups, 3);
    EXPECT_EQ(net.graph.node(net.graph.output()).eps, 1e-3);
    const at::Tensor x = at::randn({1, 6, 9, 8});
    EXPECT_LT(max_relative(forward(net.graph, x), at::group_norm(x, 3, weight, bias, 1e-3)), 1e-6)
        << legacy;
  }
  // An InstanceNormalization on its own normalises over the positions: refused.
  OnnxGraph g(2);
  const std::string y = g.node("InstanceNormalization", {"x", g.constant("s", at::ones({2})),
                                                         g.constant("b", at::zeros({2}))});
  try {
    g.import(y);
    ADD_FAILURE() << "imported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("group norm"), std::string::npos) << e.what();
  }
}

// --batch-norm train: a batch norm in training mode, whatever mode the file was exported in, with
// the file's running statistics and PyTorch's momentum (1 − ONNX's, from its float32 attribute).
// Frozen (the default) refuses a file exported in training mode, saying how to import it.
TEST(OnnxImport, BatchNormInTrainingModeWhenAsked) {
  for (const int64_t training_mode : {0, 1}) {
    OnnxGraph g(3);
    const at::Tensor mean = at::randn({3}, at::kDouble), var = at::rand({3}, at::kDouble) + 0.5;
    const std::string y =
        g.node("BatchNormalization",
               {"x", g.constant("bn.weight", at::randn({3}, at::kDouble)),
                g.constant("bn.bias", at::randn({3}, at::kDouble)),
                g.constant("bn.running_mean", mean), g.constant("bn.running_var", var)},
               {{"training_mode", {training_mode}}},
               {{"momentum", {static_cast<float>(0.7)}}, {"epsilon", {1e-3f}}});
    ImportOptions train;
    train.batch_norm = BatchNormImport::kTrain;
    ImportedNetwork net = g.import(y, train);
    const core::Node& bn = net.graph.node(1);
    ASSERT_TRUE(bn.is_barrier());
    EXPECT_EQ(bn.barrier, core::BarrierOp::kBatchNorm);
    EXPECT_NEAR(bn.momentum, 0.3, 1e-15);
    EXPECT_EQ(bn.eps, 1e-3);
    EXPECT_TRUE(at::equal(bn.layer->named_buffers()["running_mean"], mean));
    EXPECT_TRUE(at::equal(bn.layer->named_buffers()["running_var"], var));
    EXPECT_NE(net.notes.back().find("1 BatchNormalization as batch norm in training mode"),
              std::string::npos)
        << net.notes.back();
    if (training_mode) {
      try {
        g.import(y);
        ADD_FAILURE() << "imported in training mode as frozen";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--batch-norm train"), std::string::npos) << e.what();
      }
    } else {
      const core::Node& frozen = g.import(y).graph.node(1);
      EXPECT_EQ(frozen.pointwise, core::Pointwise::kAffine);
    }
  }
}

TEST(OnnxImport, OpsItCannotTileAreRefusedNamingTheNodeAndOp) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"Resize", "resizes its input"},
      {"Shape", "computes shapes while the network runs"},
      {"Softmax", "needs the whole image"},
      {"Celu", "not an op Tessel imports"},
  };
  for (const auto& [op, reason] : cases) {
    OnnxGraph g(2);
    const std::string y = g.node(op, {"x"});
    try {
      g.import(y);
      ADD_FAILURE() << op << " imported";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("hand-made.onnx: node '" + op + "0' (" + op + "): "), std::string::npos)
          << what;
      EXPECT_NE(what.find(reason), std::string::npos) << what;
    }
  }
  // A reshape of the image's activation would fix its size.
  OnnxGraph g(2);
  const std::string y = g.node("Reshape", {"x", g.constant("s", at::tensor({1, -1}, at::kLong))});
  EXPECT_THROW(g.import(y), Error);
}

// `tessel import` as a user runs it, on the file docs/models.md's command writes (the exporter's
// defaults: the weights in tv_resnet18_defaults.onnx.data): the checkpoint it writes is a network
// plan and gradcheck take (`--model NET.h5`), with the planner's plan for a 20000² slide in 2 GiB.
TEST(ImportCli, WritesACheckpointThatPlanAndGradcheckTake) {
  test::TempFolder dir;
  const std::string out = (dir.path() / "resnet18.h5").string();
  ASSERT_TRUE(fs::exists(kNets / "tv_resnet18_defaults.onnx.data"));
  const auto run = testing::run_cli("import " + (kNets / "tv_resnet18_defaults.onnx").string() +
                                    " --out " + out);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("the file's classifier, 10 values"), std::string::npos) << run.output;
  ASSERT_TRUE(fs::exists(out));
  const auto plan = testing::run_cli("plan --model " + out + " --size 20000x20000 --budget 2GiB");
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_NE(plan.output.find("predicted peak"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("conv1"), std::string::npos) << plan.output;  // torchvision's names
  const auto check = testing::run_cli("gradcheck --model " + out + " --size 75x61");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("PASS"), std::string::npos) << check.output;
}

// `tessel import --batch-norm train`: the batch norms become barriers (the note says how many),
// and gradcheck finds the tiled step of the checkpoint equal to plain autograd.
TEST(ImportCli, BatchNormInTrainingModeWhenAsked) {
  test::TempFolder dir;
  const std::string out = (dir.path() / "bn.h5").string();
  const std::string onnx = (kBarrierCheck / "barrier_check.onnx").string();
  const auto run = testing::run_cli("import " + onnx + " --out " + out + " --batch-norm train");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const char* note : {"2 BatchNormalization as batch norm in training mode",
                           "2 squeeze-and-excitation fused", "1 group norm fused"}) {
    EXPECT_NE(run.output.find(note), std::string::npos) << note << "\n" << run.output;
  }
  const auto check = testing::run_cli("gradcheck --model " + out + " --size 40x37");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("PASS"), std::string::npos) << check.output;
  const auto frozen = testing::run_cli("import " + onnx + " --out " + out + " --batch-norm none");
  EXPECT_NE(frozen.exit_code, 0) << frozen.output;
}

// A file Tessel cannot import: one line naming the file and the reason, exit 1, nothing written.
TEST(ImportCli, FilesItCannotImportAreOneLineErrorsAndWriteNothing) {
  test::TempFolder dir;
  const fs::path good = kNets / "tv_resnet18.onnx";
  const fs::path truncated = dir.path() / "truncated.onnx";
  {
    std::ifstream in(good, std::ios::binary);
    std::string head(100000, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(truncated, std::ios::binary) << head;
  }
  const fs::path text = dir.path() / "notes.onnx";
  std::ofstream(text) << "not a network\n";
  const std::vector<std::pair<fs::path, std::string>> cases = {
      {truncated, "not an ONNX model, or is truncated"},
      {text, "not an ONNX model, or is truncated"},
      {dir.path() / "missing.onnx", "does not exist"},
  };
  for (const auto& [file, reason] : cases) {
    const fs::path out = dir.path() / "out.h5";
    const auto run = testing::run_cli("import " + file.string() + " --out " + out.string());
    EXPECT_EQ(run.exit_code, 1) << run.output;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
    EXPECT_NE(run.output.find(file.string()), std::string::npos) << run.output;
    EXPECT_NE(run.output.find(reason), std::string::npos) << run.output;
    EXPECT_FALSE(fs::exists(out)) << file;
    EXPECT_FALSE(fs::exists(out.string() + ".partial")) << file;
  }
  // An image size the network does not fit (densenet's 2×2 average pools need 32 pixels).
  const auto small =
      testing::run_cli("import " + (kNets / "tv_densenet121.onnx").string() + " --out " +
                       (dir.path() / "out.h5").string() + " --input-size 16x16");
  EXPECT_EQ(small.exit_code, 1) << small.output;
  EXPECT_NE(small.output.find("does not fit a 16×16 image"), std::string::npos) << small.output;
  EXPECT_FALSE(fs::exists(dir.path() / "out.h5"));
}

// ---- train mode against PyTorch (tests/onnx/make_barrier_check.py) ----

at::Tensor reference(const std::string& file, const nlohmann::json& shape) {
  std::ifstream in(kBarrierCheck / file, std::ios::binary);
  if (!in) throw Error("no " + (kBarrierCheck / file).string() + ": run make_barrier_check.py");
  at::Tensor t = at::empty(shape_of(shape), at::kDouble);
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  if (in.gcount() != static_cast<std::streamsize>(t.nbytes())) throw Error("short " + file);
  return t;
}

// The tensor of `candidates` whose values are those of `t` (the import copies PyTorch's weights
// bit for bit, and random weights do not repeat), with its name; names each match once.
std::pair<std::string, at::Tensor> find_by_value(
    const torch::OrderedDict<std::string, at::Tensor>& candidates, const at::Tensor& t,
    std::set<std::string>& taken) {
  for (const auto& item : candidates) {
    const at::Tensor& c = item.value();
    if (c.numel() == t.numel() && at::equal(c.reshape(t.sizes()), t) &&
        !taken.contains(item.key())) {
      taken.insert(item.key());
      return {item.key(), c};
    }
  }
  return {"", at::Tensor()};
}

// PyTorch's own BatchNorm2d, GroupNorm and squeeze-and-excitation in train mode on the whole image
// against Tessel's tiled step of the same network imported from PyTorch's ONNX export with
// --batch-norm train: output, loss, every parameter's gradient and the running statistics after
// the step, for a grid and rows whose tiles do not divide the 40×37 image, each with a tiled
// segment that holds a barrier.
TEST(TrainModeImport, TiledStepGivesPyTorchsTrainModeGradients) {
  std::ifstream index_file(kBarrierCheck / "barrier_check.json");
  ASSERT_TRUE(index_file) << "no " << kBarrierCheck << ": run make_barrier_check.py";
  const nlohmann::json index = nlohmann::json::parse(index_file);
  const at::Tensor image = reference(index["input"]["file"], index["input"]["shape"]);
  const at::Tensor projection =
      reference(index["projection"]["file"], index["projection"]["shape"]);
  const at::Tensor want_output = reference(index["output"]["file"], index["output"]["shape"]);
  for (const auto& [strategy, ty, tx] : std::vector<std::tuple<core::Strategy, int64_t, int64_t>>{
           {core::Strategy::kGrid, 3, 2}, {core::Strategy::kRows, 3, 1}}) {
    ImportOptions train;
    train.batch_norm = BatchNormImport::kTrain;
    ImportedNetwork net = import_onnx(io::read_onnx(kBarrierCheck / "barrier_check.onnx"), train);
    core::Graph& g = net.graph;
    ASSERT_EQ(count_barriers(g, core::BarrierOp::kBatchNorm), 2);
    ASSERT_EQ(count_barriers(g, core::BarrierOp::kGroupNorm), 1);
    ASSERT_EQ(count_barriers(g, core::BarrierOp::kSqueezeExcite), 2);
    core::PlanOptions o;
    o.strategy = strategy;
    o.element_bytes = 8;
    o.overrides.tiles_y = ty;
    o.overrides.tiles_x = tx;
    const core::Plan plan = core::make_plan(g, {3, image.size(2), image.size(3)}, 0, o);
    int tiled_barriers = 0;
    for (const core::Segment& s : plan.segments) {
      if (s.forward.tiles() < 2) continue;
      for (core::NodeId v = s.input + 1; v <= s.output; ++v)
        tiled_barriers += g.node(v).is_barrier();
    }
    ASSERT_GT(tiled_barriers, 0) << core::to_string(plan, g);

    const auto params = g.module().named_parameters(true);
    const auto buffers = g.module().named_buffers(true);
    std::set<std::string> taken;
    std::vector<std::pair<std::string, at::Tensor>> after;  // Tessel's buffer, PyTorch's after
    for (const auto& b : index["buffers"]) {
      auto [name, tensor] = find_by_value(buffers, reference(b["before"], b["shape"]), taken);
      ASSERT_TRUE(tensor.defined()) << "PyTorch's " << b["name"] << " is none of Tessel's buffers";
      after.emplace_back(name, reference(b["after"], b["shape"]));
    }
    std::vector<std::tuple<std::string, std::string, at::Tensor>> grads;  // torch, tessel, grad
    for (const auto& p : index["parameters"]) {
      auto [name, tensor] = find_by_value(params, reference(p["value"], p["shape"]), taken);
      ASSERT_TRUE(tensor.defined()) << "PyTorch's " << p["name"] << " is none of Tessel's";
      grads.emplace_back(p["name"], name, reference(p["grad"], p["shape"]));
    }
    EXPECT_EQ(grads.size(), params.size()) << "Tessel has parameters PyTorch does not";

    core::TensorTileSource source(image);
    const core::LossFn loss = [&](const at::Tensor& out, const at::Tensor&) {
      return (out * projection).sum();
    };
    const core::StepResult step = core::train_step(g, plan, source, at::Tensor(), loss);
    const std::string what =
        core::to_string(strategy) + " " + std::to_string(ty) + "×" + std::to_string(tx);
    double worst = core::relative_error(step.logits, want_output);
    EXPECT_LT(worst, 1e-10) << what << " output";
    const double loss_error = std::abs(step.loss.item<double>() - index["loss"].get<double>()) /
                              std::abs(index["loss"].get<double>());
    EXPECT_LT(loss_error, 1e-10) << what << " loss";
    for (const auto& [torch_name, name, want] : grads) {
      const at::Tensor got = params[name].grad();
      ASSERT_TRUE(got.defined()) << what << " " << name << " has no gradient";
      const double error = core::relative_error(got.reshape(want.sizes()), want);
      EXPECT_LT(error, 1e-10) << what << " gradient of " << torch_name << " (Tessel's " << name
                              << ")";
      worst = std::max(worst, error);
    }
    for (const auto& [name, want] : after) {
      const double error = core::relative_error(buffers[name], want);
      EXPECT_LT(error, 1e-10) << what << " " << name << " after the step";
      worst = std::max(worst, error);
    }
    std::cout << "train mode against PyTorch, " << what << ": " << grads.size() << " gradients, "
              << after.size() << " running statistics, loss error " << loss_error
              << ", worst relative error " << worst << "\n";
  }
}

}  // namespace
}  // namespace tessel::pipelines
