// How a step computes (`precision:` in a training config, `--precision` on the command line).
// float32 is exact: every operation in the parameters' dtype (float32, or float64 in checks), with
// the GPU's TF32 matrix units off, so tiled equals plain to float32's rounding. tf32: float32
// with TF32 convolutions and matrix products on GPUs that have them (no effect on the CPU).
// bf16: as torch.autocast(dtype=torch.bfloat16) on the step's device: convolutions and matrix
// products in bfloat16, reductions, the loss and the weights (and their gradients) in float32.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace tessel::core {

enum class Precision { kFloat32, kTf32, kBf16 };

std::string to_string(Precision p);
// "float32", "tf32" or "bf16"; throws tessel::Error naming the choices otherwise.
Precision parse_precision(const std::string& name);

// Why `precision` will be slow on `device`, or empty: bf16 on a CPU without bfloat16 instructions
// (AVX512-BF16 or AMX), which LibTorch emulates: vgg-mini steps 50-90 times slower than in
// float32 on the 2-core AVX2 machine, in PyTorch alike (bench/NOTES.md).
std::string slow_precision_reason(c10::Device device, Precision precision);

// Sets `precision` for the step's device while it lives (autocast's thread-local state and the
// process's TF32 switches), and puts back what was there. Steps nest: autocast's cache of cast
// weights is cleared when the outermost bf16 scope ends, as torch.autocast does.
class PrecisionScope {
 public:
  PrecisionScope(c10::Device device, Precision precision);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  c10::DeviceType type_;
  Precision precision_;
  bool autocast_was_enabled_ = false;
  at::ScalarType autocast_dtype_was_ = at::kFloat;
  bool cudnn_tf32_was_ = false, cublas_tf32_was_ = false;  // the GPU's TF32 switches before
};

}  // namespace tessel::core
