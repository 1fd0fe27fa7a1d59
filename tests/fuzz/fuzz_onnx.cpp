// libFuzzer harness of the ONNX reader (io/onnx_model.h): any bytes as an .onnx file. read_onnx
// documents tessel::Error for a file that is not ONNX, truncated, of another opset or input, or
// whose tensors do not match their shapes; anything else escaping, a crash or a sanitizer report
// is a finding.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/onnx_model.h"
#include "tests/fuzz/input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tessel::fuzz::InputFile file("model.onnx");
  const auto& path = file.write(data, size);
  try {
    const tessel::io::OnnxModel model = tessel::io::read_onnx(path);
    tessel::fuzz::expect(!model.nodes.empty() && model.input_shape.size() == 4,
                         "an accepted model has nodes and an N×C×H×W input");
    for (const auto& [name, t] : model.constants) {
      tessel::fuzz::expect(t.defined(), "constants are tensors");
    }
  } catch (const tessel::Error&) {
    // The documented rejection.
  }
  return 0;
}
