#include "core/device/precision.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>

#include "core/error.h"

namespace tessel::core {

std::string to_string(Precision p) {
  switch (p) {
    case Precision::kFloat32:
      return "float32";
    case Precision::kTf32:
      return "tf32";
    case Precision::kBf16:
      return "bf16";
  }
  return "?";
}

Precision parse_precision(const std::string& name) {
  if (name == "float32") return Precision::kFloat32;
  if (name == "tf32") return Precision::kTf32;
  if (name == "bf16" || name == "bfloat16") return Precision::kBf16;
  throw Error("unknown precision '" + name + "': use float32, tf32 or bf16");
}

std::string slow_precision_reason(c10::Device device, Precision precision) {
  if (precision != Precision::kBf16 || !device.is_cpu()) return {};
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bf16")) return {};
#if !defined(__clang__)  // clang 14 (Debian 12's: the fuzz build) does not know this feature name;
                         // every CPU with AMX-BF16 so far also has AVX512-BF16
  if (__builtin_cpu_supports("amx-bf16")) return {};
#endif
  return "this CPU has no bfloat16 instructions (AVX512-BF16 or AMX), so LibTorch emulates bf16 "
         "50-90 times slower than float32 (vgg-mini, LibTorch and PyTorch alike); use float32 here";
#else
  return {};
#endif
}

PrecisionScope::PrecisionScope(c10::Device device, Precision precision)
    : type_(device.type()), precision_(precision) {
  auto& context = at::globalContext();
  if (type_ == c10::kCUDA) {
    // LibTorch's default runs float32 convolutions on TF32 (PyTorch's
    // torch.backends.cudnn.allow_tf32): float32 here means float32.
    // The switches LibTorch 2.11 answers consistently (its per-op fp32_precision settings,
    // mixed with these, make at::Context::allowTF32CuDNN() throw).
    cudnn_tf32_was_ = context.allowTF32CuDNN();
    cublas_tf32_was_ = context.allowTF32CuBLAS();
    context.setAllowTF32CuDNN(precision == Precision::kTf32);
    context.setAllowTF32CuBLAS(precision == Precision::kTf32);
  }
  if (precision == Precision::kBf16) {
    if (!at::autocast::is_autocast_available(type_)) {
      throw Error("bf16 needs autocast, which LibTorch has not for " + c10::DeviceTypeName(type_));
    }
    autocast_was_enabled_ = at::autocast::is_autocast_enabled(type_);
    autocast_dtype_was_ = at::autocast::get_autocast_dtype(type_);
    at::autocast::set_autocast_enabled(type_, true);
    at::autocast::set_autocast_dtype(type_, at::kBFloat16);
    at::autocast::increment_nesting();
  }
}

PrecisionScope::~PrecisionScope() {
  if (precision_ == Precision::kBf16) {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(type_, autocast_was_enabled_);
    at::autocast::set_autocast_dtype(type_, autocast_dtype_was_);
  }
  if (type_ == c10::kCUDA) {
    auto& context = at::globalContext();
    context.setAllowTF32CuDNN(cudnn_tf32_was_);
    context.setAllowTF32CuBLAS(cublas_tf32_was_);
  }
}

}  // namespace tessel::core
