#include "core/store/tile_store.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"

namespace tessel::core {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string errno_text(int e) { return std::strerror(e); }

// FNV-1a over 64-bit words in eight independent lanes (word i feeds lane i mod 8), folded with
// the length at the end. One serial FNV chain waits for each multiply (~5.5 GB/s here); eight
// lanes run at memory speed (~15 GB/s, bench/NOTES.md). Each step is a bijection of its lane, so
// a change to any one word (a flipped byte) always changes the sum; a lost, stale or partial
// write changes it but with odds of 2^-64.
class Checksum {
 public:
  static constexpr int64_t kStride = 64;  // bytes per round of the eight lanes

  // In pieces: every piece but the last a multiple of kStride.
  void update(const void* data, int64_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    int64_t i = 0;
    for (; i + kStride <= bytes; i += kStride) {
      uint64_t w[kLanes];
      std::memcpy(w, p + i, kStride);
      for (int k = 0; k < kLanes; ++k) lane_[k] = (lane_[k] ^ w[k]) * kPrime;
    }
    for (int k = 0; i < bytes; i += 8, ++k) {
      uint64_t w = 0;
      std::memcpy(&w, p + i, static_cast<size_t>(std::min<int64_t>(8, bytes - i)));
      lane_[k] = (lane_[k] ^ w) * kPrime;
    }
    bytes_ += bytes;
  }

  uint64_t digest() const {
    uint64_t h = (kBasis ^ static_cast<uint64_t>(bytes_)) * kPrime;
    for (uint64_t l : lane_) h = (h ^ l) * kPrime;
    return h;
  }

 private:
  static constexpr int kLanes = 8;
  static constexpr uint64_t kBasis = 1469598103934665603ull, kPrime = 1099511628211ull;
  uint64_t lane_[kLanes] = {kBasis,     kBasis + 1, kBasis + 2, kBasis + 3,
                            kBasis + 4, kBasis + 5, kBasis + 6, kBasis + 7};
  int64_t bytes_ = 0;
};

uint64_t checksum(const void* data, int64_t bytes) {
  Checksum c;
  c.update(data, bytes);
  return c.digest();
}

// Direct I/O (the cold-disk case): offsets, lengths and buffers aligned to this, which covers
// 512- and 4096-byte devices.
constexpr int64_t kDirectAlign = 4096;
// A write that needs a copy goes in pieces this large (a 1 MiB O_DIRECT write here runs at 1.8
// GB/s, a 4 MiB one at 2.4), copied and checksummed 1 MiB at a time, while it is in cache.
constexpr int64_t kBounceBytes = int64_t{4} << 20, kCopyBytes = int64_t{1} << 20;
constexpr int64_t kSplitReadBytes = int64_t{1} << 20;  // direct reads this large go in two halves

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

constexpr const char* kPrefix = "tessel-offload-";
constexpr ptrdiff_t kSkipLimit = 256;  // how far ahead a read looks for itself in the schedule
constexpr const char* kSuffix = ".scratch";

std::atomic<int> g_file_counter{0};
// How often the I/O thread checks that an accelerator's copy to host memory has landed.
constexpr std::chrono::microseconds kPoll{50};

}  // namespace

class TileStore::Impl {
 public:
  struct Block {
    Tier tier = Tier::kResident;
    at::Tensor resident;  // in the compute device's memory, when it is there
    at::Tensor host;      // the host tier's copy (pinned on CUDA builds)
    // On an accelerator: the copy on the store's stream that made `resident` (or `host`); the
    // compute stream waits for it before using the block, the I/O thread before writing it.
    std::shared_ptr<c10::Event> copied;
    std::vector<int64_t> sizes;
    at::TensorOptions options;
    // The layout the block was put in (a channels-last tile's stays channels-last): its bytes
    // are dense either way, and a reader in the writer's layout copies without a transpose.
    at::MemoryFormat format = at::MemoryFormat::Contiguous;
    int64_t bytes = 0, offset = -1;
    uint64_t sum = 0;
    bool writing = false, loading = false;
    // Reserved: an id with no contents yet (reserve, or take); `bytes` is the expected size.
    // Taking: take() waits for it, and nothing may read it back or drop it meanwhile.
    bool reserved = false, taking = false;
  };
  struct Job {
    bool write;
    BlockId id;
  };

  explicit Impl(TileStoreOptions o) : options(std::move(o)) {
    if (options.scratch_dir.empty()) options.scratch_dir = fs::temp_directory_path();
    std::error_code ec;
    if (fs::is_directory(options.scratch_dir, ec)) remove_stale_scratch_files(options.scratch_dir);
    io = std::thread([this] { run(); });
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(m);
      stop = true;
    }
    cv.notify_all();
    io.join();
    if (fd >= 0) ::close(fd);
    if (direct_fd >= 0) ::close(direct_fd);
    if (!file.empty()) {
      std::error_code ec;
      fs::remove(file, ec);
    }
  }

  // Caller side ------------------------------------------------------------------------------

  BlockId reserve(int64_t bytes, Tier tier) {
    std::lock_guard<std::mutex> lock(m);
    const BlockId id = next_id++;
    Block& b = blocks[id];
    b.tier = tier;
    b.bytes = bytes;
    b.reserved = true;
    return id;
  }

  BlockId put(const at::Tensor& tensor, Tier tier) {
    const BlockId id = reserve(0, tier);
    put(id, tensor);
    return id;
  }

  void put(BlockId id, const at::Tensor& tensor) {
    std::unique_lock<std::mutex> lock(m);
    check();
    auto found = blocks.find(id);
    if (found == blocks.end() || !found->second.reserved) {
      throw Error("internal: tile store block " + std::to_string(id) + " written twice");
    }
    Block& b = found->second;
    b.reserved = false;
    const Tier tier = b.tier;
    const bool channels_last = tensor.dim() == 4 && !tensor.is_contiguous() &&
                               tensor.is_contiguous(at::MemoryFormat::ChannelsLast);
    b.format = channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
    b.resident = channels_last ? tensor : tensor.contiguous();
    b.sizes = tensor.sizes().vec();
    b.options = tensor.options();
    b.bytes = static_cast<int64_t>(tensor.numel()) * static_cast<int64_t>(tensor.element_size());
    if (tier == Tier::kHost) {
      // On a CPU build host memory is the compute device's: the block stays where it is.
      b.host = tensor.is_cpu() ? b.resident : copy_async(b.resident, pinned(b), b.copied);
      host_bytes += b.bytes;
      written += tensor.is_cpu() ? 0 : b.bytes;
      drop_unless_wanted(id);
    } else if (tier == Tier::kDisk) {
      open_file();
      // The I/O thread writes from host memory.
      if (!tensor.is_cpu()) b.host = copy_async(b.resident, pinned(b), b.copied);
      // Direct I/O writes whole aligned pages: each block starts on its own.
      b.offset = take_extent(extent(b));
      b.writing = true;
      in_flight += b.bytes;
      in_flight_peak = std::max(in_flight_peak, in_flight);
      disk_bytes += b.bytes;
      disk_peak = std::max(disk_peak, disk_bytes);
      written += b.bytes;
      jobs.push_back({true, id});
      cv.notify_all();
      // Write-behind: wait when the writes in flight exceed its bytes.
      const int64_t behind =
          options.write_behind_bytes > 0 ? options.write_behind_bytes : options.window_bytes;
      wait_for_writes(lock, [&] { return in_flight <= behind || error; });
      check();
    }
    refill();
  }

  void set_write_behind(int64_t bytes) {
    std::unique_lock<std::mutex> lock(m);
    options.write_behind_bytes = bytes;
    const int64_t behind = bytes > 0 ? bytes : options.window_bytes;
    if (in_flight <= behind) return;
    wait_for_writes(lock, [&] { return in_flight <= behind || error; });
    check();
  }

  void schedule(const std::vector<BlockId>& reads) {
    std::lock_guard<std::mutex> lock(m);
    reads_ahead.insert(reads_ahead.end(), reads.begin(), reads.end());
    refill();
  }

  at::Tensor get(BlockId id) {
    std::unique_lock<std::mutex> lock(m);
    Block& b = wait_for(lock, id);
    at::Tensor t = on_compute_stream(b);
    drop_unless_wanted(id);
    refill();
    return t;
  }

  at::Tensor take(BlockId id) {
    std::unique_lock<std::mutex> lock(m);
    Block& b = wait_for(lock, id, /*taking=*/true);
    at::Tensor t = on_compute_stream(b);
    // Out of the store; the id stays, reserved for the block's next put.
    if (b.tier == Tier::kHost) host_bytes -= b.bytes;
    if (b.tier == Tier::kDisk) {
      disk_bytes -= b.bytes;
      if (b.offset >= 0) free_extents.emplace(extent(b), b.offset);
    }
    b.offset = -1;
    b.resident = at::Tensor();
    b.host = at::Tensor();
    b.copied.reset();
    b.taking = false;
    b.reserved = true;
    refill();
    return t;
  }

  // Waits until block `id` is in memory (reading it back if needed) and, when `taking`, until
  // no write of it is in flight; the lock is held again on return.
  Block& wait_for(std::unique_lock<std::mutex>& lock, BlockId id, bool taking = false) {
    check();
    auto it = blocks.find(id);
    if (it == blocks.end()) throw Error("internal: tile store block " + std::to_string(id));
    if (it->second.reserved) {
      throw Error("internal: tile store block " + std::to_string(id) + " read before written");
    }
    // Reads normally follow the schedule; one that skips ahead drops what it skipped, so the
    // window keeps tracking the reads (an unscheduled read leaves the schedule as it is).
    const auto end = reads_ahead.begin() +
                     std::min<ptrdiff_t>(kSkipLimit, static_cast<ptrdiff_t>(reads_ahead.size()));
    const auto pos = std::find(reads_ahead.begin(), end, id);
    if (pos != end) {
      reads_ahead.erase(reads_ahead.begin(), pos + 1);
    } else {
      ++unscheduled;
      spdlog::debug("tile store: block {} read out of schedule", id);
    }
    Block& b = it->second;
    b.taking = taking;
    if (!b.resident.defined() && b.tier == Tier::kHost) {
      b.resident = copy_async(b.host, b.options, b.copied);
    }
    if (!b.resident.defined() && !b.loading) {
      b.loading = true;
      jobs.push_front({false, id});
      cv.notify_all();
    }
    const auto t0 = Clock::now();
    cv.wait(lock, [&] { return (b.resident.defined() && !(taking && b.writing)) || error; });
    read_wait_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    check();
    return b;
  }

  // Block `b`'s tensor, ready for the compute stream.
  at::Tensor on_compute_stream(Block& b) {
    at::Tensor t = b.resident;
    if (b.copied && !t.is_cpu()) {
      // Made on the store's stream: the compute stream waits for the copy, and the caching
      // allocator keeps the memory from the store's stream while the compute stream uses it.
      const c10::impl::VirtualGuardImpl impl(t.device().type());
      const c10::Stream compute = impl.getStream(t.device());
      b.copied->block(compute);
      impl.recordDataPtrOnStream(t.storage().data_ptr(), compute);
    }
    return t;
  }

  void erase(BlockId id) {
    std::unique_lock<std::mutex> lock(m);
    auto it = blocks.find(id);
    if (it == blocks.end()) return;
    // A write or read in flight still uses the block: the I/O thread erases it after.
    if (it->second.writing || it->second.loading) {
      erased.insert(id);
      return;
    }
    forget(it);
  }

  void flush() {
    std::unique_lock<std::mutex> lock(m);
    wait_for_writes(lock, [&] { return in_flight == 0 || error; });
    check();
  }

  // The caller waits for writes until `done`; the wait counts as a write wait.
  template <typename Done>
  void wait_for_writes(std::unique_lock<std::mutex>& lock, Done done) {
    if (done()) return;
    const auto t0 = Clock::now();
    cv.wait(lock, done);
    write_wait_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }

  TileStoreStats stats() const {
    std::lock_guard<std::mutex> lock(m);
    TileStoreStats s;
    s.written_bytes = written;
    s.read_bytes = read;
    s.host_bytes = host_bytes;
    s.disk_bytes = disk_bytes;
    s.scratch_file_bytes = file_end;
    s.disk_peak_bytes = disk_peak;
    s.in_flight_bytes = in_flight;
    s.in_flight_peak_bytes = in_flight_peak;
    s.unscheduled_reads = unscheduled;
    s.read_wait_ms = read_wait_ms;
    s.write_wait_ms = write_wait_ms;
    s.wait_ms = read_wait_ms + write_wait_ms;
    s.write_ms = write_ms;
    s.read_ms = read_ms;
    for (const auto& [id, b] : blocks) {
      if (b.resident.defined()) s.resident_bytes += b.bytes;
    }
    return s;
  }

  // Accelerators ---------------------------------------------------------------------------
  // Copies between an accelerator and host memory run on a stream of the store's own, so they
  // overlap the compute stream's work; events order the two (DESIGN.md "Memory"). Unused on a
  // CPU build, where the host tier is the compute device's memory.

  static at::TensorOptions pinned(const Block& b) {
    return b.options.device(at::kCPU).pinned_memory(true);
  }

  // `src` copied to a new tensor with `to`'s device (one of them an accelerator) on the store's
  // stream, after the work the compute stream has queued so far (it may still be writing
  // `src`); `done` records the copy's end.
  at::Tensor copy_async(const at::Tensor& src, const at::TensorOptions& to,
                        std::shared_ptr<c10::Event>& done) {
    if (src.device() == to.device()) {
      done.reset();
      return src;  // a CPU build's host tier: the same memory
    }
    const c10::Device accel = src.is_cpu() ? to.device() : src.device();
    const c10::impl::VirtualGuardImpl impl(accel.type());
    const c10::Stream side = copy_stream(accel);
    if (!src.is_cpu()) {
      c10::Event queued(accel.type());
      queued.record(impl.getStream(accel));
      queued.block(side);
    }
    at::Tensor out;
    {
      const c10::StreamGuard guard(side);
      out = at::empty(src.sizes(), to.memory_format(src.suggest_memory_format()))
                .copy_(src, /*non_blocking=*/true);
    }
    // The caching allocator must not give `src`'s memory to the compute stream before the copy
    // has read it (the caller may drop `src` right away).
    if (!src.is_cpu()) impl.recordDataPtrOnStream(src.storage().data_ptr(), side);
    done = std::make_shared<c10::Event>(accel.type());
    done->record(side);
    return out;
  }

  c10::Stream copy_stream(c10::Device device) {
    std::lock_guard<std::mutex> lock(stream_mutex);
    if (!side_stream || side_stream->device() != device) {
      side_stream = c10::impl::VirtualGuardImpl(device.type()).getStreamFromGlobalPool(device);
    }
    return *side_stream;
  }

  // Lock held from here on -------------------------------------------------------------------

  void check() {
    if (error) std::rethrow_exception(error);
  }

  void forget(std::unordered_map<BlockId, Block>::iterator it) {
    if (it->second.reserved) {
      blocks.erase(it);
      return;
    }
    if (it->second.tier == Tier::kHost) host_bytes -= it->second.bytes;
    if (it->second.tier == Tier::kDisk) disk_bytes -= it->second.bytes;
    if (it->second.tier == Tier::kDisk && it->second.offset >= 0) {
      free_extents.emplace(extent(it->second), it->second.offset);
    }
    blocks.erase(it);
  }

  // The bytes block `b` takes in the scratch file (direct I/O writes whole aligned pages).
  int64_t extent(const Block& b) const {
    return direct_fd >= 0 ? round_up(b.bytes, kDirectAlign) : b.bytes;
  }
  // Where a block of `length` bytes goes: the smallest freed extent that holds it (the rest
  // stays free), else the end of the file. Called with the lock held; an extent is freed only
  // once no write or read of its block is in flight (erase defers until then).
  int64_t take_extent(int64_t length) {
    const auto fit = free_extents.lower_bound(length);
    if (fit != free_extents.end()) {
      const int64_t offset = fit->second, rest = fit->first - length;
      free_extents.erase(fit);
      if (rest > 0) free_extents.emplace(rest, offset + length);
      return offset;
    }
    const int64_t offset = direct_fd >= 0 ? round_up(file_end, kDirectAlign) : file_end;
    file_end = offset + length;
    return offset;
  }

  // The blocks read within the window ahead (at least the next one).
  std::unordered_set<BlockId> window() const {
    std::unordered_set<BlockId> w;
    int64_t bytes = 0;
    for (BlockId id : reads_ahead) {
      auto it = blocks.find(id);
      // Resident-tier blocks stay in memory (the plan counts them) and take no room here.
      if (it == blocks.end() || it->second.tier == Tier::kResident) continue;
      if (w.insert(id).second) bytes += it->second.bytes;
      if (bytes >= options.window_bytes) break;
    }
    return w;
  }

  // A block leaves memory once its next read is beyond the window (and no write needs it).
  void drop_unless_wanted(BlockId id) {
    Block& b = blocks[id];
    if (b.tier == Tier::kResident || b.writing || b.loading || b.reserved || b.taking) return;
    if (!window().count(id)) b.resident = at::Tensor();
  }

  // Swap-in: every block within the window ahead that is not in memory is read back.
  void refill() {
    for (BlockId id : window()) {
      Block& b = blocks[id];
      if (b.resident.defined() || b.loading || b.reserved) continue;
      if (b.tier == Tier::kHost) {
        b.resident = copy_async(b.host, b.options, b.copied);
      } else if (b.tier == Tier::kDisk) {
        b.loading = true;
        jobs.push_back({false, id});
      }
    }
    cv.notify_all();
  }

  void open_file() {
    if (fd >= 0) return;
    const fs::path& dir = options.scratch_dir;
    std::error_code ec;
    fs::create_directories(dir, ec);
    const fs::path path = dir / (kPrefix + std::to_string(::getpid()) + "-" +
                                 std::to_string(g_file_counter++) + kSuffix);
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      const int e = errno;
      throw ScratchError(
          "cannot create a scratch file for offloaded checkpoints in " + dir.string() + ": " +
          errno_text(e) +
          "; choose a writable scratch directory (--scratch) or a larger memory budget");
    }
    file = path;
    struct stat st {};
    ::fstat(fd, &st);
    inode = st.st_ino;
    device = st.st_dev;
    if (options.bypass_page_cache || options.direct_io) {
      // The disk without the page cache's CPU work (a copy, allocating, charging and dropping
      // pages: most of the I/O thread's time when it flushed and dropped each block). File
      // systems without O_DIRECT (tmpfs on older kernels) keep the flush-and-drop path when
      // bypassing, the page cache otherwise.
      direct_fd = ::open(path.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
      if (direct_fd < 0) {
        spdlog::debug("no direct I/O on {} ({}): {} instead", path.string(), errno_text(errno),
                      options.bypass_page_cache ? "flushing and dropping pages" : "the page cache");
      }
    }
  }

  // I/O thread --------------------------------------------------------------------------------

  void run() {
    std::unique_lock<std::mutex> lock(m);
    for (;;) {
      cv.wait(lock, [&] { return stop || (!jobs.empty() && !error); });
      if (stop) return;
      // In order. Reads taken before queued writes (session 37) moved the waits from reads to
      // writes and ran no faster (resnet50 8192²: 479.5 s against 472.1): the disk is busy.
      const Job job = jobs.front();
      jobs.pop_front();
      auto it = blocks.find(job.id);
      if (it == blocks.end()) continue;
      Block& b = it->second;
      try {
        if (job.write) {
          const at::Tensor src = b.host.defined() ? b.host : b.resident;
          const std::shared_ptr<c10::Event> copied = b.copied;
          lock.unlock();
          // A block from an accelerator: its copy to host memory must have landed.
          while (copied && !copied->query()) std::this_thread::sleep_for(kPoll);
          const auto t0 = Clock::now();
          const uint64_t sum = write_block(src, b.offset, b.bytes);
          const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
          lock.lock();
          write_ms += ms;
          b.sum = sum;
          b.writing = false;
          in_flight -= b.bytes;
        } else {
          const int64_t offset = b.offset, bytes = b.bytes;
          const uint64_t sum = b.sum;
          const std::vector<int64_t> sizes = b.sizes;
          const at::TensorOptions opts = b.options;
          const at::MemoryFormat format = b.format;
          lock.unlock();
          const auto t0 = Clock::now();
          at::Tensor t = read_block(sizes, opts, format, offset, bytes, sum);
          std::shared_ptr<c10::Event> copied;
          if (!opts.device().is_cpu()) t = copy_async(t, opts, copied);
          const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
          lock.lock();
          read_ms += ms;
          b.resident = std::move(t);
          b.copied = std::move(copied);
          b.loading = false;
          read += bytes;
        }
      } catch (...) {
        if (!lock.owns_lock()) lock.lock();
        error = std::current_exception();
        cv.notify_all();
        continue;
      }
      if (erased.erase(job.id)) {
        forget(blocks.find(job.id));
      } else if (job.write) {
        drop_unless_wanted(job.id);
      }
      cv.notify_all();
    }
  }

  void write_all(int to, const char* p, int64_t bytes, int64_t offset) {
    int64_t done = 0;
    while (done < bytes) {
      const ssize_t n = ::pwrite(to, p + done, static_cast<size_t>(bytes - done), offset + done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int e = n < 0 ? errno : ENOSPC;
        const bool full = e == ENOSPC || e == EFBIG || e == EDQUOT;
        throw ScratchError(
            "cannot write offloaded checkpoints to the scratch file " + file.string() + ": " +
            errno_text(e) +
            (full ? " (the disk or its quota is full); free space there, choose another "
                    "scratch directory (--scratch) or a larger memory budget"
                  : ""));
      }
      done += n;
    }
  }

  // Direct I/O: straight from the block while it is aligned, the rest (an unaligned block, the
  // last partial page, zero-padded) through a bounce buffer, checksummed while it is in cache.
  uint64_t write_direct(const char* p, int64_t offset, int64_t bytes) {
    if (!bounce) {
      bounce.reset(static_cast<char*>(std::aligned_alloc(kDirectAlign, kBounceBytes)));
      if (!bounce) throw Error("out of memory for the tile store's I/O buffer");
    }
    Checksum sum;
    int64_t done = 0;
    if (reinterpret_cast<uintptr_t>(p) % kDirectAlign == 0) {
      done = bytes / kDirectAlign * kDirectAlign;
      sum.update(p, done);
      write_all(direct_fd, p, done, offset);
    }
    while (done < bytes) {
      const int64_t n = std::min(kBounceBytes, bytes - done);
      for (int64_t i = 0; i < n; i += kCopyBytes) {
        const int64_t m = std::min(kCopyBytes, n - i);
        std::memcpy(bounce.get() + i, p + done + i, static_cast<size_t>(m));
        sum.update(bounce.get() + i, m);
      }
      const int64_t padded = round_up(n, kDirectAlign);
      std::memset(bounce.get() + n, 0, static_cast<size_t>(padded - n));
      write_all(direct_fd, bounce.get(), padded, offset + done);
      done += n;
    }
    return sum.digest();
  }

  uint64_t write_block(const at::Tensor& src, int64_t offset, int64_t bytes) {
    const auto* p = static_cast<const char*>(src.data_ptr());
    if (direct_fd >= 0) return write_direct(p, offset, bytes);
    const uint64_t sum = checksum(p, bytes);
    write_all(fd, p, bytes, offset);
    if (options.bypass_page_cache) {
      // Dirty pages cannot be dropped: write them out first, then drop them.
      if (::sync_file_range(fd, offset, bytes,
                            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                SYNC_FILE_RANGE_WAIT_AFTER) != 0) {
        const int e = errno;
        throw ScratchError("cannot flush offloaded checkpoints to the scratch file " +
                           file.string() + ": " + errno_text(e));
      }
      ::posix_fadvise(fd, offset, bytes, POSIX_FADV_DONTNEED);
    }
    return sum;
  }

  // 0, an errno, or -1 when the file ends first.
  static int read_all(int from, char* p, int64_t bytes, int64_t offset) {
    int64_t done = 0;
    while (done < bytes) {
      const ssize_t n = ::pread(from, p + done, static_cast<size_t>(bytes - done), offset + done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return errno;
      if (n == 0) return -1;
      done += n;
    }
    return 0;
  }

  at::Tensor read_block(const std::vector<int64_t>& sizes, const at::TensorOptions& opts,
                        at::MemoryFormat format, int64_t offset, int64_t bytes, uint64_t sum) {
    // Reading through our descriptor would still succeed after an unlink: check that the file
    // on disk is still ours, so a deleted scratch file is an error, never stale data.
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0 || st.st_ino != inode || st.st_dev != device) {
      throw ScratchError(
          "the scratch file " + file.string() +
          " holding offloaded checkpoints was deleted or replaced while the step ran; "
          "the step cannot continue (keep the scratch directory for Tessel alone)");
    }
    const bool direct = direct_fd >= 0 && opts.device().is_cpu();
    at::Tensor host = direct ? aligned_empty(sizes, opts, format, round_up(bytes, kDirectAlign))
                             : at::empty(sizes, opts.device(at::kCPU)
                                                    .pinned_memory(!opts.device().is_cpu())
                                                    .memory_format(format));
    auto* p = static_cast<char*>(host.data_ptr());
    // Direct reads take whole pages: the block's zero padding lands in the allocation's slack.
    const int64_t length = direct ? round_up(bytes, kDirectAlign) : bytes;
    // The device reads faster with two requests in flight (here 1.66 GB/s against 1.1 with
    // one): a large direct read is split in two halves read at once.
    const int64_t half =
        direct && length >= kSplitReadBytes ? round_up(length / 2, kDirectAlign) : length;
    int second = 0;
    std::thread helper;
    if (half < length) {
      helper = std::thread(
          [&] { second = read_all(direct_fd, p + half, length - half, offset + half); });
    }
    const int first = read_all(direct ? direct_fd : fd, p, half, offset);
    if (helper.joinable()) helper.join();
    if (first != 0 || second != 0) {
      const int e = first != 0 ? first : second;
      throw ScratchError("the scratch file " + file.string() +
                         " is shorter than what was written (" +
                         (e > 0 ? errno_text(e) : std::string("truncated")) +
                         "); the offloaded checkpoints are lost and the step cannot continue");
    }
    // A block is read more than once (forward, backward): the next read must find a cold disk.
    if (options.bypass_page_cache && !direct) {
      ::posix_fadvise(fd, offset, bytes, POSIX_FADV_DONTNEED);
    }
    if (checksum(p, bytes) != sum) {
      throw ScratchError("the scratch file " + file.string() +
                         " was changed while the step ran (checksum mismatch); the offloaded "
                         "checkpoints are lost and the step cannot continue");
    }
    return host;  // in host memory (pinned for an accelerator's block)
  }

  // A CPU tensor whose data starts on a kDirectAlign boundary with room for `length` bytes,
  // carved from an ordinary allocation (so the memory tracker counts it).
  static at::Tensor aligned_empty(const std::vector<int64_t>& sizes, const at::TensorOptions& opts,
                                  at::MemoryFormat format, int64_t length) {
    at::Tensor base = at::empty({length + kDirectAlign}, opts.dtype(at::kByte).device(at::kCPU));
    auto* raw = static_cast<char*>(base.data_ptr());
    char* p = raw + (kDirectAlign - reinterpret_cast<uintptr_t>(raw) % kDirectAlign) % kDirectAlign;
    const auto keep = [base](void*) mutable { base.reset(); };
    if (format == at::MemoryFormat::ChannelsLast) {
      return at::from_blob(p, sizes, c10::get_channels_last_strides_2d(sizes), keep,
                           opts.device(at::kCPU));
    }
    return at::from_blob(p, sizes, keep, opts.device(at::kCPU));
  }

  TileStoreOptions options;
  mutable std::mutex m;
  std::condition_variable cv;
  std::mutex stream_mutex;                 // guards side_stream (both threads copy)
  std::optional<c10::Stream> side_stream;  // an accelerator's copies (copy_async)
  std::unordered_map<BlockId, Block> blocks;
  std::unordered_set<BlockId> erased;
  std::deque<BlockId> reads_ahead;
  std::deque<Job> jobs;
  std::exception_ptr error;
  bool stop = false;
  BlockId next_id = 0;
  int fd = -1;
  int direct_fd = -1;  // the same file with O_DIRECT, when bypassing the page cache
  // The I/O thread's copy buffer for direct writes (kBounceBytes, outside the memory tracker's
  // count like the page cache it replaces).
  std::unique_ptr<char, decltype(&std::free)> bounce{nullptr, &std::free};
  fs::path file;
  ino_t inode = 0;
  dev_t device = 0;
  int64_t file_end = 0, in_flight = 0, in_flight_peak = 0, written = 0, read = 0, host_bytes = 0,
          disk_bytes = 0;
  int64_t disk_peak = 0;
  // Extents of erased disk blocks (length → offset), reused: a step writes many times the bytes
  // it holds at once (inner checkpoints, gradients stored pass after pass), and an append-only
  // scratch file filled the disk (resnet50 4096² with offloaded inner checkpoints, 46 GB free).
  std::multimap<int64_t, int64_t> free_extents;
  double read_wait_ms = 0, write_wait_ms = 0, write_ms = 0, read_ms = 0;
  int64_t unscheduled = 0;
  std::thread io;  // last: started after every member it uses
};

TileStore::TileStore(TileStoreOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
TileStore::~TileStore() = default;

TileStore::BlockId TileStore::reserve(int64_t bytes, Tier tier) {
  return impl_->reserve(bytes, tier);
}
void TileStore::put(BlockId id, const at::Tensor& block) { impl_->put(id, block); }
at::Tensor TileStore::take(BlockId id) { return impl_->take(id); }
TileStore::BlockId TileStore::put(const at::Tensor& block, Tier tier) {
  return impl_->put(block, tier);
}
void TileStore::schedule(const std::vector<BlockId>& reads) { impl_->schedule(reads); }
at::Tensor TileStore::get(BlockId id) { return impl_->get(id); }
void TileStore::erase(BlockId id) { impl_->erase(id); }
void TileStore::flush() { impl_->flush(); }
void TileStore::set_write_behind(int64_t bytes) { impl_->set_write_behind(bytes); }
TileStoreStats TileStore::stats() const { return impl_->stats(); }
std::filesystem::path TileStore::scratch_file() const {
  std::lock_guard<std::mutex> lock(impl_->m);
  return impl_->file;
}

void TileStore::check_scratch_dir(const fs::path& dir) {
  const auto unusable = [&](const std::string& reason) {
    return ScratchError("cannot use " + dir.string() + " as the scratch directory for offloaded " +
                        "checkpoints: " + reason + "; choose a writable directory with --scratch");
  };
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) throw unusable(error.message());
  const fs::path probe = dir / (".tessel-scratch-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw unusable(errno_text(errno));
  ::close(fd);
  fs::remove(probe, error);
  remove_stale_scratch_files(dir);
}

void TileStore::check_free_space(const fs::path& dir, int64_t bytes) {
  const fs::path where = dir.empty() ? fs::temp_directory_path() : dir;
  std::error_code error;
  const fs::space_info space = fs::space(where, error);
  if (error || bytes <= 0) return;  // an unusable directory fails with its own message
  if (static_cast<uintmax_t>(bytes) <= space.available) return;
  throw ScratchError("this step keeps up to " + format_bytes(bytes) +
                     " of offloaded checkpoints in the scratch directory " + where.string() +
                     ", which has " + format_bytes(static_cast<int64_t>(space.available)) +
                     " free: free space there, choose another scratch directory (--scratch) or "
                     "a larger memory budget");
}

int TileStore::remove_stale_scratch_files(const std::filesystem::path& dir) {
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0 || name.size() <= std::strlen(kSuffix) ||
        name.compare(name.size() - std::strlen(kSuffix), std::string::npos, kSuffix) != 0) {
      continue;
    }
    const std::string rest = name.substr(std::strlen(kPrefix));
    long pid = 0;
    try {
      pid = std::stol(rest);
    } catch (const std::exception&) {
      continue;
    }
    // A process that no longer exists cannot be using its scratch file: it crashed.
    if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)) continue;
    std::error_code rm;
    if (fs::remove(entry.path(), rm)) {
      spdlog::info("removed {} left by a run that ended without cleaning up",
                   entry.path().string());
      ++removed;
    }
  }
  return removed;
}

}  // namespace tessel::core
