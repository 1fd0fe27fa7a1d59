// libFuzzer harness of the ONNX reader and importer (io/onnx_model.h, pipelines/onnx_import.h):
// any bytes as an .onnx file, read, and when the reader accepts it, imported and its shapes
// computed at the file's image size, as `tessel import` checks it. Both document tessel::Error
// for what they refuse (a file that is not ONNX, truncated, of another opset, tensors that do not
// match their shapes; a node that cannot be mapped exactly); anything else escaping (a c10::Error
// from a tensor op on a damaged constant, std::out_of_range, ...), a crash, a hang, an allocation
// beyond -malloc_limit_mb or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "core/graph/graph.h"
#include "io/onnx_model.h"
#include "pipelines/onnx_import.h"
#include "tests/fuzz/input_file.h"

namespace {

void import(const tessel::io::OnnxModel& model) {
  try {
    const tessel::pipelines::ImportedNetwork net = tessel::pipelines::import_onnx(model);
    const tessel::core::Graph& g = net.graph;
    tessel::fuzz::expect(g.size() >= 2, "an imported network has layers");
    tessel::fuzz::expect(g.node(g.input()).channels == model.input_shape[1],
                         "the network takes the file's input channels");
    // The size `tessel import` checks the network at: the file's own, else ImageNet's.
    const bool known = model.input_shape[2] > 0 && model.input_shape[3] > 0;
    g.shapes({model.input_shape[1], known ? model.input_shape[2] : 224,
              known ? model.input_shape[3] : 224});
  } catch (const tessel::Error&) {
    // The documented rejection: a node that cannot be mapped, or a network that does not fit
    // the image.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tessel::fuzz::InputFile file("model.onnx");
  const auto& path = file.write(data, size);
  // Any other exception is not caught: std::terminate then names its type and what(), and the
  // sanitizer's stack shows where it was thrown.
  tessel::io::OnnxModel model;
  try {
    model = tessel::io::read_onnx(path);
  } catch (const tessel::Error&) {
    return 0;  // the documented rejection
  }
  tessel::fuzz::expect(!model.nodes.empty() && model.input_shape.size() == 4,
                       "an accepted model has nodes and an N×C×H×W input");
  for (const auto& [name, t] : model.constants) {
    tessel::fuzz::expect(t.defined(), "constants are tensors");
  }
  import(model);
  return 0;
}
