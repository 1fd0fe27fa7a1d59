#include "io/onnx_model.h"

#include <ATen/ATen.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <fstream>
#include <set>

#include "core/error.h"
#include "io/user_file.h"

namespace tessel::io {
namespace {

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what) {
  throw Error("ONNX file " + file.string() + ": " + what);
}

// Where an external tensor's bytes are: the file beside the model (its `location`, which may not
// leave the model's folder), the offset and the length (ONNX's external data: `torch.onnx.export`
// writes NET.onnx.data by default).
struct ExternalData {
  std::filesystem::path path;
  int64_t offset = 0;
  int64_t length = -1;  // -1: to the end of the file
};

ExternalData external_data(const onnx::TensorProto& t, const std::filesystem::path& file,
                           const std::string& name) {
  ExternalData d;
  std::string location;
  for (const onnx::StringStringEntryProto& e : t.external_data()) {
    const auto number = [&](const char* what) {
      const std::string& v = e.value();
      if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos) {
        fail(file, name + "'s external " + what + " '" + v + "' is not a number of bytes");
      }
      return std::stoll(v);
    };
    if (e.key() == "location") location = e.value();
    if (e.key() == "offset") d.offset = number("offset");
    if (e.key() == "length") d.length = number("length");
  }
  const std::filesystem::path relative = std::filesystem::path(location).lexically_normal();
  const bool leaves = relative.is_absolute() || relative.has_root_name() || relative.empty() ||
                      *relative.begin() == ".." || relative == ".";
  if (location.empty() || leaves) {
    fail(file, name + "'s external data '" + location +
                   "' is not a file in the model's folder; Tessel reads external data only "
                   "from beside the .onnx file");
  }
  const std::filesystem::path folder = file.parent_path().empty() ? "." : file.parent_path();
  d.path = folder / relative;
  // A link out of the folder counts as leaving it.
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::weakly_canonical(d.path, ec);
  const std::filesystem::path home = std::filesystem::weakly_canonical(folder, ec);
  if (!ec && std::filesystem::relative(real, home).native().starts_with("..")) {
    fail(file, name + "'s external data " + d.path.string() + " leads out of the model's folder");
  }
  if (const std::string why = not_a_regular_file(d.path); !why.empty()) {
    fail(file, name + "'s external data " + d.path.string() + ": " + why);
  }
  return d;
}

// An external tensor of `expected` bytes; allocated only once the file is known to hold them.
at::Tensor read_external(const onnx::TensorProto& t, const std::filesystem::path& file,
                         const std::string& name, const std::vector<int64_t>& shape,
                         at::ScalarType type, int64_t expected) {
  const ExternalData d = external_data(t, file, name);
  if (d.length >= 0 && d.length != expected) {
    fail(file, name + "'s external data holds " + std::to_string(d.length) +
                   " bytes for a shape of " + std::to_string(expected) + " bytes");
  }
  std::ifstream in(d.path, std::ios::binary);
  in.seekg(0, std::ios::end);
  const auto size = static_cast<int64_t>(in.tellg());
  if (!in || d.offset > size || size - d.offset < expected) {
    fail(file, name + "'s external data " + d.path.string() + " is shorter than its offset " +
                   std::to_string(d.offset) + " and " + std::to_string(expected) +
                   " bytes (truncated, or not this model's)");
  }
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(type));
  in.seekg(d.offset);
  if (expected > 0) in.read(static_cast<char*>(out.data_ptr()), expected);
  if (!in) fail(file, name + "'s external data " + d.path.string() + " cannot be read");
  return out;
}

// A TensorProto as a CPU tensor: raw little-endian bytes, the typed fields, or external data.
at::Tensor to_tensor(const onnx::TensorProto& t, const std::filesystem::path& file) {
  const std::string name = "tensor '" + t.name() + "'";
  const bool external = t.data_location() == onnx::TensorProto::EXTERNAL;
  std::vector<int64_t> shape(t.dims().begin(), t.dims().end());
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d != 0 && count > (int64_t{1} << 40) / d)) fail(file, name + " has a bad shape");
    count *= d;
  }
  at::ScalarType type = at::kFloat;
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      type = at::kFloat;
      break;
    case onnx::TensorProto::DOUBLE:
      type = at::kDouble;
      break;
    case onnx::TensorProto::INT64:
      type = at::kLong;
      break;
    default:
      fail(file, name + " is of ONNX type " + std::to_string(t.data_type()) +
                     "; Tessel reads float32, float64 and int64 tensors");
  }
  // The bytes the file holds must match the shape before anything is allocated: a damaged shape
  // would otherwise ask for terabytes (found by fuzzing).
  const int64_t held = t.has_raw_data()      ? static_cast<int64_t>(t.raw_data().size())
                       : type == at::kFloat  ? int64_t{t.float_data_size()} * 4
                       : type == at::kDouble ? int64_t{t.double_data_size()} * 8
                                             : int64_t{t.int64_data_size()} * 8;
  const int64_t expected = count * static_cast<int64_t>(c10::elementSize(type));
  if (external) return read_external(t, file, name, shape, type, expected);
  if (held != expected) {
    fail(file, name + " holds " + std::to_string(held) + " bytes for a shape of " +
                   std::to_string(count) + " values");
  }
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(type));
  if (t.has_raw_data()) {
    // An empty tensor has no storage to copy into (memcpy to null; found by fuzzing).
    if (expected > 0) {
      std::memcpy(out.data_ptr(), t.raw_data().data(), static_cast<size_t>(expected));
    }
    return out;
  }
  const auto copy = [](const auto& field, auto* target) {
    std::copy(field.begin(), field.end(), target);
  };
  if (type == at::kFloat) copy(t.float_data(), out.data_ptr<float>());
  if (type == at::kDouble) copy(t.double_data(), out.data_ptr<double>());
  if (type == at::kLong) copy(t.int64_data(), out.data_ptr<int64_t>());
  return out;
}

}  // namespace

OnnxModel read_onnx(const std::filesystem::path& file) {
  if (const std::string why = not_a_regular_file(file); !why.empty()) {
    fail(file, why == kNoSuchFile ? "does not exist" : why);
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    fail(file, std::filesystem::exists(file) ? "cannot be read" : "does not exist");
  }
  onnx::ModelProto proto;
  if (!proto.ParseFromIstream(&in) || !proto.has_graph()) {
    fail(file, "is not an ONNX model, or is truncated");
  }
  OnnxModel model;
  model.file = file;
  model.ir_version = proto.ir_version();
  model.producer = proto.producer_name() + " " + proto.producer_version();
  for (const onnx::OperatorSetIdProto& set : proto.opset_import()) {
    if (set.domain().empty() || set.domain() == "ai.onnx") {
      model.opset = set.version();
    } else {
      fail(file, "uses ops of the domain '" + set.domain() + "', which Tessel does not know");
    }
  }
  if (model.opset < kOldestOnnxOpset || model.opset > kNewestOnnxOpset) {
    fail(file, "is opset " + std::to_string(model.opset) + "; Tessel reads opsets " +
                   std::to_string(kOldestOnnxOpset) + " to " + std::to_string(kNewestOnnxOpset) +
                   " (torch.onnx.export(..., opset_version=18), or the default 20)");
  }
  const onnx::GraphProto& graph = proto.graph();
  for (const onnx::TensorProto& t : graph.initializer()) {
    model.constants[t.name()] = to_tensor(t, file);
  }
  // The image input: the one graph input that is not an initializer.
  std::vector<const onnx::ValueInfoProto*> images;
  for (const onnx::ValueInfoProto& v : graph.input()) {
    if (!model.constants.contains(v.name())) images.push_back(&v);
  }
  if (images.size() != 1) {
    std::string names;
    for (const auto* v : images) names += (names.empty() ? "" : ", ") + v->name();
    fail(file, "has " + std::to_string(images.size()) + " inputs besides its weights" +
                   (names.empty() ? std::string() : " (" + names + ")") +
                   "; Tessel takes networks of one image input");
  }
  model.input = images.front()->name();
  const onnx::TypeProto& type = images.front()->type();
  if (!type.has_tensor_type() || !type.tensor_type().has_shape() ||
      type.tensor_type().shape().dim_size() != 4) {
    fail(file, "input '" + model.input + "' is not an N×C×H×W image");
  }
  for (const onnx::TensorShapeProto::Dimension& d : type.tensor_type().shape().dim()) {
    const int64_t size = d.has_dim_value() ? d.dim_value() : -1;
    // Far beyond any image a network takes at once; the importer's size arithmetic stays
    // inside int64 below it.
    if (size > kMaxOnnxInputSize) {
      fail(file, "input '" + model.input + "' has a dimension of " + std::to_string(size) +
                     ", more than Tessel reads (" + std::to_string(kMaxOnnxInputSize) + ")");
    }
    model.input_shape.push_back(size);
  }
  if (model.input_shape[1] <= 0) {
    fail(file, "input '" + model.input + "' leaves its channel count open");
  }
  for (const onnx::ValueInfoProto& v : graph.output()) model.outputs.push_back(v.name());
  // ONNX graphs assign every value once (static single assignment, as onnx.checker requires);
  // the importer relies on it: a value made twice could alias itself.
  std::set<std::string> made{model.input};
  for (const onnx::TensorProto& t : graph.initializer()) made.insert(t.name());
  const auto make = [&](const onnx::NodeProto& n, const std::string& value) {
    if (!value.empty() && !made.insert(value).second) {
      fail(file, "node '" + n.name() + "' (" + n.op_type() + ") makes '" + value +
                     "', which the file already has: ONNX assigns every value once");
    }
  };
  for (const onnx::NodeProto& n : graph.node()) {
    for (const std::string& out : n.output()) make(n, out);
    if (!n.domain().empty() && n.domain() != "ai.onnx") {
      fail(file,
           "node '" + n.name() + "' (" + n.op_type() + ") is of the domain '" + n.domain() + "'");
    }
    if (n.op_type() == "Constant") {
      if (n.output_size() != 1) fail(file, "Constant node '" + n.name() + "' has no one output");
      bool found = false;
      for (const onnx::AttributeProto& a : n.attribute()) {
        if (a.name() == "value" && a.has_t()) {
          model.constants[n.output(0)] = to_tensor(a.t(), file);
          found = true;
        }
      }
      if (!found) fail(file, "Constant node '" + n.name() + "' holds no tensor Tessel reads");
      continue;
    }
    OnnxNode node;
    node.name = n.name();
    node.op_type = n.op_type();
    node.inputs.assign(n.input().begin(), n.input().end());
    node.outputs.assign(n.output().begin(), n.output().end());
    for (const onnx::AttributeProto& a : n.attribute()) {
      switch (a.type()) {
        case onnx::AttributeProto::INT:
          node.ints[a.name()] = {a.i()};
          break;
        case onnx::AttributeProto::INTS:
          node.ints[a.name()].assign(a.ints().begin(), a.ints().end());
          break;
        case onnx::AttributeProto::FLOAT:
          node.floats[a.name()] = {a.f()};
          break;
        case onnx::AttributeProto::FLOATS:
          node.floats[a.name()].assign(a.floats().begin(), a.floats().end());
          break;
        case onnx::AttributeProto::STRING:
          node.strings[a.name()] = a.s();
          break;
        default:
          fail(file, "node '" + n.name() + "' (" + n.op_type() + ") has attribute '" + a.name() +
                         "' of a kind Tessel does not read (a tensor or a subgraph)");
      }
    }
    model.nodes.push_back(std::move(node));
  }
  if (model.nodes.empty()) fail(file, "has no nodes");
  return model;
}

}  // namespace tessel::io
