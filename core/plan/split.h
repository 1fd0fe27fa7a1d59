// A training step split over ranks (slide-parallel, docs/slide-parallel.md), as the plan sees
// it: each rank runs its share of every segment's tiles, and what they computed is summed over
// the ranks. Plain arithmetic on the plan; the executor's Step does the sums.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "core/plan/plan.h"

namespace tessel::core {

// What the busiest of `ranks` ranks gives to the exchanges between them in one training step
// (the executor's StepResult::summed_bytes), by what it exchanges.
struct SplitBytes {
  // Forward: its shares of every segment's output checkpoint (an all-gather: the tiles it runs,
  // packed), or its streaming global average's sums.
  int64_t checkpoints = 0;
  // Backward: every segment's input gradient, summed whole (the image's only where the plan
  // keeps it).
  int64_t input_gradients = 0;
  // Sub-segments with barriers: its shares of each kept inner checkpoint after its forward pass
  // (again where the backward rebuilds it), and the checkpoint's gradient, summed whole before
  // its barriers' corrections.
  int64_t inner_checkpoints = 0;
  // After the step: what the step added to every parameter's gradient.
  int64_t parameter_gradients = 0;
  int64_t total() const {
    return checkpoints + input_gradients + inner_checkpoints + parameter_gradients;
  }
};
SplitBytes split_bytes(const Graph& graph, const Plan& plan, int ranks, bool training = true);

// The regions `region_of(t)` of the tiles of `part` that `rank` of `ranks` runs (rank_tiles),
// empty ones left out: what a rank gives to an all-gather (the executor's
// Step::gather_over_ranks).
std::vector<Region> rank_regions(const Partition& part, int rank, int ranks,
                                 const std::function<Region(int64_t)>& region_of);

// Why a step of `plan` cannot be split over ranks yet, in words ("" where it can): offloaded
// checkpoints (inner ones too), shared rows, a streaming global max or attention head.
std::string split_refusal(const Graph& graph, const Plan& plan);

// What `tessel plan --ranks P` adds to the plan's table: each rank's tiles and what it sums per
// step, or why the step cannot be split.
std::string split_summary(const Graph& graph, const Plan& plan, int ranks);

// The fewest tiles per axis (planning's count: rows, or a grid's rows and columns) that give
// each of `ranks` ranks a tile of every pass.
int64_t fewest_count_for_ranks(Strategy strategy, int ranks);

}  // namespace tessel::core
