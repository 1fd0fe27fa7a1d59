// The disk tier's scratch file: blocks of bytes at offsets (the extents of erased blocks reused),
// each checksummed on its way out and checked on its way back, with or without the page cache.
// Bytes only: the tile store (tile_store.cpp) turns them into tensors.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>

namespace tessel::core {

struct ScratchFileOptions {
  std::filesystem::path dir;  // where the file is created (TileStoreOptions::scratch_dir)
  bool bypass_page_cache = false, direct_io = false;  // as in TileStoreOptions
};

class ScratchFile {
 public:
  // Direct I/O (the cold-disk case): offsets, lengths and buffers aligned to this, which covers
  // 512- and 4096-byte devices.
  static constexpr int64_t kDirectAlign = 4096;

  explicit ScratchFile(ScratchFileOptions options) : options_(std::move(options)) {}
  ~ScratchFile();  // closes and removes the file
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  // Creates the file (named tessel-offload-<pid>-<n>.scratch) unless it is open; throws
  // tessel::ScratchError when it cannot.
  void open();
  const std::filesystem::path& path() const { return path_; }  // empty until open()
  bool direct() const { return direct_fd_ >= 0; }              // opened with O_DIRECT

  // The bytes a block of `bytes` takes in the file (direct I/O writes whole aligned pages).
  int64_t extent(int64_t bytes) const;
  // Where a block of `length` bytes goes: the smallest freed extent that holds it (the rest
  // stays free), else the end of the file. The caller serialises these two with its own lock,
  // and frees an extent only once no write or read of its block is in flight.
  int64_t take_extent(int64_t length);
  void free_extent(int64_t length, int64_t offset) { free_extents_.emplace(length, offset); }
  int64_t size() const { return end_; }  // the end of the last extent taken

  // Writes `bytes` from `p` at `offset`; returns their checksum. Throws tessel::ScratchError
  // (a full disk named as such). The I/O thread's alone.
  uint64_t write(const char* p, int64_t offset, int64_t bytes);
  // Reads back the `bytes` written at `offset` into `p`, which has room for extent(bytes) when
  // `direct` (then aligned to kDirectAlign: the read bypasses the page cache). Throws
  // tessel::ScratchError when the file was deleted or replaced, is short, or its bytes no longer
  // match `sum`: never silently wrong data.
  void read(char* p, int64_t offset, int64_t bytes, uint64_t sum, bool direct) const;

  static void check_dir(const std::filesystem::path& dir);
  static void check_free_space(const std::filesystem::path& dir, int64_t bytes);
  static int remove_stale(const std::filesystem::path& dir);

 private:
  void write_all(int to, const char* p, int64_t bytes, int64_t offset) const;
  uint64_t write_direct(const char* p, int64_t offset, int64_t bytes);
  void check_ours() const;

  ScratchFileOptions options_;
  std::filesystem::path path_;
  int fd_ = -1;
  int direct_fd_ = -1;  // the same file with O_DIRECT, when bypassing the page cache
  ino_t inode_ = 0;
  dev_t device_ = 0;
  int64_t end_ = 0;
  // Extents of erased blocks (length → offset), reused: a step writes many times the bytes it
  // holds at once (inner checkpoints, gradients stored pass after pass), and an append-only
  // scratch file filled the disk (resnet50 4096² with offloaded inner checkpoints, 46 GB free).
  std::multimap<int64_t, int64_t> free_extents_;
  // The I/O thread's copy buffer for direct writes (outside the memory tracker's count like the
  // page cache it replaces).
  std::unique_ptr<char, decltype(&std::free)> bounce_{nullptr, &std::free};
};

}  // namespace tessel::core
