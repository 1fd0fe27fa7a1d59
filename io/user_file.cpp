#include "io/user_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/plan/plan.h"

namespace tessel::io {

std::string not_a_regular_file(const std::filesystem::path& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return errno == ENOENT || errno == ENOTDIR ? std::string(kNoSuchFile) : std::strerror(errno);
  }
  if (S_ISREG(info.st_mode)) return {};
  if (S_ISDIR(info.st_mode)) return std::string(kIsAFolder);
  if (S_ISFIFO(info.st_mode)) return "it is a named pipe (FIFO), not a file; Tessel reads files";
  if (S_ISCHR(info.st_mode) || S_ISBLK(info.st_mode)) {
    return "it is a device, not a file; Tessel reads files";
  }
  if (S_ISSOCK(info.st_mode)) return "it is a socket, not a file; Tessel reads files";
  return "it is not a regular file";
}

std::string utf8_problem(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    // The sequence's length and its second byte's range (RFC 3629: no overlongs, no surrogates).
    size_t length = 1;
    unsigned char low = 0x80, high = 0xBF;
    if (byte < 0x80) {
      ++i;
      continue;
    }
    if (byte >= 0xC2 && byte <= 0xDF) {
      length = 2;
    } else if (byte >= 0xE0 && byte <= 0xEF) {
      length = 3;
      if (byte == 0xE0) low = 0xA0;
      if (byte == 0xED) high = 0x9F;
    } else if (byte >= 0xF0 && byte <= 0xF4) {
      length = 4;
      if (byte == 0xF0) low = 0x90;
      if (byte == 0xF4) high = 0x8F;
    } else {
      length = 0;
    }
    bool ok = length > 0 && i + length <= text.size();
    for (size_t k = 1; ok && k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      ok = k == 1 ? next >= low && next <= high : next >= 0x80 && next <= 0xBF;
    }
    if (!ok) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", byte);
      return "byte " + std::to_string(i + 1) + " (" + hex + ") is not UTF-8";
    }
    i += length;
  }
  return {};
}

std::string read_user_file(const std::filesystem::path& path, const std::string& refusal,
                           int64_t max_bytes) {
  const std::string why = not_a_regular_file(path);
  if (!why.empty()) throw Error(refusal + why);
  // O_NONBLOCK: a file swapped for a pipe after the check opens at once (and reads nothing).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(refusal + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    throw Error(refusal + "it is not a regular file");
  }
  if (info.st_size > max_bytes) {
    throw Error(refusal + "it holds " + core::format_bytes(info.st_size) + ", more than the " +
                core::format_bytes(max_bytes) + " such a file may hold");
  }
  std::string text;
  text.reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(refusal + std::strerror(errno));
    }
    text.append(buffer, static_cast<size_t>(n));
    if (static_cast<int64_t>(text.size()) > max_bytes) {
      throw Error(refusal + "it grows while being read beyond the " +
                  core::format_bytes(max_bytes) + " such a file may hold");
    }
  }
  return text;
}

}  // namespace tessel::io
