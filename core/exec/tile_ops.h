// The tensor layer under the executor (its op facts, such as needed_input, are in
// core/graph/graph.h): one node on a whole activation (the plain reference and
// the head), or on one tile with explicit border padding (DESIGN.md rules 1-4).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "core/graph/graph.h"
#include "core/graph/window.h"
#include "core/store/tile_tensor.h"

namespace tessel::core {

// Node `node` on whole activations, with the op's own padding and ceil mode; `training`: batch
// norm uses (and updates) the batch statistics, else its running ones.
at::Tensor forward_plain(const Node& node, const std::vector<at::Tensor>& inputs,
                         bool training = false);

// Node `node` over output region `out` (non-empty, inside its activation), from producers' tiles
// that cover at least the clipped windows `out` needs. `input_shapes[i]` is producer i's whole
// activation. Pads only where a window crosses the true border: the op pads the part that is
// equal on both sides of an axis itself, the rest is padded explicitly. With
// `may_overwrite_input` (the caller owns inputs[0] and nothing else reads it) a pointwise op
// runs in place when autograd is off. Not for barriers: the executor runs those with their
// statistic (core/exec/barrier.h).
at::Tensor forward_tile(const Node& node, const Region& out, const std::vector<TileTensor>& inputs,
                        const std::vector<Shape>& input_shapes, bool may_overwrite_input = false);

}  // namespace tessel::core
