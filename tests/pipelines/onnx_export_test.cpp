// ONNX export (issue 19, io/onnx_writer.h, `tessel export`): every op core's graph holds is
// written so that (a) Tessel's own importer reads the file back into a network with the same
// forward (float32 1e-5, float64 1e-10), and (b) onnxruntime, an independent implementation, runs
// it with Tessel's output (1e-4 relative), for hand-built networks with every op, random networks,
// the zoo, and networks PyTorch exported that Tessel imported (against PyTorch's own output).
// A network with an op ONNX cannot express exactly, a missing or damaged checkpoint: one line
// naming the file and the reason, and nothing written.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>

#include "core/error.h"
#include "core/exec/gradcheck.h"
#include "core/exec/tile_ops.h"
#include "io/checkpoint.h"
#include "io/onnx_model.h"
#include "io/onnx_writer.h"
#include "models/network_json.h"
#include "models/zoo.h"
#include "pipelines/evaluate.h"
#include "pipelines/onnx_import.h"
#include "pipelines/train_config.h"
#include "tests/io/temp_folder.h"
#include "tests/run_cli.h"

namespace tessel::pipelines {
namespace {

namespace fs = std::filesystem;
using core::ConvSpec;
using core::Graph;
using core::NodeId;
using core::PoolSpec;

const fs::path kNets = TESSEL_ONNX_NETS;
const fs::path kPython = TESSEL_PYTHON;
const fs::path kOrtRun = TESSEL_ORT_RUN;

// Every node on whole activations: the plain forward.
at::Tensor forward(const Graph& g, const at::Tensor& image) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> out(static_cast<size_t>(g.size()));
  out[0] = image;
  for (const core::Node& n : g.nodes()) {
    if (n.kind == core::OpKind::kInput) continue;
    std::vector<at::Tensor> in;
    for (NodeId p : n.inputs) in.push_back(out[static_cast<size_t>(p)]);
    out[static_cast<size_t>(n.id)] = core::forward_plain(n, in);
  }
  return out.back();
}

double max_relative(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-30);
}

at::ScalarType dtype_of(Graph& g) {
  for (const auto& p : g.module().parameters()) return p.scalar_type();
  return at::kFloat;
}

// Every op the writer maps, each pointwise op on its own branch of one activation (so none of
// them sees only another one's saturated output), every pool variant in a chain.
enum class Head { kAvg, kMax, kNone };
std::string to_string(Head h) {
  return h == Head::kAvg ? "avg-pool head" : h == Head::kMax ? "max-pool head" : "no head";
}
core::SqueezeSpec squeeze(int64_t channels, core::Pointwise activation, core::Pointwise gate,
                          std::array<double, 2> coeff = {1.0 / 6.0, 0.5}) {
  core::SqueezeSpec se;
  se.squeeze_channels = channels;
  se.activation = activation;
  se.gate = gate;
  se.gate_coeff = coeff;
  return se;
}

Graph every_op_network(Head head) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  using core::Pointwise;
  Graph g(3);
  NodeId x =
      g.conv(g.input(), ConvSpec(3, 6, 3).stride(2, 1).padding(1, 0, 2, 1).dilation(1, 2), "stem");
  x = g.frozen_batch_norm(x, "stem_bn");
  x = g.leaky_relu(x, 0.1);
  x = g.conv(x, ConvSpec(6, 6, 3).padding(1).groups(3).bias(false));
  std::vector<NodeId> branches = {
      g.relu(x),
      g.sigmoid(x),
      g.tanh(x),
      g.erf(x),
      g.gelu(x),
      g.gelu_tanh(x),
      g.silu(x),
      g.hard_swish(x),
      g.identity(x),
      g.hard_sigmoid(x, 1.0 / 6.0, 0.5),
      g.leaky_relu(x, 0.2),  // float64: a slope float32 does not hold, as arithmetic
      g.hard_sigmoid(x, 0.2, 0.45),
      g.clamp(x, -0.5, 6.0),
      g.clamp(x, -kInf, 0.3),
      g.clamp(x, -0.2, kInf),
      g.clamp(x, -kInf, kInf),
      g.scalar(x, 0.7, -0.2),
      g.scalar(x, 1.0, 0.3),
      g.scalar(x, -2.0, 0.0),
      g.scalar(x, 1.0, 0.0),
      g.scale(x, true),
      g.scale(x, false),
      g.channel_norm(x, 1e-6),
      g.frozen_batch_norm(x, "", 1e-3)};
  // Barriers, written as PyTorch exports them in eval mode.
  for (const NodeId barrier :
       {g.batch_norm(x, "", 1e-3, 0.3), g.group_norm(x, 3),
        g.squeeze_excite(x, squeeze(3, Pointwise::kRelu, Pointwise::kSigmoid)),
        g.squeeze_excite(x, squeeze(2, Pointwise::kSilu, Pointwise::kHardSigmoid)),
        g.squeeze_excite(x, squeeze(4, Pointwise::kRelu, Pointwise::kHardSigmoid, {0.2, 0.45}))}) {
    branches.push_back(barrier);
  }
  x = g.concat(branches);
  x = g.conv(x, ConvSpec(6 * static_cast<int64_t>(branches.size()), 8, 1));
  const NodeId y = g.conv(x, ConvSpec(8, 8, 3).padding(1));
  x = g.add(x, y);
  x = g.binary(x, y, core::Binary::kSub);
  x = g.binary(x, y, core::Binary::kMul);
  x = g.binary(x, g.scalar(g.sigmoid(y), 1.0, 0.5), core::Binary::kDiv);
  x = g.max_pool(x, PoolSpec(3).stride(2).padding(1).ceil_mode(true));
  x = g.max_pool(x, PoolSpec(3).stride(1).padding(1).dilation(2));
  x = g.max_pool(x, PoolSpec(2).stride(1).padding(1, 0, 0, 1));
  x = g.avg_pool(x, PoolSpec(3).stride(2).padding(1).ceil_mode(true).count_include_pad(false));
  x = g.avg_pool(x, PoolSpec(3).stride(1).padding(1).ceil_mode(true));
  x = g.avg_pool(x, PoolSpec(2).stride(2).padding(1).ceil_mode(true));
  x = g.avg_pool(x, PoolSpec(3).stride(1).padding(0, 1, 1, 0).count_include_pad(false));
  x = g.avg_pool(x, PoolSpec(3).stride(1).padding(1, 1, 0, 0));
  x = g.avg_pool(x, PoolSpec(3).stride(2).padding(1).divisor_override(4));
  x = g.avg_pool(x, PoolSpec(3).stride(1).padding(1).ceil_mode(true).divisor_override(7));
  x = g.conv(x, ConvSpec(8, 5, 2).stride(2, 1).padding(0, 1));
  if (head == Head::kNone) return g;
  x = head == Head::kMax ? g.global_max_pool(x) : g.global_avg_pool(x);
  x = g.dropout(x, 0.3);
  x = g.flatten(x);
  g.linear(x, 3, "classifier");
  return g;
}

// The network exported to `file` and imported back by Tessel's own importer.
Graph round_trip(const Graph& g, const fs::path& file) {
  io::write_onnx(g, file, "tessel test");
  return import_onnx(io::read_onnx(file)).graph;
}

// ---- (a) through Tessel's importer ----

void expect_round_trip(Graph& g, const std::string& what, int64_t height, int64_t width,
                       const fs::path& dir, double tolerance) {
  const fs::path file = dir / "net.onnx";
  Graph back = round_trip(g, file);
  at::manual_seed(11);
  const at::Tensor image = at::randn({2, g.node(0).channels, height, width}, dtype_of(g));
  const at::Tensor want = forward(g, image), got = forward(back, image);
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_GT(want.abs().max().item<double>(), 0.0) << what;
  const double error = max_relative(got, want);
  EXPECT_LT(error, tolerance) << what;
  std::printf("%s: %.3g\n", what.c_str(), error);
}

// float64: 1e-10, as the importer's own tests; ONNX's epsilon attributes are float32, 1e-11 here.
TEST(OnnxExport, EveryOpComesBackThroughTheImporterWithTheSameForward) {
  test::TempFolder dir;
  for (const at::ScalarType type : {at::kFloat, at::kDouble}) {
    for (const Head head : {Head::kAvg, Head::kMax, Head::kNone}) {
      Graph g = every_op_network(head);
      g.module().to(type);
      core::randomise(g, 5);
      expect_round_trip(g, "every op, " + to_string(head) + ", " + c10::toString(type), 96, 80,
                        dir.path(), type == at::kDouble ? 1e-10 : 1e-5);
    }
  }
}

// Batch norm in training mode is written in its inference form with the running statistics and
// the momentum: imported back by default as frozen batch norm, with --batch-norm train as batch
// norm in training mode with the same eps and momentum; group norm and squeeze-and-excitation
// come back as the same barriers.
TEST(OnnxExport, BarriersComeBackAsTheSameBarriers) {
  test::TempFolder dir;
  Graph g(3);
  NodeId x = g.conv(g.input(), ConvSpec(3, 6, 3).bias(false), "stem");
  x = g.relu(g.batch_norm(x, "bn", 1e-3, 0.3));
  x = g.group_norm(g.conv(x, ConvSpec(6, 6, 3), "c1"), 2, "gn", 1e-4);
  x = g.squeeze_excite(x, squeeze(2, core::Pointwise::kSilu, core::Pointwise::kHardSigmoid), "se");
  g.module().to(at::kDouble);
  core::randomise(g, 3);
  const fs::path file = dir.path() / "net.onnx";
  io::write_onnx(g, file, "tessel test");
  ImportOptions train;
  train.batch_norm = BatchNormImport::kTrain;
  for (const bool as_train : {false, true}) {
    ImportedNetwork back = import_onnx(io::read_onnx(file), as_train ? train : ImportOptions{});
    ASSERT_EQ(back.graph.size(), g.size()) << as_train;
    for (const core::Node& n : g.nodes()) {
      const core::Node& m = back.graph.node(n.id);
      EXPECT_EQ(m.name, n.name);
      const bool frozen = n.is_barrier() && n.barrier == core::BarrierOp::kBatchNorm && !as_train;
      EXPECT_EQ(m.kind, frozen ? core::OpKind::kPointwise : n.kind) << n.name;
      if (!m.is_barrier()) continue;
      EXPECT_EQ(m.barrier, n.barrier) << n.name;
      EXPECT_EQ(m.eps, n.eps) << n.name;
      EXPECT_NEAR(m.momentum, n.momentum, 1e-15) << n.name;
      EXPECT_EQ(m.groups, n.groups) << n.name;
    }
    at::manual_seed(4);
    const at::Tensor image = at::randn({1, 3, 23, 19}, at::kDouble);
    EXPECT_LT(max_relative(forward(back.graph, image), forward(g, image)), 1e-10) << as_train;
  }
}

// Seeds whose network has an average pool with divisor_override in ceil mode with a stride above
// 1 are refused (no exact ONNX form), with the layer named.
TEST(OnnxExport, RandomNetworksComeBackThroughTheImporterWithTheSameForward) {
  test::TempFolder dir;
  int exported = 0, refused = 0;
  double worst32 = 0.0, worst64 = 0.0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    for (const at::ScalarType type : {at::kFloat, at::kDouble}) {
      Graph g = models::random_network(seed, 16);
      g.module().to(type);
      core::randomise(g, seed);
      const std::string what = "random seed " + std::to_string(seed) + " " + c10::toString(type);
      Graph back(3);
      try {
        back = round_trip(g, dir.path() / "net.onnx");
      } catch (const Error& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find("divisor_override in ceil mode has no exact ONNX form"),
                  std::string::npos)
            << what << ": " << message;
        EXPECT_NE(message.find("layer 'avgpool"), std::string::npos) << message;
        EXPECT_FALSE(fs::exists(dir.path() / "net.onnx.partial")) << what;
        ++refused;
        continue;
      }
      at::manual_seed(static_cast<int64_t>(seed));
      const at::Tensor image = at::randn({1, 3, 31, 26}, type);
      const at::Tensor want = forward(g, image), got = forward(back, image);
      ASSERT_EQ(got.sizes(), want.sizes()) << what;
      const double error = max_relative(got, want);
      double& worst = type == at::kDouble ? worst64 : worst32;
      worst = std::max(worst, error);
      EXPECT_LT(error, type == at::kDouble ? 1e-10 : 1e-5) << what;
      ++exported;
    }
  }
  std::printf(
      "random networks: %d exported and compared, %d refused; worst %.3g (float32), %.3g "
      "(float64)\n",
      exported, refused, worst32, worst64);
  EXPECT_GT(exported, 300);
}

TEST(OnnxExport, ZooModelsComeBackThroughTheImporterWithTheSameForward) {
  test::TempFolder dir;
  for (const std::string& name : models::model_names()) {
    models::ModelOptions options;
    options.classes = 3;
    options.dropout = 0.5;
    options.global_max_pool = name == "vgg-mini" || name == "resnet18";
    Graph g = models::build_model(name, options);
    core::randomise(g, 3);
    expect_round_trip(g, name, 64, 48, dir.path(), 1e-5);
  }
}

// The file's initializers are the module's parameters and buffers under the module's names, in
// its dtype, and the file declares one image input with open batch and size, one output.
TEST(OnnxExport, TheFileHoldsTheWeightsByTheirNamesAndOneOpenSizedImageInput) {
  test::TempFolder dir;
  for (const at::ScalarType type : {at::kFloat, at::kDouble}) {
    Graph g = every_op_network(Head::kMax);
    g.module().to(type);
    core::randomise(g, 9);
    const fs::path file = dir.path() / "net.onnx";
    io::write_onnx(g, file, "tessel 9.9.9");
    const io::OnnxModel model = io::read_onnx(file);
    EXPECT_EQ(model.ir_version, 8);
    EXPECT_EQ(model.opset, 17);
    EXPECT_EQ(model.producer, "tessel 9.9.9");
    EXPECT_EQ(model.input, "image");
    EXPECT_EQ(model.input_shape, (std::vector<int64_t>{-1, 3, -1, -1}));
    EXPECT_EQ(model.outputs, std::vector<std::string>{"output"});
    std::vector<io::NamedTensor> weights = io::named_weights(g.module());
    ASSERT_GT(weights.size(), 20U);
    for (const io::NamedTensor& w : weights) {
      auto it = model.constants.find(w.name);
      ASSERT_NE(it, model.constants.end()) << w.name;
      EXPECT_EQ(it->second.scalar_type(), type) << w.name;
      EXPECT_TRUE(at::equal(it->second.reshape(w.tensor.sizes()), w.tensor)) << w.name;
    }
    EXPECT_FALSE(fs::exists(file.string() + ".partial"));
  }
}

// An average pool that divides by a fixed number in ceil mode divides its border windows by a
// count that depends on the image size in ONNX: refused with the file and layer, nothing written.
TEST(OnnxExport, AnOpWithoutAnExactOnnxFormIsRefusedAndNothingIsWritten) {
  test::TempFolder dir;
  Graph g(3);
  NodeId x = g.conv(g.input(), ConvSpec(3, 4, 3));
  g.avg_pool(x, PoolSpec(2).stride(2).ceil_mode(true).divisor_override(3));
  core::randomise(g, 1);
  const fs::path file = dir.path() / "net.onnx";
  try {
    io::write_onnx(g, file, "tessel");
    FAIL() << "written";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(file.string()), std::string::npos) << what;
    EXPECT_NE(what.find("layer 'avgpool1'"), std::string::npos) << what;
    EXPECT_NE(what.find("no exact ONNX form"), std::string::npos) << what;
  }
  EXPECT_FALSE(fs::exists(file));
  EXPECT_FALSE(fs::exists(file.string() + ".partial"));
  // The same pool with stride 1 (ceil mode adds no window) is exact.
  Graph h(3);
  h.avg_pool(h.conv(h.input(), ConvSpec(3, 4, 3)),
             PoolSpec(2).stride(1).ceil_mode(true).divisor_override(3));
  core::randomise(h, 1);
  expect_round_trip(h, "stride 1", 20, 17, dir.path(), 1e-5);
}

// ---- (b) onnxruntime ----

void write_raw(const fs::path& file, const at::Tensor& t) {
  const at::Tensor c = t.to(at::kFloat).contiguous();
  std::ofstream(file, std::ios::binary)
      .write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
}

at::Tensor read_raw(const fs::path& file, at::IntArrayRef shape, at::ScalarType type) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(type));
  std::ifstream in(file, std::ios::binary);
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  if (in.gcount() != static_cast<std::streamsize>(t.nbytes()) || in.peek() != EOF) {
    throw Error(file.string() + " does not hold " + std::to_string(t.numel()) + " values");
  }
  return t;
}

// onnxruntime's output for `image` (1×3×H×W float32) through tests/onnx/ort_run.py, of `shape`.
at::Tensor onnxruntime(const fs::path& model, const at::Tensor& image, at::IntArrayRef shape) {
  const fs::path in = model.string() + ".input.f32", out = model.string() + ".output.f32";
  write_raw(in, image);
  const testing::CliRun c = testing::run_command(
      kPython.string() + " " + kOrtRun.string() + " " + model.string() + " " + in.string() + " " +
      std::to_string(image.size(2)) + " " + std::to_string(image.size(3)) + " " + out.string());
  if (c.exit_code != 0) throw Error("ort_run.py failed: " + c.output);
  return read_raw(out, shape, at::kFloat);
}

class OnnxRuntime : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kPython)) << "no " << kPython << " (scripts/setup makes it)";
  }
  // Exported, run by onnxruntime and by Tessel on a 1×3×height×width image: their relative
  // error, which must be below 1e-4.
  double compare(const Graph& g, const std::string& what, int64_t height, int64_t width) {
    const fs::path file = dir_.path() / "net.onnx";
    io::write_onnx(g, file, "tessel test");
    at::manual_seed(static_cast<int64_t>(height * 1000 + width));
    const at::Tensor image = at::randn({1, 3, height, width});
    const at::Tensor want = forward(g, image);
    const at::Tensor got = onnxruntime(file, image, want.sizes());
    const double error = max_relative(got, want);
    EXPECT_LT(error, 1e-4) << what;
    EXPECT_GT(want.abs().max().item<double>(), 0.0) << what;
    return error;
  }
  test::TempFolder dir_;
};

TEST_F(OnnxRuntime, RunsEveryOpAsTesselDoes) {
  for (const Head head : {Head::kAvg, Head::kMax, Head::kNone}) {
    Graph g = every_op_network(head);
    core::randomise(g, 5);
    const double error = compare(g, "every op, " + to_string(head), 96, 80);
    std::printf("every op, %s: %.3g\n", to_string(head).c_str(), error);
  }
}

TEST_F(OnnxRuntime, RunsZooModelsAsTesselDoes) {
  for (const std::string& name :
       {std::string("resnet18"), std::string("darknet19"), std::string("vgg-mini")}) {
    models::ModelOptions options;
    options.classes = 4;
    options.dropout = 0.25;
    options.global_max_pool = name == "darknet19";
    Graph g = models::build_model(name, options);
    core::randomise(g, 2);
    std::printf("%s: %.3g\n", name.c_str(), compare(g, name, 77, 64));
  }
}

// The attention-MIL head (core/exec/attention.h: a softmax over every position, the weighted sum of
// the features, CLAM-MB's per-class classifiers as a grouped linear) written as ONNX Softmax,
// MatMul and Reshape: onnxruntime, an independent implementation, computes Tessel's logits.
TEST_F(OnnxRuntime, RunsAttentionHeadsAsTesselDoes) {
  for (const bool multi : {false, true}) {
    models::ModelOptions options;
    options.classes = 3;
    options.dropout = 0.25;
    options.attention = models::AttentionHead{16, multi, multi ? 3 : 1};
    Graph g = models::build_model("vgg-mini", options);
    core::randomise(g, 4);
    const std::string what = multi ? "attention, gated, 3 branches" : "attention, 1 branch";
    std::printf("%s: %.3g\n", what.c_str(), compare(g, what, 83, 70));
  }
}

TEST_F(OnnxRuntime, RunsRandomNetworksAsTesselDoes) {
  int compared = 0;
  double worst = 0.0;
  for (uint64_t seed = 1000; compared < 24; ++seed) {
    Graph g = models::random_network(seed, 16);
    core::randomise(g, seed);
    try {
      worst = std::max(worst, compare(g, "random seed " + std::to_string(seed), 29, 23));
      ++compared;
    } catch (const Error& e) {
      ASSERT_NE(std::string(e.what()).find("no exact ONNX form"), std::string::npos) << e.what();
    }
  }
  std::printf("random networks: worst %.3g\n", worst);
}

// ---- (c) networks PyTorch exported, imported by Tessel, exported again ----

nlohmann::json info(const std::string& name) {
  std::ifstream in(kNets / (name + ".json"));
  if (!in) throw Error("no " + (kNets / (name + ".json")).string() + ": run make_networks.py");
  return nlohmann::json::parse(in);
}
std::vector<int64_t> shape_of(const nlohmann::json& j) { return j.get<std::vector<int64_t>>(); }

class Reexported : public ::testing::TestWithParam<std::string> {};

// onnxruntime on Tessel's file gives PyTorch's logits (or pooled features, where the importer
// left the file's head out).
TEST_P(Reexported, OnnxRuntimeGivesPyTorchsOutput) {
  ASSERT_TRUE(fs::exists(kPython)) << "no " << kPython << " (scripts/setup makes it)";
  const nlohmann::json j = info(GetParam());
  ImportedNetwork net = import_onnx(io::read_onnx(kNets / (GetParam() + ".onnx")));
  test::TempFolder dir;
  const fs::path file = dir.path() / (GetParam() + ".onnx");
  io::write_onnx(net.graph, file, "tessel test");
  const at::Tensor image =
      read_raw(kNets / (GetParam() + ".input.f32"), shape_of(j.at("input_shape")), at::kFloat);
  const std::string which = net.has_head ? "output" : "features";
  const at::Tensor want = read_raw(kNets / (GetParam() + "." + which + ".f32"),
                                   shape_of(j.at(which + "_shape")), at::kFloat);
  const at::Tensor got = onnxruntime(file, image, want.sizes());
  const double error = max_relative(got, want);
  EXPECT_LT(error, 1e-4) << GetParam() << " " << which;
  std::printf("%s %s: %.3g\n", GetParam().c_str(), which.c_str(), error);
}

INSTANTIATE_TEST_SUITE_P(Networks, Reexported,
                         ::testing::Values("tv_resnet18", "timm_convnext_nano", "tv_convnext_tiny",
                                           "timm_resnet50d", "timm_tf_efficientnet_lite0",
                                           "timm_efficientnet_lite0", "tv_densenet121",
                                           "tv_mobilenet_v3_small", "tv_regnet_y_400mf",
                                           "timm_efficientnet_b0"),
                         [](const auto& p) { return p.param; });

// float64 (onnxruntime has no float64 Conv): exported and imported again, PyTorch's logits.
TEST(OnnxExport, AnImportedFloat64NetworkComesBackWithPyTorchsOutput) {
  const nlohmann::json j = info("tv_resnet18_f64");
  ImportedNetwork net = import_onnx(io::read_onnx(kNets / "tv_resnet18_f64.onnx"));
  ASSERT_TRUE(net.has_head);
  test::TempFolder dir;
  Graph back = round_trip(net.graph, dir.path() / "net.onnx");
  ASSERT_EQ(dtype_of(back), at::kDouble);
  const at::Tensor image =
      read_raw(kNets / "tv_resnet18_f64.input.f64", shape_of(j.at("input_shape")), at::kDouble);
  const at::Tensor want =
      read_raw(kNets / "tv_resnet18_f64.output.f64", shape_of(j.at("output_shape")), at::kDouble);
  EXPECT_LT(max_relative(forward(back, image), want), 1e-10);
}

// ---- `tessel export` ----

// A training checkpoint of `model` with random weights, as `tessel train` writes one.
fs::path trained_checkpoint(const fs::path& dir, const std::string& model) {
  models::ModelOptions options;
  options.classes = 3;
  Graph g = models::build_model(model, options);
  core::randomise(g, 4);
  io::CheckpointState state;
  state.weights = io::named_weights(g.module());
  state.class_names = {"benign", "in-situ", "invasive"};
  TrainConfig config;
  config.manifest = dir / "slides.csv";
  config.model = model;
  config.mpp = 8.0;
  state.config = config.to_yaml();
  state.tessel_version = "test";
  const fs::path file = dir / (model + ".h5");
  io::write_checkpoint(file, state);
  return file;
}

TEST(ExportCli, WritesATrainedCheckpointAsAFileOnnxRuntimeRunsAsTesselDoes) {
  test::TempFolder dir;
  const fs::path checkpoint = trained_checkpoint(dir.path(), "resnet18");
  const fs::path onnx = dir.path() / "resnet18.onnx";
  const auto r = testing::run_cli("export " + checkpoint.string() + " --onnx " + onnx.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* part : {"(resnet18)", "'image': N×3×H×W", "ImageNet's mean", "8 µm per pixel",
                           "N×3 logits for benign,in-situ,invasive", onnx.c_str()}) {
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
  }
  std::ifstream in(onnx, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(bytes.find("benign,in-situ,invasive"), std::string::npos);  // tessel.classes
  ASSERT_TRUE(fs::exists(kPython)) << "no " << kPython << " (scripts/setup makes it)";
  const TrainedModel model = load_trained_model(checkpoint, false, "cpu");
  at::manual_seed(1);
  const at::Tensor image = at::randn({1, 3, 70, 90});
  const at::Tensor want = forward(model.graph, image);
  EXPECT_LT(max_relative(onnxruntime(onnx, image, want.sizes()), want), 1e-4);
}

// `tessel import` and `tessel export`: PyTorch's network back as a file that gives its output.
TEST(ExportCli, WritesAnImportedCheckpointBackAsAFileThatGivesPyTorchsOutput) {
  test::TempFolder dir;
  const fs::path checkpoint = dir.path() / "r18.h5", onnx = dir.path() / "r18.onnx";
  const auto i = testing::run_cli("import " + (kNets / "tv_resnet18.onnx").string() + " --out " +
                                  checkpoint.string());
  ASSERT_EQ(i.exit_code, 0) << i.output;
  const auto r = testing::run_cli("export " + checkpoint.string() + " --onnx " + onnx.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("N×10 values of the file's classifier"), std::string::npos) << r.output;
  ASSERT_TRUE(fs::exists(kPython)) << "no " << kPython << " (scripts/setup makes it)";
  const nlohmann::json j = info("tv_resnet18");
  const at::Tensor image =
      read_raw(kNets / "tv_resnet18.input.f32", shape_of(j.at("input_shape")), at::kFloat);
  const at::Tensor want =
      read_raw(kNets / "tv_resnet18.output.f32", shape_of(j.at("output_shape")), at::kFloat);
  EXPECT_LT(max_relative(onnxruntime(onnx, image, want.sizes()), want), 1e-4);
}

// Missing, damaged, or a network with an op ONNX cannot express: one line naming the
// checkpoint and the reason, exit 1, no file (nor its .partial) left.
TEST(ExportCli, CheckpointsItCannotExportAreOneLineErrorsAndWriteNothing) {
  test::TempFolder dir;
  const fs::path good = trained_checkpoint(dir.path(), "tiny");
  const fs::path truncated = dir.path() / "truncated.h5";
  {
    std::ifstream in(good, std::ios::binary);
    std::string head(static_cast<size_t>(fs::file_size(good) / 2), '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(truncated, std::ios::binary) << head;
  }
  // A network `tessel import` could have written, with a pool ONNX has no exact form for.
  const fs::path inexpressible = dir.path() / "divisor.h5";
  {
    Graph g(3);
    g.avg_pool(g.conv(g.input(), ConvSpec(3, 4, 3), "conv"),
               PoolSpec(3).stride(2).ceil_mode(true).divisor_override(5));
    core::randomise(g, 1);
    io::CheckpointState state;
    state.weights = io::named_weights(g.module());
    state.network = models::network_json(g);
    state.config = R"({"imported_from": "x.onnx"})";
    io::write_checkpoint(inexpressible, state);
  }
  const std::vector<std::pair<fs::path, std::string>> cases = {
      {dir.path() / "missing.h5", "does not exist"},
      {truncated, "damaged"},
      {inexpressible, "layer 'avgpool1'"},
  };
  for (const auto& [file, reason] : cases) {
    const fs::path out = dir.path() / "out.onnx";
    const auto r = testing::run_cli("export " + file.string() + " --onnx " + out.string());
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_NE(r.output.find(file.string()), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(reason), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out)) << file;
    EXPECT_FALSE(fs::exists(out.string() + ".partial")) << file;
  }
  // A folder that does not exist: the ONNX file named.
  const fs::path nowhere = dir.path() / "no" / "such" / "out.onnx";
  const auto r = testing::run_cli("export " + good.string() + " --onnx " + nowhere.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find(nowhere.string()), std::string::npos) << r.output;
}

// Issue 19's bar: a trained resnet18 exported to ONNX and run by onnxruntime gives the logits
// `tessel eval` gives, within 1e-4, on every slide (generated: 6 slides of 512² read at 4 µm).
TEST(ExportCli, OnnxRuntimeGivesTheLogitsOfTesselEvalOnEverySlide) {
  test::TempFolder dir;
  const fs::path slides = dir.path() / "slides";
  auto run =
      testing::run_cli("sample-data --out " + slides.string() + " --slides 6 --size 1024 --seed 3");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const fs::path config = dir.path() / "run.yaml";
  std::ofstream(config) << "manifest: " << (slides / "manifest.csv").string()
                        << "\nmodel: resnet18\nmpp: 4.0\nepochs: 1\nbudget: 512MiB\nseed: 2\n"
                        << "output: " << (dir.path() / "run").string() << "\n";
  run = testing::run_cli("train --config " + config.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const fs::path best = dir.path() / "run" / "checkpoints" / "best.h5";
  const fs::path inputs = dir.path() / "inputs";
  run = testing::run_cli("eval --checkpoint " + best.string() + " --split all --save-inputs " +
                         inputs.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const fs::path onnx = dir.path() / "resnet18.onnx";
  run = testing::run_cli("export " + best.string() + " --onnx " + onnx.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream lines(inputs / "inputs.jsonl");
  int slides_checked = 0;
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const auto shape = j.at("shape").get<std::vector<int64_t>>();
    const fs::path out = dir.path() / "ort.f32";
    const testing::CliRun ran = testing::run_command(
        kPython.string() + " " + kOrtRun.string() + " " + onnx.string() + " " +
        (inputs / j.at("input").get<std::string>()).string() + " " + std::to_string(shape[2]) +
        " " + std::to_string(shape[3]) + " " + out.string());
    ASSERT_EQ(ran.exit_code, 0) << ran.output;
    const auto logits = j.at("logits").get<std::vector<double>>();
    std::ifstream in(out, std::ios::binary);
    std::vector<float> ort(logits.size());
    in.read(reinterpret_cast<char*>(ort.data()), static_cast<std::streamsize>(ort.size() * 4));
    ASSERT_EQ(in.gcount(), static_cast<std::streamsize>(ort.size() * 4));
    double scale = 1e-30, worst = 0;
    for (size_t k = 0; k < logits.size(); ++k) {
      scale = std::max(scale, std::abs(logits[k]));
      worst = std::max(worst, std::abs(logits[k] - ort[k]));
    }
    EXPECT_LT(worst / scale, 1e-4) << j.at("slide");
    std::cout << j.at("slide").get<std::string>() << ": onnxruntime against tessel eval, max "
              << "relative error " << worst / scale << "\n";
    ++slides_checked;
  }
  EXPECT_EQ(slides_checked, 6);
}

}  // namespace
}  // namespace tessel::pipelines
