// Argument parsing shared by the CLI's subcommands.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <utility>

namespace tessel::core {
struct OffloadPrices;
}

namespace tessel::app {

// The longest image side the CLI takes: 2^20 px, three times a 75 mm slide scanned at 0.25 µm/px.
inline constexpr int64_t kMaxImageSide = int64_t{1} << 20;

// "20000x20000" (WIDTHxHEIGHT) → {height, width}, each side 1 to kMaxImageSide; throws
// tessel::Error otherwise.
std::pair<int64_t, int64_t> parse_size(const std::string& text);

// --budget and the like: a size parse_bytes reads, more than zero (a CLI11 check: a usage error).
CLI::Validator positive_bytes();

// "NS_PER_BYTE,GFLOPS" (--prices of tessel plan and bench step) as the planner's offload prices,
// marked given. Throws tessel::Error naming the text when it is not two positive numbers.
core::OffloadPrices parse_prices(const std::string& text);

// --prices (tessel plan, bench step).
inline constexpr const char* kPricesHelp =
    "NS_PER_BYTE,GFLOPS: plan at these offload prices (nanoseconds to move a byte out and back, "
    "GFLOP/s of recompute) instead of this machine's measured ones: the same plan every run, or "
    "another machine's, such as a GPU's from its bench step JSON";

// --keep-inner-checkpoints (tessel plan, bench step).
inline constexpr const char* kKeepInnerCheckpointsHelp =
    "Keep every inner checkpoint of a segment with barriers (the comparison point); by default "
    "the planner recomputes those that cost less to recompute than to move (DELTA per inner "
    "checkpoint)";

}  // namespace tessel::app
