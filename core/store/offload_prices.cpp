#include "core/store/offload_prices.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "core/device/device.h"
#include "core/error.h"
#include "core/store/tile_store.h"

namespace tessel::core {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Writes and reads of a block through the store: the I/O thread's busy time per byte each way
// (the caller's waits would also count the thread hand-offs). The block is 8 MiB, or a quarter of
// the scratch directory's free space (a 3 MiB scratch once failed here, in words that blamed the
// step's checkpoints); 0 when there is too little room to time anything.
double seconds_per_byte(Tier tier, const std::filesystem::path& scratch_dir, c10::Device device) {
  constexpr int64_t kGrain = int64_t{64} << 10;
  int64_t block_bytes = int64_t{8} << 20;
  const int64_t free = scratch_free_bytes(tier, scratch_dir);
  if (free >= 0) block_bytes = std::min(block_bytes, free / 4 / kGrain * kGrain);
  if (block_bytes < 4 * kGrain) return 0;
  TileStoreOptions o;
  o.scratch_dir = scratch_dir;
  o.window_bytes = block_bytes;
  o.bypass_page_cache = true;
  TileStore store(o);
  const at::Tensor block = at::rand({block_bytes / 4}, at::TensorOptions().device(device));
  constexpr int kRepeat = 2;
  for (int i = 0; i < kRepeat; ++i) {
    const TileStore::BlockId id = store.put(block, tier);
    store.flush();
    (void)store.get(id);
    store.erase(id);
  }
  synchronize(device);
  // Zero for the host tier of the CPU, which moves nothing.
  const TileStoreStats st = store.stats();
  return (st.write_ms + st.read_ms) / 1000 / (2.0 * kRepeat * static_cast<double>(block_bytes));
}

// A 3×3 conv of 32 channels on a 96² tile on the CPU (about 0.3 GFLOP), of 128 on a 512² tile
// on a GPU (39 GFLOP), the best of three after a warmup.
double seconds_per_flop(c10::Device device) {
  const int64_t kChannels = device.is_cpu() ? 32 : 128, kSize = device.is_cpu() ? 96 : 512;
  const auto options = at::TensorOptions().device(device);
  const at::Tensor x = at::rand({1, kChannels, kSize, kSize}, options);
  const at::Tensor w = at::rand({kChannels, kChannels, 3, 3}, options);
  const double flops = 2.0 * kChannels * 9 * kChannels * kSize * kSize;
  at::NoGradGuard no_grad;
  (void)at::conv2d(x, w, {}, 1, 1);
  synchronize(device);
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    (void)at::conv2d(x, w, {}, 1, 1);
    synchronize(device);
    const double s = seconds_since(t0);
    best = i == 0 ? s : std::min(best, s);
  }
  return best / flops;
}

}  // namespace

int64_t scratch_free_bytes(Tier tier, const std::filesystem::path& scratch_dir) {
  if (tier != Tier::kDisk) return -1;
  std::error_code ec;
  const std::filesystem::path where =
      scratch_dir.empty() ? std::filesystem::temp_directory_path(ec) : scratch_dir;
  if (ec) return -1;
  const std::filesystem::space_info space = std::filesystem::space(where, ec);
  return ec ? -1 : static_cast<int64_t>(space.available);
}

OffloadPrices measure_offload_prices(Tier tier, const std::filesystem::path& scratch_dir,
                                     c10::Device device) {
  static std::mutex mutex;
  static std::map<std::tuple<Tier, std::filesystem::path, std::string>, OffloadPrices> measured;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(tier, scratch_dir, device.str());
  if (auto it = measured.find(key); it != measured.end()) {
    OffloadPrices p = it->second;
    p.disk_free_bytes = scratch_free_bytes(tier, scratch_dir);
    return p;
  }
  const auto t0 = Clock::now();
  OffloadPrices p;
  try {
    p.seconds_per_byte_moved = seconds_per_byte(tier, scratch_dir, device);
  } catch (const Error& e) {
    // A scratch directory that cannot hold the probe: the plan itself says whether the step's
    // checkpoints fit there (check_free_space), in words about the step.
    spdlog::warn("could not time the scratch directory: {}", e.what());
  }
  p.seconds_per_flop = seconds_per_flop(device);
  // Unmeasured (zero) prices leave the planner's guessed ratio in charge.
  p.measured = p.seconds_per_byte_moved > 0 || tier != Tier::kDisk;
  p.disk_free_bytes = scratch_free_bytes(tier, scratch_dir);
  spdlog::debug(
      "offload prices ({}, {}): {:.3g} ns per byte moved, {:.3g} GFLOP/s, measured in {:.2f} s",
      to_string(tier), device.str(), p.seconds_per_byte_moved * 1e9, 1e-9 / p.seconds_per_flop,
      seconds_since(t0));
  measured[key] = p;
  return p;
}

}  // namespace tessel::core
