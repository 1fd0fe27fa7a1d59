#include "core/runtime.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "core/device.h"
#include "core/memory.h"

namespace tessel::core {
namespace {

TEST(Runtime, ConfigureThreadsUsesEveryHardwareThreadByDefault) {
  EXPECT_EQ(configure_threads(0), hardware_threads());
  EXPECT_EQ(at::get_num_threads(), hardware_threads());
}

TEST(Runtime, ConfigureThreadsHonoursAnExplicitCount) {
  EXPECT_EQ(configure_threads(1), 1);
  EXPECT_EQ(intra_op_threads(), 1);
  configure_threads(0);
}

TEST(Memory, FreedBlocksAreReusedButNeverHeldBeyondTheMostEverLive) {
  MemoryTracker::install();
  MemoryTracker::release_cache();  // the most ever live starts from now
  constexpr int64_t kMiB = int64_t{1} << 20;
  auto block = [](int64_t bytes) { return at::empty({bytes}, at::kByte); };
  const int64_t base = MemoryTracker::live_bytes();
  at::Tensor a = block(8 * kMiB);
  void* first = a.data_ptr();
  a.reset();
  EXPECT_EQ(MemoryTracker::cached_bytes(), 8 * kMiB);
  EXPECT_EQ(MemoryTracker::live_bytes(), base);
  // The same size, and one a little smaller (up to 1/16), get the freed block back; its whole
  // size counts as live.
  a = block(8 * kMiB);
  EXPECT_EQ(a.data_ptr(), first);
  EXPECT_EQ(MemoryTracker::cached_bytes(), 0);
  a.reset();
  a = block(8 * kMiB - 256 * 1024);
  EXPECT_EQ(a.data_ptr(), first);
  EXPECT_EQ(MemoryTracker::live_bytes(), base + 8 * kMiB);
  a.reset();
  // Half the size is a new block: the cached one would make the process hold more than it ever
  // did (8 MiB), so it goes back.
  at::Tensor small = block(4 * kMiB);
  EXPECT_EQ(MemoryTracker::live_bytes(), base + 4 * kMiB);
  EXPECT_LE(MemoryTracker::live_bytes() + MemoryTracker::cached_bytes(), base + 8 * kMiB);
  // Blocks under 1 MiB are the system allocator's.
  small.reset();
  at::Tensor tiny = block(512 * 1024);
  tiny.reset();
  EXPECT_EQ(MemoryTracker::cached_bytes(), 4 * kMiB);
  MemoryTracker::release_cache();
  EXPECT_EQ(MemoryTracker::cached_bytes(), 0);
  EXPECT_EQ(MemoryTracker::live_bytes(), base);
}

TEST(Runtime, ReportsTheLibTorchItWasBuiltWith) {
  EXPECT_EQ(torch_version().rfind("1.", 0), 0u) << torch_version();
}

TEST(Runtime, CudaReportIsConsistentWithTheBuild) {
  const CudaRuntimeInfo info = cuda_runtime_info();
#ifdef TESSEL_WITH_CUDA
  EXPECT_TRUE(info.compiled);
#else
  EXPECT_FALSE(info.compiled);
  EXPECT_EQ(info.device_count, 0);
  EXPECT_FALSE(info.error.empty());
#endif
}

}  // namespace
}  // namespace tessel::core
