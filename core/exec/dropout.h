// Dropout inside tiled segments (DESIGN.md "Tail": the mask must come from the global position,
// so that a tile's recompute, and a plain run on the whole image, see the same mask). Each
// element's keep decision is a hash of the step's seed, the node and the element's channel, row
// and column in its whole activation (murmur3's 32-bit finaliser, chained): no random state, so
// any tile of any partition draws exactly the whole image's mask.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "core/graph/graph.h"
#include "core/graph/window.h"

namespace tessel::core {

// While one lives, spatial dropout is active with this seed on this thread (a training step:
// core/exec/executor.h's train_step). Without one, spatial dropout is the identity (evaluation).
class DropoutScope {
 public:
  explicit DropoutScope(uint64_t seed);
  ~DropoutScope();
  DropoutScope(const DropoutScope&) = delete;
  DropoutScope& operator=(const DropoutScope&) = delete;

 private:
  bool previous_active_;
  uint64_t previous_seed_;
};

// Node `dropout` (Pointwise::kDropout) on `x` (N×C×h×w), which holds `region` of its whole
// activation: zeroes each element with probability p and scales the rest by 1 / (1 − p), the
// decision a function of the scope's seed, the node and the element's global position.
at::Tensor spatial_dropout(const Node& dropout, const at::Tensor& x, const Region& region);

// The keep mask itself (1 kept, 0 dropped) for `channels` × `region`, as int64 on `device`.
at::Tensor dropout_keep(uint64_t seed, int64_t node, double p, int64_t channels,
                        const Region& region, const at::Device& device);

}  // namespace tessel::core
