// A piece of one activation as a tensor, and the view of a part of it: what the executor's
// tiles and the stored activations' blocks are.
#pragma once

#include <ATen/core/Tensor.h>

#include "core/error.h"
#include "core/graph/window.h"

namespace tessel::core {

// A piece of one activation: `tensor` (N×C×h×w) holds `region` (global coordinates).
struct TileTensor {
  at::Tensor tensor;
  Region region;
};

// `t` restricted to `want` (which must lie inside t.region). A view, no copy.
inline at::Tensor crop(const TileTensor& t, const Region& want) {
  if (want.empty()) {
    return t.tensor.slice(2, 0, 0).slice(3, 0, 0);
  }
  if (want.y.begin < t.region.y.begin || want.y.end > t.region.y.end ||
      want.x.begin < t.region.x.begin || want.x.end > t.region.x.end) {
    throw Error("internal: crop " + to_string(want) + " outside the tile " + to_string(t.region));
  }
  // Slice only the axes that shrink: under autograd every slice's backward allocates and
  // zero-fills a gradient of the whole tile (measured: a one-tile vgg-mini 1024² step spent
  // 0.3 s of 1.3 s in such no-op slices).
  at::Tensor out = t.tensor;
  if (want.y != t.region.y) {
    out = out.slice(2, want.y.begin - t.region.y.begin, want.y.end - t.region.y.begin);
  }
  if (want.x != t.region.x) {
    out = out.slice(3, want.x.begin - t.region.x.begin, want.x.end - t.region.x.begin);
  }
  return out;
}

}  // namespace tessel::core
