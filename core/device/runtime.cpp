#include "core/device/runtime.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace tessel::core {

int hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

int configure_threads(int requested) {
  // oneDNN keeps 1024 CPU kernels by shape; a glass step's boxes run convolutions at a few
  // thousand shapes, each kernel rebuilt when evicted (vgg-mini 2048², 30% tissue: 3.25 s a
  // step with 16384 against 3.6 s; the process's memory unchanged; bench/NOTES.md, session
  // 47). Read when oneDNN first runs; a value the user set stays.
  setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16384", /*overwrite=*/0);
  const int threads = requested > 0 ? requested : hardware_threads();
  if (at::get_num_threads() != threads) at::set_num_threads(threads);
  spdlog::debug("LibTorch intra-op threads: {} ({})", at::get_num_threads(),
                requested > 0 ? "as requested" : "all hardware threads");
  return at::get_num_threads();
}

int intra_op_threads() { return at::get_num_threads(); }

std::string torch_version() { return TORCH_VERSION; }

bool cuda_available() { return at::hasCUDA(); }

}  // namespace tessel::core
