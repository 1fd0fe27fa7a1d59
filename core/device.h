// What the CUDA runtime reports, when Tessel was built with -DTESSEL_CUDA=ON. Device-specific
// code lives in core/cuda/ and is compiled by nvcc only in such builds; everything else in the
// engine is device-agnostic (tensors carry their device).
#pragma once

#include <cstdint>
#include <string>

namespace tessel::core {

struct CudaRuntimeInfo {
  bool compiled = false;    // built with TESSEL_CUDA
  int device_count = 0;     // devices the CUDA runtime sees
  int64_t free_bytes = 0;   // on device 0
  int64_t total_bytes = 0;  // on device 0
  std::string error;        // why no device is usable, when none is
};

CudaRuntimeInfo cuda_runtime_info();

}  // namespace tessel::core
