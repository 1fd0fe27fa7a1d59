// `tessel export CKPT --onnx NET.onnx` (issue 19): a trained network as an ONNX file for
// deployment in other tools (onnxruntime, OpenCV, QuPath's extensions, ...), through
// io::write_onnx. The network is rebuilt from the checkpoint alone, as `tessel eval` does: a zoo
// model named in its config or the network it carries, with the slide-level head of its classes;
// a checkpoint `tessel import` wrote gives back the imported network as it was.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tessel::pipelines {

struct ExportReport {
  std::string summary;  // readable: the checkpoint, layers, parameters, input, output, the file
  int64_t layers = 0, parameters = 0;  // parameters: with batch-norm statistics
  std::vector<std::string> classes;    // the output's order; empty for an imported network
  double seconds = 0.0;
};

// Throws tessel::Error naming the checkpoint and the reason: missing or damaged, weights that do
// not fit its network, an op ONNX cannot express exactly. Nothing is written then.
ExportReport export_onnx_file(const std::filesystem::path& checkpoint,
                              const std::filesystem::path& onnx);

}  // namespace tessel::pipelines
