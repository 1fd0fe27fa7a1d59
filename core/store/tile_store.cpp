#include "core/store/tile_store.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/device/copies.h"
#include "core/error.h"
#include "core/store/scratch_file.h"

namespace tessel::core {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr ptrdiff_t kSkipLimit = 256;  // how far ahead a read looks for itself in the schedule

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

  explicit Impl(TileStoreOptions o)
      : options(in_scratch_dir(std::move(o))),
        file({options.scratch_dir, options.bypass_page_cache, options.direct_io}) {
    std::error_code ec;
    if (fs::is_directory(options.scratch_dir, ec)) ScratchFile::remove_stale(options.scratch_dir);
    io = std::thread([this] { run(); });
  }

  static TileStoreOptions in_scratch_dir(TileStoreOptions o) {
    if (o.scratch_dir.empty()) o.scratch_dir = fs::temp_directory_path();
    return o;
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(m);
      stop = true;
    }
    cv.notify_all();
    io.join();
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
      b.host = staging.copy(b.resident, Staging::host_options(b.options), b.copied);
      host_bytes += b.bytes;
      written += Staging::needs_host_copy(tensor.device()) ? b.bytes : 0;
      drop_unless_wanted(id);
    } else if (tier == Tier::kDisk) {
      file.open();
      // The I/O thread writes from host memory (`resident` itself on a CPU build, where keeping
      // it as `host` too would keep it in memory after it is written).
      if (Staging::needs_host_copy(tensor.device())) {
        b.host = staging.copy(b.resident, Staging::host_options(b.options), b.copied);
      }
      // Direct I/O writes whole aligned pages: each block starts on its own.
      b.offset = file.take_extent(file.extent(b.bytes));
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
      if (b.offset >= 0) file.free_extent(file.extent(b.bytes), b.offset);
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
      b.resident = staging.copy(b.host, b.options, b.copied);
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
  static at::Tensor on_compute_stream(const Block& b) {
    Staging::use_on_compute_stream(b.resident, b.copied);
    return b.resident;
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
    s.scratch_file_bytes = file.size();
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
      file.free_extent(file.extent(it->second.bytes), it->second.offset);
    }
    blocks.erase(it);
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
        b.resident = staging.copy(b.host, b.options, b.copied);
      } else if (b.tier == Tier::kDisk) {
        b.loading = true;
        jobs.push_back({false, id});
      }
    }
    cv.notify_all();
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
          const int64_t offset = b.offset, bytes = b.bytes;
          lock.unlock();
          // A block from an accelerator: its copy to host memory must have landed.
          Staging::wait(copied);
          const auto t0 = Clock::now();
          const uint64_t sum = file.write(static_cast<const char*>(src.data_ptr()), offset, bytes);
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
          t = staging.copy(t, opts, copied);
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

  // Block bytes read back from the scratch file into host memory: aligned for direct I/O on a
  // CPU build, pinned for an accelerator's block (which goes through the page cache).
  at::Tensor read_block(const std::vector<int64_t>& sizes, const at::TensorOptions& opts,
                        at::MemoryFormat format, int64_t offset, int64_t bytes, uint64_t sum) {
    const bool direct = file.direct() && !Staging::needs_host_copy(opts.device());
    at::Tensor host = direct ? aligned_empty(sizes, opts, format, file.extent(bytes))
                             : at::empty(sizes, Staging::host_options(opts).memory_format(format));
    file.read(static_cast<char*>(host.data_ptr()), offset, bytes, sum, direct);
    return host;
  }

  // A CPU tensor whose data starts on a kDirectAlign boundary with room for `length` bytes,
  // carved from an ordinary allocation (so the memory tracker counts it).
  static at::Tensor aligned_empty(const std::vector<int64_t>& sizes, const at::TensorOptions& opts,
                                  at::MemoryFormat format, int64_t length) {
    constexpr int64_t kAlign = ScratchFile::kDirectAlign;
    at::Tensor base = at::empty({length + kAlign}, opts.dtype(at::kByte).device(at::kCPU));
    auto* raw = static_cast<char*>(base.data_ptr());
    char* p = raw + (kAlign - reinterpret_cast<uintptr_t>(raw) % kAlign) % kAlign;
    const auto keep = [base](void*) mutable { base.reset(); };
    if (format == at::MemoryFormat::ChannelsLast) {
      return at::from_blob(p, sizes, c10::get_channels_last_strides_2d(sizes), keep,
                           opts.device(at::kCPU));
    }
    return at::from_blob(p, sizes, keep, opts.device(at::kCPU));
  }

  TileStoreOptions options;
  ScratchFile file;  // the disk tier (created at its first block)
  Staging staging;   // an accelerator's copies to and from host memory
  mutable std::mutex m;
  std::condition_variable cv;
  std::unordered_map<BlockId, Block> blocks;
  std::unordered_set<BlockId> erased;
  std::deque<BlockId> reads_ahead;
  std::deque<Job> jobs;
  std::exception_ptr error;
  bool stop = false;
  BlockId next_id = 0;
  int64_t in_flight = 0, in_flight_peak = 0, written = 0, read = 0, host_bytes = 0, disk_bytes = 0;
  int64_t disk_peak = 0;
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
  return impl_->file.path();
}

void TileStore::check_scratch_dir(const fs::path& dir) { ScratchFile::check_dir(dir); }

void TileStore::check_free_space(const fs::path& dir, int64_t bytes) {
  ScratchFile::check_free_space(dir, bytes);
}

int TileStore::remove_stale_scratch_files(const fs::path& dir) {
  return ScratchFile::remove_stale(dir);
}

}  // namespace tessel::core
