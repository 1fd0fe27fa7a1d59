// The tensor layer under the executor (its op facts, such as needed_input, are in
// core/graph/graph.h): one node on a whole activation (the plain reference and
// the head), or on one tile with explicit border padding (DESIGN.md rules 1-4).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "core/graph/graph.h"
#include "core/graph/window.h"

namespace tessel::core {

// A piece of one activation: `tensor` (N×C×h×w) holds `region` (global coordinates).
struct TileTensor {
  at::Tensor tensor;
  Region region;
};

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

// dst.copy_(src) for tensors of the same sizes, also where one is channels-first and the other
// channels-last (views of either included): ATen's strided copy takes 0.8-1.6 s per GiB
// between the two on 2 cores, against 0.09 s for a plain copy; this one transposes each row in
// cache-sized blocks (0.33-0.36 s per GiB). Not for autograd (a plain copy there).
void copy_tile(const at::Tensor& dst, const at::Tensor& src);

// `t` restricted to `want` (which must lie inside t.region). A view, no copy.
at::Tensor crop(const TileTensor& t, const Region& want);

}  // namespace tessel::core
