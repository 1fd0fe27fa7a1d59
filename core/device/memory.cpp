#include "core/device/memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <unordered_map>
#include <utility>

namespace tessel::core {

namespace {

// Blocks of at least this size come from the arena below and go back to it when freed; smaller
// ones are the system allocator's (which reuses its own).
constexpr int64_t kCacheMin = int64_t{1} << 20;

// The arena: one reserved range of address space, carved into pieces at page granularity, best
// fit, split as asked and merged again as freed (as LibTorch's CUDA caching allocator splits its
// segments). A fresh page faults and is zeroed by the kernel at its first touch, so the pages of
// a freed piece are kept for reuse, and a piece serves a request of any smaller size: a cache of
// whole blocks (session 14's, serving sizes within 1/16) missed on most requests, because a
// step's tiles come in many sizes; at 4096² a resnet50 batch-norm step took 59 GB of fresh
// pages, its kernel zeroing them 9% of its CPU time (bench/NOTES.md, session 35).
// Kept pages never make the process hold more than it held at its highest: live + cached <=
// g_high, the most bytes ever live; beyond it, cached pieces (smallest first) give their pages
// back (MADV_DONTNEED) and fault afresh when reused. Where the reservation fails (strict
// overcommit), and under AddressSanitizer, every block is the system's and nothing is cached.
constexpr int64_t kPage = 4096;
constexpr int64_t kHugePage = int64_t{2} << 20;
constexpr int64_t kReserveBytes = int64_t{1} << 40;  // address space only, 1 TiB

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
std::atomic<bool> g_installed{false};

// Everything below under g_mutex.
std::mutex g_mutex;
char* g_arena = nullptr;  // 2 MiB-aligned, kReserveBytes long; nullptr where it failed
int64_t g_cached = 0;     // bytes of cached pieces (freed, pages kept)
int64_t g_high = 0;       // the most bytes ever live
int64_t g_fresh = 0;      // bytes of large blocks on pages never touched (fresh_bytes)

enum class State : uint8_t { kLive, kCached, kUnbacked };
struct Piece {
  int64_t bytes;
  State state;
};
// By offset in the arena: every byte of it is in exactly one piece.
std::map<int64_t, Piece>& pieces() {
  static auto* map = new std::map<int64_t, Piece>();  // never destroyed: used at exit
  return *map;
}
// The free pieces of each state, by (size, offset): best fit is a lower_bound.
std::set<std::pair<int64_t, int64_t>>& free_pieces(State state) {
  static auto* cached = new std::set<std::pair<int64_t, int64_t>>();
  static auto* unbacked = new std::set<std::pair<int64_t, int64_t>>();
  return state == State::kCached ? *cached : *unbacked;
}
// Sizes of live blocks from the system (small ones, or all where the arena failed): the deleter
// only receives the pointer.
std::unordered_map<void*, int64_t>& system_blocks() {
  static auto* map = new std::unordered_map<void*, int64_t>();
  return *map;
}

void reserve_arena() {
#if !defined(__SANITIZE_ADDRESS__)  // AddressSanitizer checks the system's blocks, not ours
  const size_t length = static_cast<size_t>(kReserveBytes + kHugePage);
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return;
  const auto raw = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (raw + kHugePage - 1) / kHugePage * kHugePage;
  g_arena = reinterpret_cast<char*>(aligned);
  // A first touch faults once per 2 MiB where the kernel has transparent huge pages on madvise
  // (measured with session 14's cache, vgg-mini 2048² grid 1 GiB: 3.45 → 2.6 s a step).
  ::madvise(g_arena, static_cast<size_t>(kReserveBytes), MADV_HUGEPAGE);  // a hint
  pieces().emplace(0, Piece{kReserveBytes, State::kUnbacked});
  free_pieces(State::kUnbacked).emplace(kReserveBytes, 0);
#endif
}

void unlist(std::map<int64_t, Piece>::iterator it) {
  if (it->second.state != State::kLive) {
    free_pieces(it->second.state).erase({it->second.bytes, it->first});
  }
}
void list(std::map<int64_t, Piece>::iterator it) {
  if (it->second.state != State::kLive) {
    free_pieces(it->second.state).emplace(it->second.bytes, it->first);
  }
}

// Merges free piece `it` with its neighbours in the same state (pages kept and pages given back
// never merge: the cached count must stay exact).
void merge(std::map<int64_t, Piece>::iterator it) {
  auto& all = pieces();
  unlist(it);
  for (auto next = std::next(it); next != all.end() && next->second.state == it->second.state;
       next = std::next(it)) {
    unlist(next);
    it->second.bytes += next->second.bytes;
    all.erase(next);
  }
  while (it != all.begin()) {
    auto prev = std::prev(it);
    if (prev->second.state != it->second.state) break;
    unlist(prev);
    prev->second.bytes += it->second.bytes;
    all.erase(it);
    it = prev;
  }
  list(it);
}

// A piece of `bytes` (a multiple of kPage) from the best-fitting free piece in `state`, split;
// -1 when none is large enough.
int64_t carve(State state, int64_t bytes) {
  auto& set = free_pieces(state);
  const auto fit = set.lower_bound({bytes, 0});
  if (fit == set.end()) return -1;
  const int64_t offset = fit->second;
  auto it = pieces().find(offset);
  unlist(it);
  if (it->second.bytes > bytes) {
    auto rest = pieces().emplace_hint(std::next(it), offset + bytes,
                                      Piece{it->second.bytes - bytes, state});
    list(rest);
  }
  it->second = Piece{bytes, State::kLive};
  return offset;
}

// When no cached piece is large enough: the largest one that an unbacked neighbour extends to
// `bytes`, carved across both (its pages reused, only the neighbour's part fresh); -1 when no
// cached piece borders enough unbacked space. Sets `reused` to the cached bytes taken. Without
// it, vgg-mini 8192² grid took 12.8 of its 14.9 GB of fresh pages a step while the cache held
// more than the request in pieces too small for it (bench/NOTES.md, session 35).
int64_t carve_extending(int64_t bytes, int64_t& reused) {
  auto& all = pieces();
  const auto& cached = free_pieces(State::kCached);
  for (auto c = cached.rbegin(); c != cached.rend(); ++c) {
    const auto [size, offset] = *c;
    auto it = all.find(offset);
    const auto next = std::next(it);
    if (next != all.end() && next->second.state == State::kUnbacked &&
        size + next->second.bytes >= bytes) {
      // [cached | unbacked…]: the piece starts at the cached one's offset.
      const int64_t rest = size + next->second.bytes - bytes;
      unlist(it);
      unlist(next);
      all.erase(next);
      it->second = Piece{bytes, State::kLive};
      if (rest > 0)
        list(all.emplace_hint(std::next(it), offset + bytes, Piece{rest, State::kUnbacked}));
      reused = size;
      return offset;
    }
    if (it != all.begin()) {
      const auto prev = std::prev(it);
      if (prev->second.state == State::kUnbacked && prev->second.bytes + size >= bytes) {
        // […unbacked | cached]: the piece ends where the cached one ends.
        const int64_t start = offset + size - bytes;
        unlist(prev);
        unlist(it);
        all.erase(it);
        prev->second.bytes = start - prev->first;
        if (prev->second.bytes > 0) {
          list(prev);
        } else {
          all.erase(prev);
        }
        all.emplace(start, Piece{bytes, State::kLive});
        reused = size;
        return start;
      }
    }
  }
  return -1;
}

// Gives back the pages of cached pieces, smallest first (the larger serve more requests), until
// live + cached <= limit.
void trim(int64_t live, int64_t limit) {
  auto& cached = free_pieces(State::kCached);
  while (!cached.empty() && live + g_cached > limit) {
    const auto [bytes, offset] = *cached.begin();
    ::madvise(g_arena + offset, static_cast<size_t>(bytes), MADV_DONTNEED);
    auto it = pieces().find(offset);
    unlist(it);
    it->second.state = State::kUnbacked;
    list(it);
    g_cached -= bytes;
    merge(it);
  }
}

void note_peak(int64_t live) {
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

// Under g_mutex. Returns the live bytes after.
int64_t note_live(int64_t bytes) {
  const int64_t live = g_live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  note_peak(live);
  g_high = std::max(g_high, live);
  return live;
}

bool in_arena(const void* ptr) {
  return g_arena != nullptr && ptr >= g_arena && ptr < g_arena + kReserveBytes;
}

void tracked_free(void* ptr) {
  if (ptr == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (in_arena(ptr)) {
      auto it = pieces().find(static_cast<char*>(ptr) - g_arena);
      if (it == pieces().end() || it->second.state != State::kLive) std::abort();  // not ours
      const int64_t bytes = it->second.bytes;
      g_live.fetch_sub(bytes, std::memory_order_relaxed);
      // live + cached is unchanged: the bound still holds.
      it->second.state = State::kCached;
      g_cached += bytes;
      merge(it);
      return;
    }
    auto it = system_blocks().find(ptr);
    if (it != system_blocks().end()) {  // else allocated before the tracker was installed
      g_live.fetch_sub(it->second, std::memory_order_relaxed);
      system_blocks().erase(it);
    }
  }
  c10::free_cpu(ptr);
}

thread_local bool t_uncounted = false;  // MemoryTracker::Uncounted

void uncounted_free(void* ptr) { c10::free_cpu(ptr); }

class TrackingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const auto n = static_cast<int64_t>(nbytes);
    if (t_uncounted) {
      void* p = n > 0 ? c10::alloc_cpu(nbytes) : nullptr;
      return {p, p, &uncounted_free, c10::Device(c10::DeviceType::CPU)};
    }
    void* ptr = nullptr;
    if (n >= kCacheMin) {
      std::lock_guard<std::mutex> lock(g_mutex);
      if (g_arena != nullptr) {
        const int64_t bytes = (n + kPage - 1) / kPage * kPage;
        int64_t offset = carve(State::kCached, bytes);
        if (offset >= 0) {
          g_cached -= bytes;
          note_live(bytes);
        } else {
          int64_t reused = 0;
          offset = carve_extending(bytes, reused);
          if (offset < 0) offset = carve(State::kUnbacked, bytes);
          if (offset < 0) throw std::bad_alloc();  // a terabyte live
          g_cached -= reused;
          g_fresh += bytes - reused;
          // A piece beyond what the cache could serve: the cache gives back what would make the
          // process hold more than its highest.
          trim(note_live(bytes), g_high);
        }
        ptr = g_arena + offset;
      }
    }
    if (ptr == nullptr && n > 0) {
      ptr = c10::alloc_cpu(nbytes);
      std::lock_guard<std::mutex> lock(g_mutex);
      system_blocks()[ptr] = n;
      if (n >= kCacheMin) g_fresh += n;
      note_live(n);
    }
    // oneDNN requires the context to equal the data pointer.
    return {ptr, ptr, &tracked_free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &tracked_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

}  // namespace

void MemoryTracker::install() {
  static std::once_flag once;
  std::call_once(once, [] {
    static TrackingAllocator allocator;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      reserve_arena();
    }
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
  std::lock_guard<std::mutex> lock(g_mutex);
  trim(0, 0);
  g_high = g_live.load(std::memory_order_relaxed);
}

int64_t MemoryTracker::fresh_bytes() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_fresh;
}

MemoryTracker::Uncounted::Uncounted() : before_(t_uncounted) { t_uncounted = true; }
MemoryTracker::Uncounted::~Uncounted() { t_uncounted = before_; }

}  // namespace tessel::core
