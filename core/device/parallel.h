// Parallel loops for the engine's own CPU kernels (tile_ops.cpp's transposes), over LibTorch's
// CPU threads: the OpenMP pool that ATen's ops use, so the two never oversubscribe the cores.
#pragma once

#include <cstdint>
#include <functional>

namespace tessel::core {

// Runs f(b, e) over contiguous parts of [begin, end), one per thread of the pool, and waits;
// rethrows the first exception a part threw. Runs f(begin, end) on the calling thread inside
// another parallel region, with one thread, or for a single item.
//
// Not at::parallel_for: that is an inline template whose OpenMP region exists only in a
// translation unit compiled with -fopenmp (ATen/ParallelOpenMP.h); ours are not, so in the
// engine it ran every loop on one thread while the other spun (bench/NOTES.md, session 35).
// This file's .cpp alone is compiled with -fopenmp (core/CMakeLists.txt).
void parallel_ranges(int64_t begin, int64_t end, const std::function<void(int64_t, int64_t)>& f);

}  // namespace tessel::core
