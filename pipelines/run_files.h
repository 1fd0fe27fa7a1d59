// The files of a run folder: text written whole (temporary name + rename), and append-only logs
// (metrics.csv, events.jsonl) flushed line by line, so a crash loses at most the line in flight.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace tessel::pipelines {

// Writes `text` to `path` through "<path>.partial" and a rename. Throws tessel::Error.
void write_text_atomically(const std::filesystem::path& path, const std::string& text);

// A CSV file with a header; appends to an existing file with the same header (a resumed run).
class CsvLog {
 public:
  CsvLog(std::filesystem::path path, std::vector<std::string> header);
  void write(const std::vector<std::string>& row);

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

// One JSON object per line, appended.
class JsonLines {
 public:
  explicit JsonLines(std::filesystem::path path);
  void write(const nlohmann::json& object);

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace tessel::pipelines
