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
