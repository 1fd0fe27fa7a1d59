// ONNX import (issue 19) against PyTorch: networks exported by tests/onnx/make_networks.py (random
// weights, torchvision and timm) are imported, and Tessel's forward must equal PyTorch's on the
// same image (float32 1e-4, float64 1e-10); tiled training steps of each imported network must
// equal plain autograd; networks Tessel cannot tile are refused with the node and the reason.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "core/error.h"
#include "core/gradcheck.h"
#include "core/planner.h"
#include "core/tile_ops.h"
#include "io/onnx_model.h"
#include "pipelines/onnx_import.h"
#include "tests/io/temp_folder.h"
#include "tests/run_cli.h"

namespace tessel::pipelines {
namespace {

namespace fs = std::filesystem;

const fs::path kNets = TESSEL_ONNX_NETS;

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
TEST_P(Imported, TiledStepsMatchPlainAutograd) {
  ImportedNetwork net = import_onnx(io::read_onnx(kNets / (GetParam() + ".onnx")));
  core::Graph& g = net.graph;
  g.module().to(at::kDouble);
  const core::Shape input{3, 75, 62};
  core::PlanOptions o;
  o.strategy = core::Strategy::kGrid;
  o.element_bytes = 8;
  o.tiles_y = 3;
  o.tiles_x = 3;
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
                                           "tv_convnext_tiny", "timm_resnet50d",
                                           "timm_convnext_nano", "timm_efficientnet_lite0",
                                           "timm_tf_efficientnet_lite0", "tv_resnet18_legacy",
                                           "tv_resnet18_f64"),
                         [](const auto& p) { return p.param; });

class Refused : public ::testing::TestWithParam<std::string> {};

TEST_P(Refused, NamesTheNodeAndTheReason) {
  const nlohmann::json j = info(GetParam());
  try {
    import_onnx(io::read_onnx(kNets / (GetParam() + ".onnx")));
    FAIL() << GetParam() << " was imported";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("node '"), std::string::npos) << what;
    EXPECT_NE(what.find("squeeze-and-excitation"), std::string::npos) << what;
    EXPECT_NE(what.find(GetParam() + ".onnx"), std::string::npos) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Networks, Refused,
                         ::testing::Values("tv_mobilenet_v3_small", "tv_regnet_y_400mf"),
                         [](const auto& p) { return p.param; });

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
  ImportedNetwork import(const std::string& output) {
    model_.outputs = {output};
    return import_onnx(model_);
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

// `tessel import` as a user runs it: the checkpoint it writes is a network plan and gradcheck
// take (`--model NET.h5`), with the planner's plan for a 20000² slide under 2 GiB.
TEST(ImportCli, WritesACheckpointThatPlanAndGradcheckTake) {
  test::TempFolder dir;
  const std::string out = (dir.path() / "resnet18.h5").string();
  const auto run =
      testing::run_cli("import " + (kNets / "tv_resnet18.onnx").string() + " --out " + out);
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
      {kNets / "tv_regnet_y_400mf.onnx", "squeeze-and-excitation"},
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

}  // namespace
}  // namespace tessel::pipelines
