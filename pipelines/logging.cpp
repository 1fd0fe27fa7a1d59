#include "pipelines/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
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

}  // namespace

void setup_logging(const std::string& level, const std::filesystem::path& log_file) {
  const auto parsed = parse_level(level);
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("tessel", console);
  logger->set_level(parsed);
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_default_logger(logger);
  if (!log_file.empty()) add_log_file(log_file);
}

void add_log_file(const std::filesystem::path& file) {
  std::shared_ptr<spdlog::sinks::basic_file_sink_mt> sink;
  try {
    if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
    sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(file.string());
  } catch (const std::exception& e) {
    throw Error("cannot write the log file " + file.string() + ": " + e.what());
  }
  sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  auto logger = spdlog::default_logger();
  logger->sinks().push_back(sink);
  // Files keep everything at the logger's level; flush on warnings so a crash loses little.
  logger->flush_on(spdlog::level::warn);
}

}  // namespace tessel::pipelines
