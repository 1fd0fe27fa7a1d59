// Files a user names (a config, a manifest, a region of interest, a checkpoint, an ONNX model, a
// slide): taken only when they are regular files, so that a named pipe never blocks a command
// and a device such as /dev/zero never fills memory, and read whole only up to a bound.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace tessel::io {

// not_a_regular_file's reasons that callers word their own way ("checkpoint X does not exist").
inline constexpr std::string_view kNoSuchFile = "no such file";
inline constexpr std::string_view kIsAFolder = "it is a folder, not a file";

// Why `path` is not a regular file (symbolic links followed), in words for the user — "no such
// file", "it is a folder, not a file", "it is a named pipe (FIFO), not a file", ... — or "" when
// it is one. Never opens the file.
std::string not_a_regular_file(const std::filesystem::path& path);

// The whole of the regular file `path`. Throws tessel::Error starting with `refusal` (e.g.
// "cannot read manifest m.csv: ") when it is not a regular file, cannot be read, or holds more
// than `max_bytes` (the error says how much it holds and the bound).
std::string read_user_file(const std::filesystem::path& path, const std::string& refusal,
                           int64_t max_bytes);

// "" when `text` is well-formed UTF-8; otherwise where it is not, for a message: "byte 12 (0xE9)
// is not UTF-8". Tessel's records (JSON, HDF5 names) hold UTF-8 only, so text a
// user gives (labels, names, paths) is refused where it enters rather than deep in a run.
std::string utf8_problem(std::string_view text);

inline constexpr int64_t kMaxTextFileBytes = int64_t{256} << 20;  // manifests, GeoJSON
inline constexpr int64_t kMaxConfigBytes = int64_t{16} << 20;     // YAML and JSON configs

}  // namespace tessel::io
