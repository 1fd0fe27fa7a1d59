// The fuzz input as a file, for the readers that take a path: one folder per process (in
// /dev/shm when there is one, so that a million inputs do not wear a disk), rewritten in place
// for every input and removed when the process exits normally.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tessel::fuzz {

class InputFile {
 public:
  // `name` is the input's file name; `neighbours` are empty files made beside it (slides that a
  // manifest's relative paths can find).
  explicit InputFile(const std::string& name, const std::vector<std::string>& neighbours = {}) {
    namespace fs = std::filesystem;
    const fs::path shm = "/dev/shm";
    std::error_code ec;
    const fs::path root = fs::is_directory(shm, ec) && access(shm.c_str(), W_OK) == 0
                              ? shm
                              : fs::temp_directory_path();
    // The pid zero-padded: paths of one length in every process, so that runs with one seed
    // take the same branches.
    char folder[32];
    std::snprintf(folder, sizeof folder, "tessel-fuzz-%010d", static_cast<int>(getpid()));
    folder_ = root / folder;
    fs::remove_all(folder_, ec);
    fs::create_directories(folder_);
    for (const std::string& n : neighbours) std::ofstream(folder_ / n, std::ios::binary);
    path_ = folder_ / name;
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile() {
    std::error_code ec;
    std::filesystem::remove_all(folder_, ec);
  }

  const std::filesystem::path& write(const uint8_t* data, size_t size) const {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    out.close();
    if (!out) {
      std::fprintf(stderr, "fuzz: cannot write the input to %s\n", path_.c_str());
      std::abort();  // the machine's fault, not a finding: stop loudly rather than test nothing
    }
    return path_;
  }

 private:
  std::filesystem::path folder_;
  std::filesystem::path path_;
};

// An invariant the reader documents; a violation is a finding, reported as a crash.
inline void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz: invariant broken: %s\n", what);
    std::abort();
  }
}

}  // namespace tessel::fuzz
