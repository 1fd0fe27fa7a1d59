#include "core/device/runtime.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>
#include <torch/version.h>

#include <algorithm>
#include <thread>

namespace tessel::core {

int hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

int configure_threads(int requested) {
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
