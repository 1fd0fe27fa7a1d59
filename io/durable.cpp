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

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes,
                           const std::string& what) {
  std::filesystem::path partial = path;
  partial += ".partial";
  const std::string shown = what + " " + path.string();
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int error = errno;
    std::error_code ignored;
    const bool folder = std::filesystem::is_directory(
        path.parent_path().empty() ? "." : path.parent_path(), ignored);
    throw Error("cannot write " + shown + ": " +
                (folder ? "cannot create " + partial.string() + " (" + reason(error) + ")"
                        : "the folder " + path.parent_path().string() + " does not exist"));
  }
  size_t done = 0;
  int error = write_all(fd, bytes, done);
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error != 0) {
    std::error_code ignored;
    std::filesystem::remove(partial, ignored);
    throw Error("cannot write " + shown + ": " + reason(error) + " after " + std::to_string(done) +
                " of " + std::to_string(bytes.size()) + " bytes");
  }
  crash_point("written " + partial.filename().string());
  std::error_code renamed;
  std::filesystem::rename(partial, path, renamed);
  if (renamed) {
    std::error_code ignored;
    std::filesystem::remove(partial, ignored);
    throw Error("cannot write " + shown + ": " + renamed.message());
  }
  sync_folder(path);
  crash_point("renamed " + path.filename().string());
}

void copy_file_atomically(const std::filesystem::path& from, const std::filesystem::path& to,
                          const std::string& what) {
  std::string bytes;
  {
    const int fd = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      throw Error("cannot copy " + what + " " + from.string() + " to " + to.string() + ": " +
                  std::strerror(errno));
    }
    char buffer[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int error = errno;
        ::close(fd);
        throw Error("cannot read " + what + " " + from.string() + ": " + std::strerror(error));
      }
      if (n == 0) break;
      bytes.append(buffer, static_cast<size_t>(n));
    }
    ::close(fd);
  }
  write_file_atomically(to, bytes, what);
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
