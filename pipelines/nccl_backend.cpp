#include "pipelines/nccl_backend.h"

#ifdef TESSEL_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "core/error.h"

namespace tessel::pipelines {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout) {
#ifdef TESSEL_NCCL
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
#else
  (void)store, (void)rank, (void)size, (void)timeout;
  throw Error(
      "--dist-backend nccl: this build of Tessel has no NCCL (its LibTorch was built without "
      "CUDA); use --dist-backend gloo");
#endif
}

}  // namespace tessel::pipelines
