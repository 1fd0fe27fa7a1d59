#include "core/store/scratch_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <exception>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/plan/plan.h"

namespace tessel::core {

namespace {

namespace fs = std::filesystem;

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

// A write that needs a copy goes in pieces this large (a 1 MiB O_DIRECT write here runs at 1.8
// GB/s, a 4 MiB one at 2.4), copied and checksummed 1 MiB at a time, while it is in cache.
constexpr int64_t kBounceBytes = int64_t{4} << 20, kCopyBytes = int64_t{1} << 20;
constexpr int64_t kSplitReadBytes = int64_t{1} << 20;  // direct reads this large go in two halves

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

constexpr const char* kPrefix = "tessel-offload-";
constexpr const char* kSuffix = ".scratch";

std::atomic<int> g_file_counter{0};

// 0, an errno, or -1 when the file ends first.
int read_all(int from, char* p, int64_t bytes, int64_t offset) {
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

}  // namespace

ScratchFile::~ScratchFile() {
  if (fd_ >= 0) ::close(fd_);
  if (direct_fd_ >= 0) ::close(direct_fd_);
  if (!path_.empty()) {
    std::error_code ec;
    fs::remove(path_, ec);
  }
}

void ScratchFile::open() {
  if (fd_ >= 0) return;
  const fs::path& dir = options_.dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path path = dir / (kPrefix + std::to_string(::getpid()) + "-" +
                               std::to_string(g_file_counter++) + kSuffix);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    const int e = errno;
    throw ScratchError(
        "cannot create a scratch file for offloaded checkpoints in " + dir.string() + ": " +
        errno_text(e) +
        "; choose a writable scratch directory (--scratch) or a larger memory budget");
  }
  path_ = path;
  struct stat st {};
  ::fstat(fd_, &st);
  inode_ = st.st_ino;
  device_ = st.st_dev;
  if (options_.bypass_page_cache || options_.direct_io) {
    // The disk without the page cache's CPU work (a copy, allocating, charging and dropping
    // pages: most of the I/O thread's time when it flushed and dropped each block). File
    // systems without O_DIRECT (tmpfs on older kernels) keep the flush-and-drop path when
    // bypassing, the page cache otherwise.
    direct_fd_ = ::open(path.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
    if (direct_fd_ < 0) {
      spdlog::debug("no direct I/O on {} ({}): {} instead", path.string(), errno_text(errno),
                    options_.bypass_page_cache ? "flushing and dropping pages" : "the page cache");
    }
  }
}

int64_t ScratchFile::extent(int64_t bytes) const {
  return direct_fd_ >= 0 ? round_up(bytes, kDirectAlign) : bytes;
}

int64_t ScratchFile::take_extent(int64_t length) {
  const auto fit = free_extents_.lower_bound(length);
  if (fit != free_extents_.end()) {
    const int64_t offset = fit->second, rest = fit->first - length;
    free_extents_.erase(fit);
    if (rest > 0) free_extents_.emplace(rest, offset + length);
    return offset;
  }
  const int64_t offset = direct_fd_ >= 0 ? round_up(end_, kDirectAlign) : end_;
  end_ = offset + length;
  return offset;
}

void ScratchFile::write_all(int to, const char* p, int64_t bytes, int64_t offset) const {
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pwrite(to, p + done, static_cast<size_t>(bytes - done), offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : ENOSPC;
      const bool full = e == ENOSPC || e == EFBIG || e == EDQUOT;
      throw ScratchError(
          "cannot write offloaded checkpoints to the scratch file " + path_.string() + ": " +
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
uint64_t ScratchFile::write_direct(const char* p, int64_t offset, int64_t bytes) {
  if (!bounce_) {
    bounce_.reset(static_cast<char*>(std::aligned_alloc(kDirectAlign, kBounceBytes)));
    if (!bounce_) throw Error("out of memory for the tile store's I/O buffer");
  }
  Checksum sum;
  int64_t done = 0;
  if (reinterpret_cast<uintptr_t>(p) % kDirectAlign == 0) {
    done = bytes / kDirectAlign * kDirectAlign;
    sum.update(p, done);
    write_all(direct_fd_, p, done, offset);
  }
  while (done < bytes) {
    const int64_t n = std::min(kBounceBytes, bytes - done);
    for (int64_t i = 0; i < n; i += kCopyBytes) {
      const int64_t m = std::min(kCopyBytes, n - i);
      std::memcpy(bounce_.get() + i, p + done + i, static_cast<size_t>(m));
      sum.update(bounce_.get() + i, m);
    }
    const int64_t padded = round_up(n, kDirectAlign);
    std::memset(bounce_.get() + n, 0, static_cast<size_t>(padded - n));
    write_all(direct_fd_, bounce_.get(), padded, offset + done);
    done += n;
  }
  return sum.digest();
}

uint64_t ScratchFile::write(const char* p, int64_t offset, int64_t bytes) {
  if (direct_fd_ >= 0) return write_direct(p, offset, bytes);
  const uint64_t sum = checksum(p, bytes);
  write_all(fd_, p, bytes, offset);
  if (options_.bypass_page_cache) {
    // Dirty pages cannot be dropped: write them out first, then drop them.
    if (::sync_file_range(fd_, offset, bytes,
                          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                              SYNC_FILE_RANGE_WAIT_AFTER) != 0) {
      const int e = errno;
      throw ScratchError("cannot flush offloaded checkpoints to the scratch file " +
                         path_.string() + ": " + errno_text(e));
    }
    ::posix_fadvise(fd_, offset, bytes, POSIX_FADV_DONTNEED);
  }
  return sum;
}

// Reading through our descriptor would still succeed after an unlink: the file on disk must
// still be ours, so a deleted scratch file is an error, never stale data.
void ScratchFile::check_ours() const {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0 || st.st_ino != inode_ || st.st_dev != device_) {
    throw ScratchError("the scratch file " + path_.string() +
                       " holding offloaded checkpoints was deleted or replaced while the step ran; "
                       "the step cannot continue (keep the scratch directory for Tessel alone)");
  }
}

void ScratchFile::read(char* p, int64_t offset, int64_t bytes, uint64_t sum, bool direct) const {
  check_ours();
  direct = direct && direct_fd_ >= 0;
  // Direct reads take whole pages: the block's zero padding lands in the buffer's slack.
  const int64_t length = direct ? round_up(bytes, kDirectAlign) : bytes;
  // The device reads faster with two requests in flight (here 1.66 GB/s against 1.1 with
  // one): a large direct read is split in two halves read at once.
  const int64_t half =
      direct && length >= kSplitReadBytes ? round_up(length / 2, kDirectAlign) : length;
  int second = 0;
  std::thread helper;
  if (half < length) {
    helper =
        std::thread([&] { second = read_all(direct_fd_, p + half, length - half, offset + half); });
  }
  const int first = read_all(direct ? direct_fd_ : fd_, p, half, offset);
  if (helper.joinable()) helper.join();
  if (first != 0 || second != 0) {
    const int e = first != 0 ? first : second;
    throw ScratchError("the scratch file " + path_.string() +
                       " is shorter than what was written (" +
                       (e > 0 ? errno_text(e) : std::string("truncated")) +
                       "); the offloaded checkpoints are lost and the step cannot continue");
  }
  // A block is read more than once (forward, backward): the next read must find a cold disk.
  if (options_.bypass_page_cache && !direct)
    ::posix_fadvise(fd_, offset, bytes, POSIX_FADV_DONTNEED);
  if (checksum(p, bytes) != sum) {
    throw ScratchError("the scratch file " + path_.string() +
                       " was changed while the step ran (checksum mismatch); the offloaded "
                       "checkpoints are lost and the step cannot continue");
  }
}

void ScratchFile::check_dir(const fs::path& dir) {
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
  remove_stale(dir);
}

void ScratchFile::check_free_space(const fs::path& dir, int64_t bytes) {
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

int ScratchFile::remove_stale(const fs::path& dir) {
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
