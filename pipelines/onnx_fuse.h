// The patterns ONNX exporters write for one op, fused back into that op before import
// (pipelines/onnx_import.h): GELU as Div, Erf, Add, Mul, Mul (opset 18 has no Gelu), SiLU as
// Sigmoid and Mul, hard swish as HardSigmoid and Mul, group norm as Reshape,
// InstanceNormalization, Reshape, Mul, Add, and squeeze-and-excitation as a global average pool,
// two 1×1 Convs with an activation between, a gate and a Mul. A fused node ("Gelu", "Silu",
// "HardSwish", "GroupNorm", "SqueezeExcite") computes the same function as one op, holding one
// activation instead of several; the last two are barriers (core/exec/barrier.h).
#pragma once

#include <string>
#include <vector>

#include "io/onnx_model.h"

namespace tessel::pipelines {

// The model's nodes with each pattern whose intermediates nothing else reads replaced by its
// fused node (at the pattern's last node's place); a note per kind fused goes to `notes`.
std::vector<io::OnnxNode> fuse_onnx_patterns(const io::OnnxModel& model,
                                             std::vector<std::string>& notes);

}  // namespace tessel::pipelines
