#include "pipelines/run_files.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tessel::pipelines {
namespace {

std::string csv_field(const std::string& value) {
  if (value.find_first_of(",\"\n") == std::string::npos) return value;
  std::string quoted = "\"";
  for (char c : value) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string csv_line(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) line += (i ? "," : "") + csv_field(fields[i]);
  return line;
}

std::ofstream open_append(const std::filesystem::path& path) {
  std::ofstream out(path, std::ios::app);
  if (!out) throw Error("cannot write " + path.string() + " (is the folder writable?)");
  return out;
}

}  // namespace

void write_text_atomically(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::path partial = path;
  partial += ".partial";
  {
    std::ofstream out(partial, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(partial, ignored);
      throw Error("cannot write " + path.string() + " (is the folder writable, the disk full?)");
    }
  }
  std::error_code error;
  std::filesystem::rename(partial, path, error);
  if (error) throw Error("cannot write " + path.string() + ": " + error.message());
}

CsvLog::CsvLog(std::filesystem::path path, std::vector<std::string> header)
    : path_(std::move(path)) {
  const bool fresh = !std::filesystem::exists(path_) || std::filesystem::file_size(path_) == 0;
  out_ = open_append(path_);
  if (fresh) out_ << csv_line(header) << "\n" << std::flush;
}

void CsvLog::write(const std::vector<std::string>& row) {
  out_ << csv_line(row) << "\n" << std::flush;
  if (!out_) throw Error("cannot write " + path_.string() + " (is the disk full?)");
}

JsonLines::JsonLines(std::filesystem::path path) : path_(std::move(path)) {
  out_ = open_append(path_);
}

void JsonLines::write(const nlohmann::json& object) {
  out_ << object.dump() << "\n" << std::flush;
  if (!out_) throw Error("cannot write " + path_.string() + " (is the disk full?)");
}

}  // namespace tessel::pipelines
