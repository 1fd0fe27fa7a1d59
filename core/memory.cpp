#include "core/memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace tessel::core {

namespace {

// Freed blocks of at least this size are kept for reuse. A block fresh from the system is
// mapped anew (glibc maps blocks over 32 MiB, and smaller ones once the heap is trimmed) and
// each of its pages faults and is zeroed by the kernel at the first touch; tiles allocate the
// same sizes over and over. Measured (bench/NOTES.md, session 14): vgg-mini 2048² grid, 1 GiB,
// a step spent more time in the kernel than computing.
constexpr int64_t kCacheMin = int64_t{1} << 20;
// A cached block serves a request up to this fraction smaller than itself (1/16: border tiles
// differ a little from the others); the block's whole size counts as live.
constexpr int64_t kSlackShift = 4;

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
std::atomic<bool> g_installed{false};

// Everything below under g_mutex.
std::mutex g_mutex;
// Sizes of live blocks: the deleter only receives the pointer.
std::unordered_map<void*, int64_t>& sizes() {
  static auto* map = new std::unordered_map<void*, int64_t>();  // never destroyed: used at exit
  return *map;
}
// Freed blocks kept for reuse, by size. The cache never makes the process hold more than it
// held at its highest: live + cached <= g_high, the most bytes ever live.
std::multimap<int64_t, void*>& cache() {
  static auto* map = new std::multimap<int64_t, void*>();
  return *map;
}
int64_t g_cached = 0;
int64_t g_high = 0;
int64_t g_fresh = 0;  // bytes of large blocks from the system (MemoryTracker::fresh_bytes)

void note_peak(int64_t live) {
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

// Frees cached blocks, largest first, until live + cached <= limit. Returns what to free_cpu
// (outside the lock).
std::vector<void*> trim_locked(int64_t live, int64_t limit) {
  std::vector<void*> out;
  auto& c = cache();
  while (!c.empty() && live + g_cached > limit) {
    auto last = std::prev(c.end());
    g_cached -= last->first;
    out.push_back(last->second);
    c.erase(last);
  }
  return out;
}

void tracked_free(void* ptr) {
  if (ptr == nullptr) return;
  bool keep = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = sizes().find(ptr);
    if (it == sizes().end()) {
      // Allocated before the tracker was installed.
    } else {
      const int64_t bytes = it->second;
      sizes().erase(it);
      const int64_t live = g_live.fetch_sub(bytes, std::memory_order_relaxed) - bytes;
      if (bytes >= kCacheMin && live + g_cached + bytes <= g_high) {
        cache().emplace(bytes, ptr);
        g_cached += bytes;
        keep = true;
      }
    }
  }
  if (!keep) c10::free_cpu(ptr);
}

// A large block aligned to the 2 MiB huge page and marked for transparent huge pages (where the
// kernel has them on madvise, the usual default): its first touch faults once per 2 MiB instead
// of once per 4 KiB. Measured with the cache above, vgg-mini 2048² grid 1 GiB: 3.45 → 2.6 s a
// step, the kernel's time 6.5 → 2.9 s (bench/NOTES.md).
constexpr int64_t kHugePage = int64_t{2} << 20;
void* alloc_huge(size_t nbytes) {
  void* p = nullptr;
  if (::posix_memalign(&p, kHugePage, nbytes) != 0 || p == nullptr) return c10::alloc_cpu(nbytes);
  ::madvise(p, nbytes & ~(static_cast<size_t>(kHugePage) - 1), MADV_HUGEPAGE);  // a hint
  return p;
}

class TrackingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const auto n = static_cast<int64_t>(nbytes);
    void* ptr = nullptr;
    int64_t bytes = n;
    if (n >= kCacheMin) {
      std::lock_guard<std::mutex> lock(g_mutex);
      auto& c = cache();
      auto it = c.lower_bound(n);
      if (it != c.end() && it->first - n <= (n >> kSlackShift)) {
        ptr = it->second;
        bytes = it->first;
        g_cached -= bytes;
        c.erase(it);
        sizes()[ptr] = bytes;
        note_live(bytes);
      }
    }
    if (ptr == nullptr && n > 0) {
      ptr = n >= kHugePage ? alloc_huge(nbytes) : c10::alloc_cpu(nbytes);
      std::vector<void*> freed;
      {
        std::lock_guard<std::mutex> lock(g_mutex);
        sizes()[ptr] = bytes;
        if (n >= kCacheMin) g_fresh += n;
        const int64_t live = note_live(bytes);
        // A new block beyond what the cache could serve: the cache gives back what would make
        // the process hold more than its highest.
        freed = trim_locked(live, g_high);
      }
      for (void* p : freed) c10::free_cpu(p);
    }
    // oneDNN requires the context to equal the data pointer.
    return {ptr, ptr, &tracked_free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &tracked_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  // Under g_mutex. Returns the live bytes after.
  static int64_t note_live(int64_t bytes) {
    const int64_t live = g_live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    note_peak(live);
    g_high = std::max(g_high, live);
    return live;
  }
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

int64_t MemoryTracker::cached_bytes() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_cached;
}

void MemoryTracker::release_cache() {
  std::vector<void*> freed;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    freed = trim_locked(0, 0);
    g_high = g_live.load(std::memory_order_relaxed);
  }
  for (void* p : freed) c10::free_cpu(p);
}

int64_t MemoryTracker::fresh_bytes() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_fresh;
}

}  // namespace tessel::core
