// Helpers of the first-law tests (tiled = plain autograd): float64 images and fixed partitions.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <optional>
#include <vector>

#include "core/device/device.h"
#include "core/error.h"
#include "core/exec/gradcheck.h"
#include "core/plan/planner.h"

namespace tessel::core::test {

// Float64 runs agree with plain autograd to this relative error.
constexpr double kTolerance = 1e-10;

// A float64 N(0, 1) image on the tests' device, the same for a seed on every device.
inline at::Tensor random_image(int64_t channels, int64_t h, int64_t w, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn({1, channels, h, w}, gen, at::kDouble).to(test_device());
}

// A float64 plan of `ty` × `tx` tiles per segment.
inline PlanOptions fixed_tiles(Strategy s, int64_t ty, int64_t tx) {
  PlanOptions o;
  o.strategy = s;
  o.element_bytes = 8;
  o.overrides.tiles_y = ty;
  o.overrides.tiles_x = tx;
  return o;
}

// The plan for `in` under `o` (fixed tiles, no budget), with o's checkpoints; a checkpoint drawn
// after the last tiled layer is not a candidate, and then the plan is made (and `o` left)
// without them.
inline Plan plan_drawn(const Graph& g, const Shape& in, PlanOptions& o) {
  try {
    return make_plan(g, in, 0, o);
  } catch (const tessel::Error&) {
    o.overrides.checkpoints.reset();
    return make_plan(g, in, 0, o);
  }
}

// Every checkpoint candidate the planner accepts for `g` under `o` (the last ones may lie past
// the last tiled layer).
inline std::vector<NodeId> every_checkpoint(const Graph& g, const Shape& in, PlanOptions o = {}) {
  std::vector<NodeId> c = checkpoint_candidates(g);
  while (!c.empty()) {
    o.overrides.checkpoints = c;
    try {
      (void)make_plan(g, in, 0, o);
      return c;
    } catch (const tessel::Error&) {
      c.pop_back();
    }
  }
  return c;
}

// The plan under the largest budget (from 64 MiB down, each 7/8 of the last) at which the planner
// offloads, or the last it made before one was refused (which then does not offload).
inline Plan first_offloading_plan(const Graph& g, const Shape& in, const PlanOptions& o) {
  Plan plan;
  for (int64_t b = int64_t{64} << 20; b > (int64_t{1} << 16); b = b * 7 / 8) {
    try {
      plan = make_plan(g, in, b, o);
    } catch (const tessel::Error&) {
      break;
    }
    if (plan.offloads()) break;
  }
  return plan;
}

// Whether `g` has parameters: a check of a network without any must ask for the image's
// gradient (PlanOptions::input_gradient), the only gradient such a step has.
inline bool has_parameters(Graph& g) { return !g.module().parameters().empty(); }

// The plan training makes for `in` under the largest budget (of a few, each 2/3 of the last,
// from the unbudgeted plan's peak) at which it tiles: the budget search's own schemes (kept
// graphs, rounds, inner checkpoints, offload). None when no budget tiles before one is refused.
inline std::optional<Plan> tiling_budget_plan(const Graph& g, const Shape& in, PlanOptions o) {
  o.overrides.tiles_y.reset();
  o.overrides.tiles_x.reset();
  o.overrides.tile_size.reset();
  o.overrides.checkpoints.reset();
  int64_t budget = make_plan(g, in, 0, o).predicted.total();
  for (int i = 0; i < 12; ++i) {
    budget = budget * 2 / 3;
    try {
      Plan plan = make_plan(g, in, budget, o);
      if (tiles(plan)) return plan;
    } catch (const tessel::Error&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

}  // namespace tessel::core::test
