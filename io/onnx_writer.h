// A network as an ONNX file (issue 19, `tessel export`): core's graph and its weights as an ONNX
// ModelProto that onnxruntime and other tools run, the reverse of io/onnx_model.h with
// pipelines/onnx_import.h. IR 8, opset 17 (ai.onnx only); one input "image" of the weights'
// dtype, N×C×H×W with "batch", "height" and "width" left open; one output "output" (N×K logits
// after a head, else the last feature map); the weights as initializers named as the graph's
// module names them ("conv1.weight", "bn1.running_var"). Every op is written exactly as
// core::forward_plain computes it, in the file's own ops where ONNX has them and as a few
// elementary ops where it does not (GELU, SiLU, layer scale); an op with no exact form is
// refused, never approximated.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "core/graph/graph.h"

namespace tessel::io {

// What write_onnx writes: ONNX IR version 8, the ai.onnx opset 17.
constexpr int64_t kExportIrVersion = 8, kExportOpset = 17;

// Writes `graph` (parameters float32 or float64, on any device) to `file` through
// "<file>.partial" and a rename, so a failure never leaves a half-written file. `producer` goes
// into producer_name and producer_version, split at its first space ("tessel 0.1.0");
// `metadata` into the model's metadata_props (what a user of the file needs to feed it: classes,
// input normalisation, resolution). Throws tessel::Error naming the file and, for an op with no
// exact ONNX form, the layer and why.
void write_onnx(const core::Graph& graph, const std::filesystem::path& file,
                const std::string& producer,
                const std::map<std::string, std::string>& metadata = {});

}  // namespace tessel::io
