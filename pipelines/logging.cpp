#include "pipelines/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>

#include "core/error.h"

namespace tessel::pipelines {

namespace {

spdlog::level::level_enum parse_level(const std::string& level) {
  static constexpr std::array<std::pair<const char*, spdlog::level::level_enum>, 6> kLevels = {{
      {"trace", spdlog::level::trace},
      {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},
      {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},
      {"off", spdlog::level::off},
  }};
  for (const auto& [name, value] : kLevels) {
    if (level == name) return value;
  }
  throw Error("unknown log level '" + level + "': use trace, debug, info, warn, error or off");
}

std::shared_ptr<spdlog::sinks::basic_file_sink_mt> open_file_sink(
    const std::filesystem::path& file) {
  std::shared_ptr<spdlog::sinks::basic_file_sink_mt> sink;
  try {
    if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
    sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(file.string());
  } catch (const std::exception& e) {
    throw Error("cannot write the log file " + file.string() + ": " + e.what());
  }
  sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  return sink;
}

// The runs' file sinks hang off one sink of the logger: a logger's own sink list is not safe to
// change while other threads log (the GUI's viewer and thumbnail threads), a dist_sink's
// add_sink/remove_sink take its lock.
std::shared_ptr<spdlog::sinks::dist_sink_mt> run_files() {
  static const auto sinks = std::make_shared<spdlog::sinks::dist_sink_mt>();
  return sinks;
}

std::atomic<int> g_run_log_files{0};

// The default logger with run_files() among its sinks (setup_logging puts it there; a process
// that never called it, such as a test, gets it at its first run).
std::shared_ptr<spdlog::logger> logger_with_run_files() {
  auto logger = spdlog::default_logger();
  auto& sinks = logger->sinks();
  if (std::find(sinks.begin(), sinks.end(), run_files()) == sinks.end()) {
    sinks.push_back(run_files());
  }
  return logger;
}

}  // namespace

void setup_logging(const std::string& level, const std::filesystem::path& log_file) {
  const auto parsed = parse_level(level);
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger =
      std::make_shared<spdlog::logger>("tessel", spdlog::sinks_init_list{console, run_files()});
  logger->set_level(parsed);
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_default_logger(logger);
  if (!log_file.empty()) add_log_file(log_file);
}

void add_log_file(const std::filesystem::path& file) {
  auto sink = open_file_sink(file);
  auto logger = spdlog::default_logger();
  logger->sinks().push_back(sink);
  // Files keep everything at the logger's level; flush on warnings so a crash loses little.
  logger->flush_on(spdlog::level::warn);
}

RunLogFile::RunLogFile(const std::filesystem::path& file) : sink_(open_file_sink(file)) {
  logger_with_run_files()->flush_on(spdlog::level::warn);  // as add_log_file
  run_files()->add_sink(sink_);
  ++g_run_log_files;
}

RunLogFile::~RunLogFile() {
  run_files()->remove_sink(sink_);
  sink_->flush();
  --g_run_log_files;
}

int run_log_files() { return g_run_log_files; }

}  // namespace tessel::pipelines
