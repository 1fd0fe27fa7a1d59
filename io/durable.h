// Files that survive a crash whatever the instant: written to "<path>.partial", made durable
// (fsync), renamed into place and the folder synced, so a reader sees the old file or the new one,
// never a half. And the crash points tests and scripts/kill-trials use to die at each write.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace tessel::io {

// Writes `bytes` to `path` through "<path>.partial" (fsync, rename, fsync of the folder). Throws
// tessel::Error naming `what` ("checkpoint", "summary") and the file: a full disk says so.
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes,
                           const std::string& what);

// Copies `from` to `to` the same way (best.h5 from last.h5).
void copy_file_atomically(const std::filesystem::path& from, const std::filesystem::path& to,
                          const std::string& what);

// Appends `line` and a newline to an append-only log (metrics.csv, events.jsonl) in one write.
void append_line(const std::filesystem::path& path, std::string_view line);

// Crash injection for the crash-safety tests: with TESSEL_CRASH_AT=n in the environment, the n-th
// crash point the process passes prints "tessel: crash point n: <name>" to stderr and kills the
// process (SIGKILL: no destructor, no flush, as a power cut or the OOM killer). Without it,
// nothing.
void crash_point(std::string_view name);

}  // namespace tessel::io
