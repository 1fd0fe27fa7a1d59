// Helpers of the first-law tests (tiled = plain autograd): float64 images and fixed partitions.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "core/device.h"
#include "core/planner.h"

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
  o.tiles_y = ty;
  o.tiles_x = tx;
  return o;
}

}  // namespace tessel::core::test
