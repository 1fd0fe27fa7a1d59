// Which tiles of a pass each rank of a slide-parallel step runs (docs/slide-parallel.md): plain
// arithmetic, shared by the planner's prediction of what the ranks exchange (core/plan/split.h)
// and the executor's split (core/exec/ranks.h).
#pragma once

#include <cstdint>
#include <vector>

namespace tessel::core {

// The tiles of a pass that `rank` of `ranks` runs: a contiguous run of the pass's tiles in
// row-major order (rows of tiles, so a rank's neighbours are few), as even as counts allow.
// [begin, end); empty where there are fewer tiles than ranks.
struct TileRange {
  int64_t begin = 0, end = 0;
  bool has(int64_t t) const { return t >= begin && t < end; }
};
TileRange rank_tiles(int64_t tiles, int rank, int ranks);

// The tiles of a pass divided among `ranks` by their work (`work`, one per tile, row-major; a
// glass tile's is 0): ranks + 1 tile indices, each rank's contiguous run ending where the work
// up to it comes nearest the ranks' parts so far (a tie to the earlier rank). Empty where the
// pass does no work (then by count).
std::vector<int64_t> shares_by_work(const std::vector<double>& work, int ranks);

}  // namespace tessel::core
