// The files of a run folder: text written whole (io/durable.h: temporary name, fsync, rename), and
// append-only logs (metrics.csv, events.jsonl) written a line at a time, so a crash leaves at most
// the line in flight half written, which repair_log drops.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace tessel::pipelines {

// Writes `text` to `path` through "<path>.partial" and a rename. Throws tessel::Error.
void write_text_atomically(const std::filesystem::path& path, const std::string& text);

// The whole lines of a log; a half-written last line (a crash mid-write) is cut from the file.
std::vector<std::string> repair_log(const std::filesystem::path& path);

// One CSV line (fields quoted where needed: commas, quotes, line breaks, spaces at either end), as
// CsvLog and the GUI's manifest write it.
std::string csv_row(const std::vector<std::string>& fields);

// The epoch logs as last.h5 records them after `epochs` completed epochs, for a resumed run: a
// half-written line cut, rows or lines of later epochs dropped, and the last epoch's (kept in
// last.h5's run state) appended when a crash between last.h5 and the log lost it.
// metrics.csv: the first field of a row is its epoch. events.jsonl: {"type": "epoch", "epoch": n};
// its train slide lines ({"type": "slide", "epoch": n, "index": i}) from the position on (`slides`
// of epoch `epochs` + 1 trained) are dropped too, since the resumed run trains those slides again.
void repair_metrics(const std::filesystem::path& path, const std::vector<std::string>& header,
                    int64_t epochs, const std::vector<std::string>& last_row);
void repair_events(const std::filesystem::path& path, int64_t epochs, int64_t slides,
                   const nlohmann::json& last_event);

// Removes the "*.partial" files a crash left in `folder` (not recursive).
void remove_partial_files(const std::filesystem::path& folder);

// A CSV file with a header; appends to an existing file with the same header (a resumed run).
class CsvLog {
 public:
  CsvLog(std::filesystem::path path, std::vector<std::string> header);
  void write(const std::vector<std::string>& row);

 private:
  std::filesystem::path path_;
};

// The advisory lock of a run folder (`run.lock`, flock): one training run writes a folder at a
// time, whichever program started it (the CLI, the GUI, another host on a shared file system).
// The file names its holder (host, pid, start time) for the refusal's message; the lock itself
// goes with its process, so a folder a killed run held is free again (the file alone, left
// behind, is no lock). Throws tessel::Error naming the holder when the folder is taken.
class RunLock {
 public:
  explicit RunLock(const std::filesystem::path& folder);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

// One JSON object per line, appended.
class JsonLines {
 public:
  explicit JsonLines(std::filesystem::path path);
  void write(const nlohmann::json& object);

 private:
  std::filesystem::path path_;
};

}  // namespace tessel::pipelines
