// Shrinking RGB by a real scale ≥ 1 with a box filter (area averaging), in fixed point, so that a
// window's pixels are bit for bit the same pixels of a whole-image shrink: each output pixel is a
// function of its own footprint in the source and nothing else (not of where a window starts).
// libvips' reduce/affine would interpolate with a sub-pixel phase that depends on the crop
// origin, which the engine's exactness cannot afford.
#pragma once

#include <cstdint>
#include <vector>

#include "core/graph/window.h"

namespace tessel::io {

// Output range `out` → the source range its pixels average: [floor(a·scale), ceil(b·scale)),
// clipped to the source's [0, source_size).
core::Window shrink_footprint(core::Window out, double scale, int64_t source_size);
core::Region shrink_footprint(const core::Region& out, double scale, int64_t source_height,
                              int64_t source_width);

// Output pixels `out` of the shrink of a source image (height × width) by `scale`, from
// `source`: interleaved RGB of exactly shrink_footprint(out, ...) of it. Writes interleaved RGB
// of `out` to `rgb` (3 · out.area() bytes). Output pixel (x, y) is the mean of source area
// [x·scale, (x+1)·scale) × [y·scale, (y+1)·scale) (clipped to the source), each source pixel
// weighted by its overlap, rounded to nearest.
void shrink_rgb(const uint8_t* source, const core::Region& out, double scale, int64_t source_height,
                int64_t source_width, uint8_t* rgb);

}  // namespace tessel::io
