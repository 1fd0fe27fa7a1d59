#include "pipelines/run_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/durable.h"

namespace tessel::pipelines {
namespace {

// Quoted where a reader would otherwise split or trim it: a comma, a quote, a line break, or
// spaces at either end (a manifest trims unquoted cells).
std::string csv_field(const std::string& value) {
  const bool spaced = !value.empty() && (value.front() == ' ' || value.back() == ' ');
  if (!spaced && value.find_first_of(",\"\n\r") == std::string::npos) return value;
  std::string quoted = "\"";
  for (char c : value) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string csv_line(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) line += (i ? "," : "") + csv_field(fields[i]);
  return line;
}

std::string holder_line() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::array<char, 32> since{};
  std::strftime(since.data(), since.size(), "%Y-%m-%d %H:%M:%S", &utc);
  return fmt::format("host {} pid {} since {} UTC\n", host.data(), getpid(), since.data());
}

std::string read_holder(int fd) {
  std::array<char, 512> text{};
  const ssize_t n = pread(fd, text.data(), text.size() - 1, 0);
  std::string line(text.data(), n > 0 ? static_cast<size_t>(n) : 0);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\0')) line.pop_back();
  return line.empty() ? "a process that has not yet named itself" : line;
}

}  // namespace

RunLock::RunLock(const std::filesystem::path& folder) {
  const std::filesystem::path path = folder / "run.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw Error("cannot lock the run folder " + folder.string() + ": " + path.string() + ": " +
                std::strerror(errno));
  }
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const std::string holder = read_holder(fd_);
    ::close(fd_);
    if (error == EWOULDBLOCK) {
      throw Error("the run folder " + folder.string() + " is in use by another training run (" +
                  holder + "); wait for it to end, stop it, or choose another output");
    }
    throw Error("cannot lock the run folder " + folder.string() + ": " + path.string() + ": " +
                std::strerror(error));
  }
  const std::string line = holder_line();
  if (ftruncate(fd_, 0) != 0 ||
      pwrite(fd_, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
    spdlog::warn("{}: could not record this run as the holder: {}", path.string(),
                 std::strerror(errno));
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

void write_text_atomically(const std::filesystem::path& path, const std::string& text) {
  io::write_file_atomically(path, text, path.filename().string());
}

std::vector<std::string> repair_log(const std::filesystem::path& path) {
  std::vector<std::string> lines;
  if (!std::filesystem::exists(path)) return lines;
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in && !in.eof()) throw Error("cannot read " + path.string());
  const size_t end = text.rfind('\n');
  const size_t whole = end == std::string::npos ? 0 : end + 1;
  if (whole != text.size()) {
    spdlog::warn("{}: dropped a line the interrupted run left half written", path.string());
    write_text_atomically(path, text.substr(0, whole));
  }
  for (size_t begin = 0; begin < whole;) {
    const size_t next = text.find('\n', begin);
    lines.push_back(text.substr(begin, next - begin));
    begin = next + 1;
  }
  return lines;
}

std::string csv_row(const std::vector<std::string>& fields) { return csv_line(fields); }

void repair_metrics(const std::filesystem::path& path, const std::vector<std::string>& header,
                    int64_t epochs, const std::vector<std::string>& last_row) {
  const std::vector<std::string> lines = repair_log(path);
  std::vector<std::string> kept{csv_line(header)};
  int64_t last = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string epoch = lines[i].substr(0, lines[i].find(','));
    int64_t n = 0;
    try {
      n = std::stoll(epoch);
    } catch (const std::exception&) {
      throw Error(path.string() + " line " + std::to_string(i + 1) +
                  ": not a row of the epoch log (" + lines[i].substr(0, 40) + ")");
    }
    if (n > epochs) continue;  // an epoch last.h5 does not hold
    kept.push_back(lines[i]);
    last = std::max(last, n);
  }
  if (last < epochs && !last_row.empty() && last_row.front() == std::to_string(epochs)) {
    spdlog::warn("{}: epoch {}'s row was lost in a crash; written from last.h5", path.string(),
                 epochs);
    kept.push_back(csv_line(last_row));
  }
  if (kept == lines) return;
  std::string text;
  for (const std::string& line : kept) text += line + "\n";
  write_text_atomically(path, text);
}

namespace {

// Whether an events.jsonl line records work after last.h5's position (`epochs` done, `slides` of
// the next one trained), which the resumed run does again: epoch and gradient-exchange lines of
// later epochs, train slide lines from the position on.
bool after_position(const nlohmann::json& event, int64_t epochs, int64_t slides) {
  if (!event.is_object() || !event.contains("type") || !event.contains("epoch") ||
      !event["epoch"].is_number_integer()) {
    return false;
  }
  const auto epoch = event["epoch"].get<int64_t>();  // 1-based
  if (event["type"] != "slide") return epoch > epochs;
  if (epoch != epochs + 1) return epoch > epochs + 1;
  return event.contains("index") && event["index"].is_number_integer() &&
         event["index"].get<int64_t>() >= slides;
}

}  // namespace

void repair_events(const std::filesystem::path& path, int64_t epochs, int64_t slides,
                   const nlohmann::json& last_event) {
  const std::vector<std::string> lines = repair_log(path);
  std::vector<std::string> kept;
  bool found = false;
  for (const std::string& line : lines) {
    const nlohmann::json event = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (after_position(event, epochs, slides)) continue;
    if (event.is_object() && event.value("type", "") == "epoch" && event.contains("epoch") &&
        event["epoch"] == epochs) {
      found = true;
    }
    kept.push_back(line);
  }
  if (!found && epochs > 0 && last_event.is_object() && last_event.contains("epoch") &&
      last_event["epoch"] == epochs) {
    kept.push_back(last_event.dump());
  }
  if (kept == lines) return;
  std::string text;
  for (const std::string& line : kept) text += line + "\n";
  write_text_atomically(path, text);
}

void remove_partial_files(const std::filesystem::path& folder) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
    if (entry.path().extension() == ".partial") {
      std::filesystem::remove(entry.path(), error);
      spdlog::info("removed {}, left by an interrupted write", entry.path().string());
    }
  }
}

CsvLog::CsvLog(std::filesystem::path path, std::vector<std::string> header)
    : path_(std::move(path)) {
  // A log a crashed run left: its half-written last line goes, so the next row starts a line.
  if (repair_log(path_).empty()) io::append_line(path_, csv_line(header));
}

void CsvLog::write(const std::vector<std::string>& row) { io::append_line(path_, csv_line(row)); }

JsonLines::JsonLines(std::filesystem::path path) : path_(std::move(path)) { repair_log(path_); }

void JsonLines::write(const nlohmann::json& object) {
  // Text that is not UTF-8 (a path from the command line) is written with U+FFFD in its place:
  // a record, not a reason to end a run.
  io::append_line(path_, object.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace tessel::pipelines
