#include "core/device/runtime.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "core/device/device.h"
#include "core/device/memory.h"
#include "core/error.h"

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
  const int64_t fresh = MemoryTracker::fresh_bytes();
  at::Tensor a = block(8 * kMiB);
  auto* const first = static_cast<char*>(a.data_ptr());
  EXPECT_EQ(MemoryTracker::fresh_bytes() - fresh, 8 * kMiB);
  a.reset();
  EXPECT_EQ(MemoryTracker::cached_bytes(), 8 * kMiB);
  EXPECT_EQ(MemoryTracker::live_bytes(), base);
  // The same size gets the freed block back; a smaller one its front, the size rounded up to
  // the page counting as live, the rest still cached.
  a = block(8 * kMiB);
  EXPECT_EQ(a.data_ptr(), first);
  EXPECT_EQ(MemoryTracker::cached_bytes(), 0);
  a.reset();
  a = block(5 * kMiB + 100);
  EXPECT_EQ(a.data_ptr(), first);
  EXPECT_EQ(MemoryTracker::live_bytes(), base + 5 * kMiB + 4096);
  EXPECT_EQ(MemoryTracker::cached_bytes(), 3 * kMiB - 4096);
  a.reset();
  // Split in two halves, and merged again when both are freed: an 8 MiB request finds it whole.
  at::Tensor low = block(4 * kMiB), high = block(4 * kMiB);
  EXPECT_EQ(low.data_ptr(), first);
  EXPECT_EQ(high.data_ptr(), first + 4 * kMiB);
  high.reset();
  low.reset();
  a = block(8 * kMiB);
  EXPECT_EQ(a.data_ptr(), first);
  EXPECT_EQ(MemoryTracker::fresh_bytes() - fresh, 8 * kMiB);  // all served: nothing fresh
  a.reset();
  // A larger block extends the cached one into the untouched space beside it: only the
  // extension is fresh. (The cap, live + cached within the most ever live, is checked in
  // PiecesOfManySizesKeepTheirContents.)
  at::Tensor large = block(12 * kMiB);
  EXPECT_EQ(large.data_ptr(), first);
  EXPECT_EQ(MemoryTracker::fresh_bytes() - fresh, 12 * kMiB);
  EXPECT_EQ(MemoryTracker::live_bytes(), base + 12 * kMiB);
  EXPECT_EQ(MemoryTracker::cached_bytes(), 0);
  large.reset();
  EXPECT_EQ(MemoryTracker::cached_bytes(), 12 * kMiB);
  // Blocks under 1 MiB are the system allocator's.
  at::Tensor tiny = block(512 * 1024);
  EXPECT_EQ(MemoryTracker::live_bytes(), base + 512 * 1024);
  tiny.reset();
  EXPECT_EQ(MemoryTracker::cached_bytes(), 12 * kMiB);
  MemoryTracker::release_cache();
  EXPECT_EQ(MemoryTracker::cached_bytes(), 0);
  EXPECT_EQ(MemoryTracker::live_bytes(), base);
}

// Work beside the step (the next slide opened on its thread) is not the step's: its tensors are
// not counted, on that thread only, even when another thread frees them; counting resumes after.
TEST(Memory, AnUncountedThreadsTensorsAreNotCountedNorCached) {
  MemoryTracker::install();
  constexpr int64_t kMiB = int64_t{1} << 20;
  const int64_t base = MemoryTracker::live_bytes();
  at::Tensor theirs, mine;
  std::thread beside([&] {
    const MemoryTracker::Uncounted uncounted;
    theirs = at::ones({6 * kMiB}, at::kByte);
    { const MemoryTracker::Uncounted nested; }
    theirs.add_(1);  // still uncounted after a nested scope ends
  });
  mine = at::empty({2 * kMiB}, at::kByte);
  beside.join();
  EXPECT_EQ(MemoryTracker::live_bytes(), base + 2 * kMiB);
  EXPECT_EQ(theirs.sum().item<int64_t>(), 2 * 6 * kMiB);
  const int64_t cached = MemoryTracker::cached_bytes();
  theirs.reset();  // freed here, to the system
  EXPECT_EQ(MemoryTracker::live_bytes(), base + 2 * kMiB);
  EXPECT_EQ(MemoryTracker::cached_bytes(), cached);
  std::thread after([&] { theirs = at::empty({3 * kMiB}, at::kByte); });
  after.join();
  EXPECT_EQ(MemoryTracker::live_bytes(), base + 5 * kMiB);
}

// Pieces never overlap: blocks of many sizes, allocated and freed in a shuffled order, each
// filled with its own value, keep it; and the process never holds more than was ever live.
TEST(Memory, PiecesOfManySizesKeepTheirContents) {
  MemoryTracker::install();
  MemoryTracker::release_cache();
  MemoryTracker::reset_peak();  // both from now: the most ever live is the peak
  std::mt19937 rng(35);
  std::vector<std::pair<at::Tensor, int64_t>> live;
  for (int round = 0; round < 400; ++round) {
    if (!live.empty() && rng() % 3 == 0) {
      const size_t k = rng() % live.size();
      const auto& [t, value] = live[k];
      EXPECT_TRUE(t.eq(value).all().item<bool>()) << "round " << round;
      live.erase(live.begin() + static_cast<ptrdiff_t>(k));
      continue;
    }
    const int64_t elements = (int64_t{1} << 18) + static_cast<int64_t>(rng() % (3u << 20));
    const auto value = static_cast<int64_t>(round);
    live.emplace_back(at::full({elements}, static_cast<double>(value), at::kInt), value);
    EXPECT_LE(MemoryTracker::live_bytes() + MemoryTracker::cached_bytes(),
              MemoryTracker::peak_bytes());
  }
  for (const auto& [t, value] : live) EXPECT_TRUE(t.eq(value).all().item<bool>());
  live.clear();
  EXPECT_LE(MemoryTracker::live_bytes() + MemoryTracker::cached_bytes(),
            MemoryTracker::peak_bytes());
  MemoryTracker::release_cache();
}

TEST(Runtime, ReportsTheLibTorchItWasBuiltWith) {
  EXPECT_EQ(torch_version().rfind("2.", 0), 0u) << torch_version();
  EXPECT_EQ(device_report().torch_version, torch_version());
}

TEST(Devices, ReportIsConsistent) {
  const DeviceReport r = device_report();
  // Either GPUs LibTorch can use, or a reason in words why there are none.
  EXPECT_NE(r.gpus.empty(), r.problem.empty()) << r.problem;
  EXPECT_EQ(cuda_available(), !r.gpus.empty()) << r.problem;
  if (r.torch_cuda) {
    EXPECT_GE(r.cuda_built, 11000);
  }
  for (const GpuInfo& g : r.gpus) {
    EXPECT_FALSE(g.name.empty());
    EXPECT_GT(g.total_bytes, 0);
  }
}

TEST(Devices, VersionsPrintAsTheirVendorsWriteThem) {
  EXPECT_EQ(cuda_version_string(13000), "13.0");
  EXPECT_EQ(cuda_version_string(12080), "12.8");
  EXPECT_EQ(cudnn_version_string(91900), "9.19.0");
  EXPECT_EQ(cudnn_version_string(8907), "8.9.7");
}

TEST(Devices, NamesResolveOrSayWhatIsWrong) {
  EXPECT_EQ(resolve_device("cpu"), c10::Device(c10::kCPU));
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1234", "CPU"}) {
    EXPECT_THROW(resolve_device(bad), Error) << bad;
  }
  const DeviceReport r = device_report();
  if (r.gpus.empty()) {
    EXPECT_EQ(resolve_device("auto"), c10::Device(c10::kCPU));
    try {
      resolve_device("cuda");
      FAIL() << "cuda resolved on a machine without a usable GPU";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(r.problem), std::string::npos) << e.what();
    }
  } else {
    EXPECT_EQ(resolve_device("auto"), c10::Device(c10::kCUDA, 0));
    EXPECT_EQ(resolve_device("cuda"), c10::Device(c10::kCUDA, 0));
    EXPECT_THROW(resolve_device("cuda:" + std::to_string(r.gpus.size())), Error);
  }
}

}  // namespace
}  // namespace tessel::core
