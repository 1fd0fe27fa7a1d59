// A training step split over ranks (slide-parallel, docs/slide-parallel.md), as the plan sees
// it: each rank runs its share of every segment's tiles, and what they computed is summed over
// the ranks. Plain arithmetic on the plan; the executor's Step does the sums.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "core/plan/glass.h"
#include "core/plan/plan.h"
#include "core/plan/rank_tiles.h"

namespace tessel::core {

// Which tiles of pass `pass` of segment `index` `rank` runs: its own slot where the pass's tiles
// divide among the ranks, so rank q runs the q-th band of rows of every such pass and what it
// computes is, but for a halo, what it reads next; else the slots turned by the segment's index
// (a one-tile segment falls to each rank in turn). A slot's tiles are the segment's shares for
// `ranks` ranks where it has them (Segment::forward_shares, backward_shares: by work), else
// rank_tiles's (by count).
enum class Pass { kForward, kBackward };
TileRange rank_range(const Segment& s, Pass pass, int index, int rank, int ranks);

// Segment `s`'s shares of each pass for `ranks` ranks by its tiles' work in a step whose glass
// tiles are `glass`: a glass tile's none, another's its computed boxes' FLOPs (SegmentGlass's)
// and a fixed part of an average tile's for the glass filled around them. By count where the
// pass has no glass (its tiles' work differs by their halos alone). Where the two passes share
// a partition, one share of both (a rank runs backward the tiles it ran forward).
void share_by_work(Segment& s, const SegmentGlass& glass, int ranks);

// One exchange of a split step: gives[p][q], the regions of an activation rank p gives rank q
// (none to itself). A gather's receiver copies them (p computed them), a sum's adds them (p's
// part of a gradient); each rank sends its own, packed, to the others.
using Gives = std::vector<std::vector<std::vector<Region>>>;

// Segment `index`'s output checkpoint: each rank's own forward tiles, cut to what each other
// rank reads of them in the next segment (its forward and backward tiles' segment_needs);
// whole where no segment reads it (the head does).
Gives checkpoint_gives(const Graph& graph, const Plan& plan, int index, int ranks);
// Inner checkpoint `v` of sub-segments segment `index`: each rank's shares of it, cut to what
// each other rank reads of it in the segment.
Gives inner_gives(const Graph& graph, const Plan& plan, int index, NodeId v, int ranks);
// The gradient at `v` (segment `index`'s input, index > 0, or an inner checkpoint of it): what
// p's backward tiles add to it (the hull of their needs), cut to what q's backward tiles read of
// it (segment `index` - 1's output tiles, or the segment's own needs at an inner checkpoint).
Gives gradient_gives(const Graph& graph, const Plan& plan, int index, NodeId v, int ranks);
// Positions the busiest rank gives in an exchange (a channel's; padded to it, every rank's
// buffer is this long).
int64_t given_area(const Gives& gives);
// One rank of a split step, and which passes of a segment a question is about.
struct RankOf {
  int rank = 0, ranks = 1;
};
enum class Passes { kForward, kBackward, kBoth };
// The hull of what `who` reads of `v` in segment `index`: segment_needs of the hull of the tiles
// it runs of `passes` (and, at an inner checkpoint, its shares of it). Empty where it runs none.
Region rank_reads(const Graph& graph, const Plan& plan, int index, NodeId v, RankOf who,
                  Passes passes);

// What `who` holds resident of segment `index`'s output checkpoint and of its gradient in a split
// step (a tensor over this region, not the whole activation): the hull of its own forward and
// backward tiles of the segment (what it writes, and whose gradient its backward reads) and of
// what its tiles of the next segment read of it (rank_reads, both passes: the value, and the
// gradient they add to). Whole where the head reads it (the last segment); empty where the rank
// neither computes nor reads any of it.
Region held_checkpoint(const Graph& graph, const Plan& plan, int index, RankOf who);
// The same of inner checkpoint `v` of sub-segments segment `index` (resident): its shares of the
// forward and backward tiles and what its tiles read of it in the segment (rank_reads, both
// passes), for the value and its gradient.
Region held_inner(const Graph& graph, const Plan& plan, int index, NodeId v, RankOf who);

// The plan's passes (Plan::passes, and its peak) as the busiest of `ranks` ranks holds them in
// each: every resident checkpoint between segments, and its gradient, over held_checkpoint's
// region rather than the bytes the planner's passes counted for it (`counted`, by segment: a
// forward holds the earlier checkpoints and its output, a backward those before it, its output
// with its gradient, and its input's gradient); and a sub-segments segment's resident inner
// checkpoints over held_inner's rather than whole (its forward holds them all, its backward
// inner_backward_bytes); and of a segment that keeps its tiles' graphs (KeptGraph), only the
// graphs of the forward tiles the rank runs (`graphs`, by segment: each forward tile's graph
// bytes as the passes counted them, empty where the segment keeps none).
void hold_split(const Graph& graph, Plan& plan, int ranks, const std::vector<int64_t>& counted,
                const std::vector<std::vector<int64_t>>& graphs = {});

// What the busiest of `ranks` ranks gives to the exchanges between them in one training step
// (the executor's StepResult::summed_bytes), by what it exchanges.
struct SplitBytes {
  // Forward: its parts of every segment's output checkpoint that another rank reads
  // (checkpoint_gives), or its streaming global average's sums.
  int64_t checkpoints = 0;
  // Backward: its part of every segment's input gradient that another rank reads
  // (gradient_gives); the image's summed whole, where the plan keeps it.
  int64_t input_gradients = 0;
  // Sub-segments with barriers: its parts of each kept inner checkpoint after its forward pass
  // (again where the backward rebuilds it) and of the checkpoint's gradient before its
  // barriers' corrections, as the others read them.
  int64_t inner_checkpoints = 0;
  // After the step: what the step added to every parameter's gradient.
  int64_t parameter_gradients = 0;
  int64_t total() const {
    return checkpoints + input_gradients + inner_checkpoints + parameter_gradients;
  }
};
SplitBytes split_bytes(const Graph& graph, const Plan& plan, int ranks, bool training = true);

// Why a step of `plan` cannot be split over ranks yet, in words ("" where it can): shared rows,
// offloaded inner checkpoints. Offloaded checkpoints split: each rank's store holds its own
// tiles' blocks and what its tiles read of the others' (Step::exchange_stored).
std::string split_refusal(const Graph& graph, const Plan& plan);

// Why a split step of `plan` computes its glass as tissue (docs/glass.md), in words ("" where
// each rank skips its own glass tiles and fills its tiles' glass): a segment whose glass is
// computed as tissue anyway (glass_dense), whose uniform value one rank's tile alone would hold.
// Every glass sum is linear in the tiles that add to it: a rank's part of a barrier's statistic
// or sums (its glass tiles' count × the uniform value, its fills) is merged over the ranks with
// its tiles' before the uniform values past the barrier are computed, the same on every rank,
// and its part of the parameters' gradients is summed with the rest. A one-tile segment with
// barriers runs on one rank, which gives the others its output's uniform value and takes their
// parts of the glass gradient handed back to it (GlassRun::share_whole_value, gather_whole_seed).
std::string glass_split_refusal(const Graph& graph, const Plan& plan, bool training);

// A link's price where none is given: Gloo's broadcast between two processes on this 2-core
// machine's loopback moved 256 MiB in 75 ms (bench/NOTES.md session 63).
inline constexpr double kLoopbackBytesPerSecond = 3.5e9;

// The step of `plan` split over `ranks` ranks at the plan's prices (Plan::prices): every pass
// waits for its busiest rank (each pass's price, Segment::forward_price and backward_price, in
// proportion to the most tiles one rank runs of it), then the busiest rank's exchanges
// (split_bytes) at `link_bytes_per_second`. Seconds; zero where the plan has no prices. Waits at
// the collectives beyond the slowest rank's tiles are not priced. Where the plan skips glass,
// shares by work (RankShares::busiest) scale its own glass price (Plan::cost).
struct SplitTime {
  double tiles = 0;      // the busiest rank's tiles, pass by pass
  double exchanges = 0;  // its bytes over the link
  double alone = 0;      // the same plan's tiles on one rank
  double total() const { return tiles + exchanges; }
};
// `seconds_per_flop`: the compute's price (0: the plan's, Plan::prices: measured where the plan
// priced offloading, else the guess of 100 GFLOP/s).
SplitTime split_time(const Graph& graph, const Plan& plan, int ranks,
                     double link_bytes_per_second = kLoopbackBytesPerSecond,
                     double seconds_per_flop = 0);

// What `tessel plan --ranks P` adds to the plan's table: each rank's tiles, what it gives per
// step and the step's time at the prices and `link_bytes_per_second`, or why the step cannot be
// split.
std::string split_summary(const Graph& graph, const Plan& plan, int ranks,
                          double link_bytes_per_second = kLoopbackBytesPerSecond,
                          double seconds_per_flop = 0);

// The fewest tiles per axis (planning's count: rows, or a grid's rows and columns) that give
// each of `ranks` ranks a tile of every pass.
int64_t fewest_count_for_ranks(Strategy strategy, int ranks);

}  // namespace tessel::core
