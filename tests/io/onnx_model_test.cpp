// io::read_onnx on ONNX files built here with the protobuf messages (no Python): nodes, attributes
// and constants come back as written; bad files are one error naming the file and the reason.
#include "io/onnx_model.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <fstream>

#include "core/error.h"
#include "temp_folder.h"

namespace tessel::io {
namespace {

onnx::TensorProto tensor(const std::string& name, const at::Tensor& t) {
  onnx::TensorProto p;
  p.set_name(name);
  for (int64_t d : t.sizes()) p.add_dims(d);
  p.set_data_type(t.scalar_type() == at::kLong ? onnx::TensorProto::INT64
                                               : onnx::TensorProto::FLOAT);
  p.set_raw_data(t.data_ptr(), static_cast<size_t>(t.nbytes()));
  return p;
}

// x (1×3×H×W) → Conv(w, b; pads 0 0 1 1, group 1) → Relu → Clip(min, max from a Constant) → y.
onnx::ModelProto small_model(int64_t opset = 17) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("test");
  m.add_opset_import()->set_version(opset);
  onnx::GraphProto& g = *m.mutable_graph();
  onnx::ValueInfoProto& x = *g.add_input();
  x.set_name("x");
  auto* shape = x.mutable_type()->mutable_tensor_type()->mutable_shape();
  x.mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  shape->add_dim()->set_dim_value(1);
  shape->add_dim()->set_dim_value(3);
  shape->add_dim()->set_dim_param("height");
  shape->add_dim()->set_dim_param("width");
  at::manual_seed(1);
  *g.add_initializer() = tensor("w", at::randn({4, 3, 3, 3}));
  onnx::TensorProto b;  // typed fields instead of raw bytes
  b.set_name("b");
  b.add_dims(4);
  b.set_data_type(onnx::TensorProto::FLOAT);
  for (float v : {0.5F, -1.0F, 2.0F, 0.0F}) b.add_float_data(v);
  *g.add_initializer() = b;
  onnx::NodeProto& conv = *g.add_node();
  conv.set_name("conv1");
  conv.set_op_type("Conv");
  for (const char* i : {"x", "w", "b"}) conv.add_input(i);
  conv.add_output("c");
  onnx::AttributeProto& pads = *conv.add_attribute();
  pads.set_name("pads");
  pads.set_type(onnx::AttributeProto::INTS);
  for (int64_t p : {0, 0, 1, 1}) pads.add_ints(p);
  onnx::AttributeProto& group = *conv.add_attribute();
  group.set_name("group");
  group.set_type(onnx::AttributeProto::INT);
  group.set_i(1);
  onnx::NodeProto& relu = *g.add_node();
  relu.set_name("relu1");
  relu.set_op_type("Relu");
  relu.add_input("c");
  relu.add_output("r");
  onnx::NodeProto& six = *g.add_node();
  six.set_op_type("Constant");
  six.add_output("six");
  onnx::AttributeProto& value = *six.add_attribute();
  value.set_name("value");
  value.set_type(onnx::AttributeProto::TENSOR);
  *value.mutable_t() = tensor("", at::full({}, 6.0F));
  onnx::NodeProto& clip = *g.add_node();
  clip.set_name("clip1");
  clip.set_op_type("Clip");
  for (const char* i : {"r", "", "six"}) clip.add_input(i);
  clip.add_output("y");
  g.add_output()->set_name("y");
  return m;
}

class OnnxModelTest : public ::testing::Test {
 protected:
  std::filesystem::path write(const std::string& name, const onnx::ModelProto& m) {
    const auto path = folder_.path() / name;
    std::ofstream out(path, std::ios::binary);
    m.SerializeToOstream(&out);
    return path;
  }
  std::string error_of(const std::filesystem::path& path) {
    try {
      read_onnx(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  test::TempFolder folder_;
};

TEST_F(OnnxModelTest, ReadsNodesAttributesConstantsAndTheImageInput) {
  const onnx::ModelProto m = small_model();
  const OnnxModel model = read_onnx(write("net.onnx", m));
  EXPECT_EQ(model.opset, 17);
  EXPECT_EQ(model.input, "x");
  EXPECT_EQ(model.input_shape, (std::vector<int64_t>{1, 3, -1, -1}));
  EXPECT_EQ(model.outputs, (std::vector<std::string>{"y"}));
  ASSERT_EQ(model.nodes.size(), 3U);  // the Constant became a constant
  EXPECT_EQ(model.nodes[0].op_type, "Conv");
  EXPECT_EQ(model.nodes[0].ints.at("pads"), (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(model.nodes[0].ints.at("group"), (std::vector<int64_t>{1}));
  EXPECT_EQ(model.nodes[2].inputs, (std::vector<std::string>{"r", "", "six"}));
  at::manual_seed(1);
  EXPECT_TRUE(at::equal(model.constants.at("w"), at::randn({4, 3, 3, 3})));
  EXPECT_TRUE(at::equal(model.constants.at("b"), at::tensor({0.5F, -1.0F, 2.0F, 0.0F})));
  EXPECT_EQ(model.constants.at("six").item<float>(), 6.0F);
}

TEST_F(OnnxModelTest, BadFilesAreOneErrorNamingTheFileAndTheReason) {
  EXPECT_NE(error_of(folder_.path() / "missing.onnx").find("does not exist"), std::string::npos);
  const auto garbage = folder_.write("garbage.onnx", "not a protobuf at all \xff\xff\xff");
  EXPECT_NE(error_of(garbage).find(garbage.string() + ": is not an ONNX model, or is truncated"),
            std::string::npos)
      << error_of(garbage);
  // Truncated in the middle of the weights.
  std::string bytes;
  small_model().SerializeToString(&bytes);
  const auto truncated = folder_.write("truncated.onnx", bytes.substr(0, bytes.size() / 2));
  EXPECT_NE(error_of(truncated).find("truncated"), std::string::npos) << error_of(truncated);

  EXPECT_NE(error_of(write("old.onnx", small_model(9))).find("is opset 9; Tessel reads opsets 11"),
            std::string::npos);
  onnx::ModelProto two = small_model();
  two.mutable_graph()->add_input()->set_name("mask");
  EXPECT_NE(error_of(write("two.onnx", two)).find("has 2 inputs besides its weights (x, mask)"),
            std::string::npos)
      << error_of(write("two.onnx", two));
  onnx::ModelProto wrong = small_model();
  wrong.mutable_graph()->mutable_initializer(0)->mutable_raw_data()->resize(10);
  EXPECT_NE(error_of(write("wrong.onnx", wrong)).find("tensor 'w' holds 10 bytes"),
            std::string::npos);
  onnx::ModelProto external = small_model();
  external.mutable_graph()->mutable_initializer(0)->set_data_location(onnx::TensorProto::EXTERNAL);
  EXPECT_NE(error_of(write("external.onnx", external)).find("is not a file in the model's folder"),
            std::string::npos)
      << error_of(write("external.onnx", external));
  onnx::ModelProto half = small_model();
  half.mutable_graph()->mutable_initializer(1)->set_data_type(onnx::TensorProto::FLOAT16);
  EXPECT_NE(error_of(write("half.onnx", half)).find("Tessel reads float32, float64 and int64"),
            std::string::npos);
}

// The weights in a file beside the model, as torch.onnx.export writes by default (NET.onnx.data):
// read from their offset and length; a location outside the model's folder, a link out of it
// and a file too short for the tensor are refused naming the tensor and the file.
onnx::ModelProto with_external_weights(const std::string& location, int64_t offset) {
  onnx::ModelProto m = small_model();
  onnx::TensorProto& w = *m.mutable_graph()->mutable_initializer(0);
  const std::string bytes = w.raw_data();
  w.clear_raw_data();
  w.set_data_location(onnx::TensorProto::EXTERNAL);
  for (const auto& [key, value] : {std::pair<std::string, std::string>{"location", location},
                                   {"offset", std::to_string(offset)},
                                   {"length", std::to_string(bytes.size())}}) {
    onnx::StringStringEntryProto& e = *w.add_external_data();
    e.set_key(key);
    e.set_value(value);
  }
  return m;
}

TEST_F(OnnxModelTest, ExternalWeightsAreReadFromBesideTheModelOnly) {
  std::string bytes = small_model().graph().initializer(0).raw_data();
  folder_.write("net.onnx.data", std::string(16, 'x') + bytes);
  const OnnxModel model = read_onnx(write("net.onnx", with_external_weights("net.onnx.data", 16)));
  at::manual_seed(1);
  EXPECT_TRUE(at::equal(model.constants.at("w"), at::randn({4, 3, 3, 3})));

  std::filesystem::create_directories(folder_.path() / "inner");
  std::filesystem::create_symlink("/etc/hostname", folder_.path() / "link.data");
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"../net.onnx.data", "is not a file in the model's folder"},
      {"/etc/hostname", "is not a file in the model's folder"},
      {"inner/../../x.data", "is not a file in the model's folder"},
      {"link.data", "leads out of the model's folder"},
      {"missing.data", "no such file"},
      {"inner", "it is a folder, not a file"},
  };
  for (const auto& [location, reason] : refused) {
    const std::string message = error_of(write("bad.onnx", with_external_weights(location, 0)));
    EXPECT_NE(message.find("tensor 'w''s external data"), std::string::npos) << message;
    EXPECT_NE(message.find(reason), std::string::npos) << location << ": " << message;
  }
  const std::string shorter =
      error_of(write("short.onnx", with_external_weights("net.onnx.data", 17)));
  EXPECT_NE(shorter.find("is shorter than its offset 17"), std::string::npos) << shorter;
}

}  // namespace
}  // namespace tessel::io
