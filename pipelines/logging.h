// Logging set-up shared by the CLI and the GUI: one spdlog logger, a console sink, optional files.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

namespace spdlog::sinks {
class sink;
}  // namespace spdlog::sinks

namespace tessel::pipelines {

// Levels as users type them: trace, debug, info, warn, error, off. Throws tessel::Error on others.
void setup_logging(const std::string& level, const std::filesystem::path& log_file = {});

// Adds a file sink for the rest of the process (`--log-file`), keeping the console and other
// sinks. Throws tessel::Error when the file cannot be written.
void add_log_file(const std::filesystem::path& file);

// A run's log file (<run>/train.log): its sink is in the default logger while this lives and
// removed when it goes, so that runs one after another in one process (the GUI) each log their
// own lines once. Throws tessel::Error when the file cannot be written.
class RunLogFile {
 public:
  explicit RunLogFile(const std::filesystem::path& file);
  ~RunLogFile();
  RunLogFile(const RunLogFile&) = delete;
  RunLogFile& operator=(const RunLogFile&) = delete;

 private:
  std::shared_ptr<spdlog::sinks::sink> sink_;
};

// The run log files open now (for tests: one per run in progress, none after).
int run_log_files();

}  // namespace tessel::pipelines
