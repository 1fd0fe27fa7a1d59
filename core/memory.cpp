#include "core/memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace tessel::core {

namespace {

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
std::atomic<bool> g_installed{false};

// Sizes of live blocks: the deleter only receives the pointer.
std::mutex g_mutex;
std::unordered_map<void*, int64_t>& sizes() {
  static auto* map = new std::unordered_map<void*, int64_t>();  // never destroyed: used at exit
  return *map;
}

void note_peak(int64_t live) {
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

void tracked_free(void* ptr) {
  if (ptr == nullptr) return;
  int64_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = sizes().find(ptr);
    if (it != sizes().end()) {
      bytes = it->second;
      sizes().erase(it);
    }
  }
  g_live.fetch_sub(bytes, std::memory_order_relaxed);
  c10::free_cpu(ptr);
}

class TrackingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) const override {
    void* ptr = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (ptr != nullptr) {
      {
        std::lock_guard<std::mutex> lock(g_mutex);
        sizes()[ptr] = static_cast<int64_t>(nbytes);
      }
      note_peak(g_live.fetch_add(static_cast<int64_t>(nbytes), std::memory_order_relaxed) +
                static_cast<int64_t>(nbytes));
    }
    // oneDNN requires the context to equal the data pointer.
    return {ptr, ptr, &tracked_free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &tracked_free; }
};

}  // namespace

void MemoryTracker::install() {
  static std::once_flag once;
  std::call_once(once, [] {
    static TrackingAllocator allocator;
    c10::SetCPUAllocator(&allocator, /*priority=*/100);
    g_installed = true;
  });
}

bool MemoryTracker::installed() { return g_installed; }
int64_t MemoryTracker::live_bytes() { return g_live.load(std::memory_order_relaxed); }
int64_t MemoryTracker::peak_bytes() { return g_peak.load(std::memory_order_relaxed); }
void MemoryTracker::reset_peak() { g_peak.store(g_live.load()); }

}  // namespace tessel::core
