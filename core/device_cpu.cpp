// CPU-only builds: there is no CUDA runtime to ask.
#include "core/device.h"

namespace tessel::core {

CudaRuntimeInfo cuda_runtime_info() {
  CudaRuntimeInfo info;
  info.error = "built without CUDA; configure with -DTESSEL_CUDA=ON";
  return info;
}

}  // namespace tessel::core
