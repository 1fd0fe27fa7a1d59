// Argument parsing shared by the CLI's subcommands.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace tessel::app {

// "20000x20000" (WIDTHxHEIGHT) → {height, width}; throws tessel::Error otherwise.
std::pair<int64_t, int64_t> parse_size(const std::string& text);

// --keep-inner-checkpoints (tessel plan, bench step).
inline constexpr const char* kKeepInnerCheckpointsHelp =
    "Keep every inner checkpoint of a segment with barriers (the comparison point); by default "
    "the planner recomputes those that cost less to recompute than to move (DELTA per inner "
    "checkpoint)";

}  // namespace tessel::app
