// An ONNX file as Tessel reads it (issue 19): the graph's nodes in order with their attributes,
// its constants (initializers and Constant nodes) as tensors, and its one image input. Nothing is
// interpreted here: the importer maps the ops onto core's graph. Parsed with Debian's onnx_proto
// (docs/onnx-survey.md); the checker and shape inference of libonnx 1.12 are older than the
// files torch 2.11 writes and are not used.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace tessel::io {

struct OnnxNode {
  std::string name, op_type;
  std::vector<std::string> inputs, outputs;           // "" for an optional input left out
  std::map<std::string, std::vector<int64_t>> ints;   // INT and INTS attributes
  std::map<std::string, std::vector<double>> floats;  // FLOAT and FLOATS attributes
  std::map<std::string, std::string> strings;         // STRING attributes
};

struct OnnxModel {
  std::filesystem::path file;
  int64_t ir_version = 0;
  int64_t opset = 0;  // of the default domain (ai.onnx)
  std::string producer;
  std::string input;                 // the image input's name
  std::vector<int64_t> input_shape;  // N, C, H, W; -1 where the file leaves it open
  std::vector<std::string> outputs;
  std::vector<OnnxNode> nodes;                  // Constant nodes removed (their values below)
  std::map<std::string, at::Tensor> constants;  // float32, float64 or int64, on the CPU
};

// The opsets Tessel reads (torch 2.11 exports opset 20 by default, 18 when asked; its legacy
// exporter 17). Opsets 19 and 20 change nothing the importer reads: AveragePool gains dilations
// (refused), Pad the "wrap" mode (refused), Gelu becomes a standard op (read as before).
constexpr int64_t kOldestOnnxOpset = 11, kNewestOnnxOpset = 20;
// The largest dimension of the image input Tessel reads (2^31 - 1).
constexpr int64_t kMaxOnnxInputSize = (int64_t{1} << 31) - 1;

// Throws tessel::Error naming the file and, where there is one, the node or tensor: not a file,
// not ONNX or truncated, an opset outside the range, other than one image input (N×C×H×W with C
// known, none above kMaxOnnxInputSize), a tensor of an unsupported type or whose bytes do not
// match its shape, weights stored outside the file, a value made twice.
OnnxModel read_onnx(const std::filesystem::path& file);

}  // namespace tessel::io
