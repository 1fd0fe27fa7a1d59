// Argument parsing shared by the CLI's subcommands.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace tessel::app {

// "20000x20000" (WIDTHxHEIGHT) → {height, width}; throws tessel::Error otherwise.
std::pair<int64_t, int64_t> parse_size(const std::string& text);

}  // namespace tessel::app
