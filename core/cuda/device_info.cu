// Compiled by nvcc only with -DTESSEL_CUDA=ON (see core/CMakeLists.txt).
#include <cuda_runtime.h>

#include "core/device.h"

namespace tessel::core {

CudaRuntimeInfo cuda_runtime_info() {
  CudaRuntimeInfo info;
  info.compiled = true;
  cudaError_t status = cudaGetDeviceCount(&info.device_count);
  if (status != cudaSuccess) {
    info.device_count = 0;
    info.error = cudaGetErrorString(status);
    return info;
  }
  if (info.device_count > 0) {
    size_t free_bytes = 0, total_bytes = 0;
    status = cudaMemGetInfo(&free_bytes, &total_bytes);
    if (status == cudaSuccess) {
      info.free_bytes = static_cast<int64_t>(free_bytes);
      info.total_bytes = static_cast<int64_t>(total_bytes);
    } else {
      info.error = cudaGetErrorString(status);
    }
  }
  return info;
}

}  // namespace tessel::core
