#include "io/durable.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace tessel::io {
namespace {

// 0: no crash injection (TESSEL_CRASH_AT unset or not a positive number).
int64_t crash_at() {
  static const int64_t at = [] {
    const char* text = std::getenv("TESSEL_CRASH_AT");
    if (text == nullptr) return int64_t{0};
    char* end = nullptr;
    const long long n = std::strtoll(text, &end, 10);
    return end != text && *end == '\0' && n > 0 ? static_cast<int64_t>(n) : int64_t{0};
  }();
  return at;
}

std::string reason(int error) {
  return std::string(std::strerror(error)) +
         (error == ENOSPC || error == EDQUOT ? " (the disk is full)" : "");
}

// Writes all of `bytes` to `fd`; 0 or the errno.
int write_all(int fd, std::string_view bytes, size_t& done) {
  done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : ENOSPC;
    done += static_cast<size_t>(n);
  }
  return 0;
}

// The rename is durable only once the folder's entry is on the disk.
void sync_folder(const std::filesystem::path& file) {
  const std::filesystem::path folder = file.parent_path().empty() ? "." : file.parent_path();
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: some file systems refuse to open folders
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

namespace {

// "<path>.partial", opened for writing; throws naming the file, or the missing folder.
int open_partial(const std::filesystem::path& path, const std::filesystem::path& partial,
                 const std::string& shown) {
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) return fd;
  const int error = errno;
  std::error_code ignored;
  const bool folder =
      std::filesystem::is_directory(path.parent_path().empty() ? "." : path.parent_path(), ignored);
  throw Error("cannot write " + shown + ": " +
              (folder ? "cannot create " + partial.string() + " (" + reason(error) + ")"
                      : "the folder " + path.parent_path().string() + " does not exist"));
}

// The partial file's bytes made durable and renamed into place, or the partial removed and the
// reason thrown (`error`: a write's errno, 0 when every write succeeded).
void publish(int fd, int error, const std::filesystem::path& partial,
             const std::filesystem::path& path, const std::string& shown,
             const std::string& written) {
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  std::error_code ignored;
  if (error != 0) {
    std::filesystem::remove(partial, ignored);
    throw Error("cannot write " + shown + ": " + reason(error) + written);
  }
  crash_point("written " + partial.filename().string());
  std::error_code renamed;
  std::filesystem::rename(partial, path, renamed);
  if (renamed) {
    std::filesystem::remove(partial, ignored);
    throw Error("cannot write " + shown + ": " + renamed.message());
  }
  sync_folder(path);
  crash_point("renamed " + path.filename().string());
}

std::filesystem::path partial_of(const std::filesystem::path& path) {
  std::filesystem::path partial = path;
  partial += ".partial";
  return partial;
}

}  // namespace

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes,
                           const std::string& what) {
  const std::filesystem::path partial = partial_of(path);
  const std::string shown = what + " " + path.string();
  const int fd = open_partial(path, partial, shown);
  size_t done = 0;
  const int error = write_all(fd, bytes, done);
  publish(fd, error, partial, path, shown,
          " after " + std::to_string(done) + " of " + std::to_string(bytes.size()) + " bytes");
}

void copy_file_atomically(const std::filesystem::path& from, const std::filesystem::path& to,
                          const std::string& what) {
  // Streamed: a checkpoint of a large network is not held in memory a second time.
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) {
    throw Error("cannot copy " + what + " " + from.string() + " to " + to.string() + ": " +
                std::strerror(errno));
  }
  const std::filesystem::path partial = partial_of(to);
  const std::string shown = what + " " + to.string();
  int out = -1;
  try {
    out = open_partial(to, partial, shown);
  } catch (...) {
    ::close(in);
    throw;
  }
  std::vector<char> buffer(size_t{1} << 20);
  int error = 0, read_error = 0;
  for (;;) {
    const ssize_t n = ::read(in, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) read_error = error = errno;
    if (n <= 0) break;
    size_t done = 0;
    error = write_all(out, std::string_view(buffer.data(), static_cast<size_t>(n)), done);
    if (error != 0) break;
  }
  ::close(in);
  publish(out, error, partial, to, shown,
          read_error != 0 ? " (reading " + from.string() + ")" : std::string());
}

void append_line(const std::filesystem::path& path, std::string_view line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw Error("cannot write " + path.string() + ": " + reason(errno) +
                " (is the folder writable?)");
  }
  std::string text(line);
  text += '\n';
  size_t done = 0;
  // A crash test's torn line: half of it reaches the file, then the process dies.
  if (crash_at() > 0) {
    const std::string_view half(text.data(), text.size() / 2);
    write_all(fd, half, done);
    crash_point("half a line of " + path.filename().string());
    text.erase(0, done);
  }
  const int error = write_all(fd, text, done);
  ::close(fd);
  if (error != 0) throw Error("cannot write " + path.string() + ": " + reason(error));
  crash_point("line of " + path.filename().string());
}

void crash_point(std::string_view name) {
  if (crash_at() == 0) return;
  static std::atomic<int64_t> passed{0};
  const int64_t n = ++passed;
  if (n != crash_at()) return;
  std::fprintf(stderr, "tessel: crash point %lld: %.*s\n", static_cast<long long>(n),
               static_cast<int>(name.size()), name.data());
  std::fflush(stderr);
  std::raise(SIGKILL);
}

}  // namespace tessel::io
