// Logging set-up shared by the CLI and the GUI: one spdlog logger, a console sink, optional files.
#pragma once

#include <filesystem>
#include <string>

namespace tessel::pipelines {

// Levels as users type them: trace, debug, info, warn, error, off. Throws tessel::Error on others.
void setup_logging(const std::string& level, const std::filesystem::path& log_file = {});

// Adds a file sink for a run directory (<dir>/<name>), keeping the console and other sinks.
void add_log_file(const std::filesystem::path& file);

}  // namespace tessel::pipelines
