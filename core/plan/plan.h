// A plan: how one training step runs under a memory budget (DESIGN.md "Segments and the plan").
// Segments between checkpoints, the tile partition of each, and the predicted peak by category.
// Plain data that prints itself; made by the planner (core/plan/planner.h), run by the executor.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/graph/graph.h"
#include "core/graph/window.h"

namespace tessel::core {

enum class Strategy {
  kNone,  // plain LibTorch autograd on the whole image: the reference
  kGrid,  // SFT: tiles over rows and columns
  kRows,  // LR-CNN OverL: full-width rows, balanced, separate forward/backward counts
  // LR-CNN 2PS (two-phase sharing): full-width rows top to bottom, each position computed once;
  // a row keeps the boundary rows the next one reads (forward) and hands their gradient back
  // (backward). The SharedRows scheme.
  kRowsShared,
  kAuto,  // the cheapest of grid, rows and shared rows that fits, at the planner's prices
};
std::string to_string(Strategy s);
Strategy parse_strategy(const std::string& s);  // throws tessel::Error

// Where a checkpoint lives between its uses (core/store/tile_store.h). Only the resident tier
// counts against the budget; on CPU builds "host" is RAM too, so the planner offloads to disk
// there.
enum class Tier { kResident, kHost, kDisk };
std::string to_string(Tier t);

// A partition of one activation into tiles: edges per axis, tiles in row-major order.
struct Partition {
  std::vector<int64_t> y_edges{0, 0}, x_edges{0, 0};  // {0, ..., H}, {0, ..., W}

  int64_t rows() const { return static_cast<int64_t>(y_edges.size()) - 1; }
  int64_t cols() const { return static_cast<int64_t>(x_edges.size()) - 1; }
  int64_t tiles() const { return rows() * cols(); }
  Region tile(int64_t index) const;
  // The indices of the tiles that meet region `r`, row-major (none for an empty one).
  std::vector<int64_t> meeting(const Region& r) const;
  static Partition whole(int64_t height, int64_t width);
  static Partition even(int64_t height, int64_t width, int64_t rows, int64_t cols);
  bool operator==(const Partition&) const = default;
};

// Bytes a step holds, by what holds them.
struct MemoryBreakdown {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;
  int64_t checkpoints = 0;  // whole activations kept between segments (+ their gradients)
  int64_t working_set = 0;  // one tile's inputs, activations kept for backward, gradients
  int64_t tail = 0;         // the head's activations and gradients
  int64_t total() const {
    return parameters + gradients + optimizer + checkpoints + working_set + tail;
  }
  // What a training step adds to the bytes live when it starts, the basis of its measured peak
  // (StepResult::measured_peak_bytes): the optimizer's zero_grad frees the gradients (LibTorch's
  // default, set_to_none), so every step allocates them again; the parameters and the
  // optimizer's state outlive it.
  int64_t step() const { return gradients + checkpoints + working_set + tail; }
};

// How a segment runs: its execution scheme, one of six, each with the fields that belong to it
// alone (DESIGN.md "Segments and the plan"). The planner picks one per segment and checks what
// the types cannot say (check_scheme); the executor dispatches on it.

// Tiles recomputed in the backward (no barrier needing statistics in the segment).
struct PlainTiles {};

// The forward runs with autograd and keeps every tile's graph for the backward, which then
// recomputes nothing and runs the forward's tiles (the budget left room for them).
struct KeptGraph {};

// LR-CNN 2PS (Strategy::kRowsShared): the rows (forward = backward partition) run top to bottom
// and each node computes only the rows no earlier row computed (shared_row); the rows the next
// row reads again are kept from the forward until this segment's backward (kept_bytes of them
// at most), which runs the rows bottom to top and hands each kept row's gradient to the row
// that computed it. Never with barriers (they run as OverL rows). The kept rows live in
// kept_tier: resident, or (the budget has no room for them) in the tile store, one block per
// row, written in the forward and read back in the backward. keep_graph: the rows keep their
// graphs too (then their kept rows are resident, in the graphs).
struct SharedRows {
  bool keep_graph = false;
  int64_t kept_bytes = 0;
  Tier kept_tier = Tier::kResident;
};

// The segment runs as one tile in both passes, so each barrier's statistic is that of its one
// tile: the barriers run as LibTorch runs them on whole activations (no statistic passes, no
// sums, no corrections: plain autograd through the statistic), the forward updates batch norm's
// running statistics and the backward's recompute leaves them. keep_graph: the tile's graph is
// kept like any other.
struct WholeBarriers {
  bool keep_graph = false;
};

// Barriers (core/exec/barrier.h) run as sub-segments: each barrier's input is kept (an inner
// checkpoint, whole or in the tile store: `tier`) from its statistic pass, the tiles read it
// instead of recomputing it, and the backward runs each sub-segment once (the segment's input
// may be offloaded).
struct SubSegments {
  // The inner checkpoints stay from the forward to the backward (the budget left room for them
  // through the passes between), so the backward does not rebuild them. Offloaded ones always
  // stay.
  bool keep_inner = false;
  // Where the inner checkpoints and their gradients live. Resident: whole tensors. Offloaded
  // (the budget has no room for them whole): in the tile store, each kept inner checkpoint (in
  // kept_inner order) in the blocks of `blocks` (its shares of the forward tiles, split to the
  // block size, so each share fills whole blocks) and its gradient in those of `grad_blocks`
  // (the cells between the regions the backward's tiles add, split likewise: only strips where
  // tiles overlap stay open across tiles).
  Tier tier = Tier::kResident;
  // Inner checkpoints (of inner_checkpoints) the plan does not keep (DELTA per inner
  // checkpoint: recomputing one is cheaper than moving it); the sub-segments that read one
  // compute it from their leaves. A barrier's input is read by one sub-segment only: its
  // barriers' statistics come from a pass over its shares of the forward tiles, their sums from
  // a round over that sub-segment's backward tiles before its backward. A fork may be read by
  // several (each recomputes it).
  std::vector<NodeId> dropped;
  std::vector<Partition> blocks, grad_blocks;
};

// Barriers whose inputs are recomputed in every pass (the budget has no room for them kept):
// each barrier's statistic pass and each round of sums recomputes the segment's tiles.
struct RecomputeRounds {};

using Scheme =
    std::variant<PlainTiles, KeptGraph, SharedRows, WholeBarriers, SubSegments, RecomputeRounds>;
// "plain tiles", "kept graph", "shared rows", "whole barriers", "sub-segments", "recompute
// rounds".
std::string to_string(const Scheme& scheme);

// How a step split over ranks (core/plan/split.h) divides one pass's tiles: by their work where
// the planner priced it (the glass each tile skips, PlanOptions::background), else by count.
struct RankShares {
  // ranks + 1 tile indices, row-major: slot q runs [edges[q], edges[q + 1]). Empty: by count
  // (rank_tiles), as for a plan made for another number of ranks.
  std::vector<int64_t> edges;
  // The busiest slot's work and all slots', as parts of the pass's work without glass (or both
  // passes' where they share the partition; split_time); 0: by count.
  double busiest = 0, all = 0;
};

// Nodes (input, output] run fused and tiled, as `scheme` says; `input` and `output` are
// checkpoints (node 0, the image, is read from the TileSource). `reduction`, when set, is a
// global pool that closes the segment as a streaming reduction: the output activation is never
// held whole.
struct Segment {
  NodeId input = 0;
  NodeId output = 0;
  NodeId reduction = -1;
  Scheme scheme;
  Partition forward, backward;         // over the output activation
  int64_t forward_working_bytes = 0;   // predicted, largest tile
  int64_t backward_working_bytes = 0;  // predicted, largest tile
  int64_t halo_flops = 0;              // predicted forward FLOPs with halo recompute, all tiles
  // The planner's price of each pass (PlanCost: FLOPs and tiles; the scheme's extra passes in the
  // backward's), for a step split over ranks (split_time).
  double forward_price = 0, backward_price = 0;
  // Made for ranks (PlanOptions::ranks): each pass's tiles by rank (rank_range). Where the two
  // partitions are the same, so are the shares (a rank runs backward the tiles it ran forward).
  RankShares forward_shares, backward_shares;
  // Predicted bytes the segment's own stores move per step: offloaded inner checkpoints', or
  // shared rows' kept rows in the store.
  int64_t inner_moved_bytes = 0;
  // Where the output checkpoint lives. An offloaded one is stored in blocks (the forward
  // partition's tiles, split to the plan's block size), so each forward tile fills whole blocks.
  Tier tier = Tier::kResident;
  Partition blocks;
  // Of an offloaded checkpoint, its first blocks (row-major) stay resident: the budget the
  // plan's other passes leave free while the checkpoint lives (partly resident checkpoints).
  int64_t resident_blocks = 0, resident_bytes = 0;
  // When the input is offloaded: the blocks its gradient accumulates in. Their edges are those
  // of the backward tiles' input regions (split to the block size), so a block is complete after
  // the last tile that adds to it and only the strips where tiles overlap stay open across tiles.
  // A segment run as sub-segments adds in several passes (grad_additions): its blocks are the
  // cells between all of them, each stored after its last addition in each pass.
  Partition input_grad_blocks;
  int64_t moved_bytes = 0;  // predicted bytes to and from the tier per step (it and its gradient)
  // Offload: the tile store's write-behind in this segment's forward and backward (writes in
  // flight before the caller waits): Plan::write_behind_bytes, or half what the budget leaves
  // free in that pass where that is more (size_write_behind), so a tile's burst of blocks
  // queues for the disk instead of stalling compute. The passes' predictions leave it out: the
  // bytes are the budget's slack, not the plan's.
  int64_t forward_write_behind = 0, backward_write_behind = 0;

  template <class T>
  bool is() const {
    return std::holds_alternative<T>(scheme);
  }
  template <class T>
  const T* as() const {
    return std::get_if<T>(&scheme);
  }
  template <class T>
  T* as() {
    return std::get_if<T>(&scheme);
  }
  // The forward's tile graphs are kept for the backward (KeptGraph, or shared rows or whole
  // barriers that keep theirs).
  bool keeps_graph() const;
  // Sub-segments whose inner checkpoints stay from the forward to the backward.
  bool keeps_inner() const;
  // Sub-segments' inner checkpoints' tier and dropped ones; resident and none otherwise.
  Tier inner_tier() const;
  const std::vector<NodeId>& dropped_inner() const;
  // Shared rows' kept rows' tier and bytes; resident and 0 otherwise.
  Tier shared_tier() const;
  int64_t shared_bytes() const;
};

// What the scheme's types cannot say, checked once where the planner builds a plan: whole
// barriers run as one tile both ways; a kept graph and shared rows run the same tiles both ways;
// a kept graph holds no barrier needing statistics (its tiles would run in several passes);
// shared rows hold no barrier, and those that keep their graphs keep their rows in them.
// Throws tessel::Error ("internal: ...") naming the segment.
void check_scheme(const Graph& graph, const Segment& s);

// The machine's prices of the two ways to keep a checkpoint the budget cannot hold (DELTA):
// moving it to the offload tier and back, or recomputing it. Measured by
// core/store/offload_prices.h; unmeasured (zero) prices leave the planner's guessed ratio in
// charge.
struct OffloadPrices {
  double seconds_per_byte_moved = 0;  // written to the tier and read back, per byte each way
  double seconds_per_flop = 0;        // forward FLOPs of a conv on this machine's threads
  bool measured = false;              // false: the planner's guess (PlanOptions)
  // The disk tier's scratch directory's free bytes when the prices were asked for; -1: unknown.
  // A plan that offloads only to be cheaper than a resident one must fit there.
  int64_t disk_free_bytes = -1;
  // Given by the caller (`tessel plan --prices`: another machine's, or fixed), not probed on this
  // one; the planner uses them as measured ones (`measured` is set too), the reports say so.
  bool given = false;
};

// DELTA's decision for one checkpoint beyond the budget: offload it (its bytes moved per step)
// or drop it so the next segment recomputes it from the previous checkpoint (the FLOPs the
// merged segment's larger halos add per step; -1 when no plan without it fits the budget).
struct OffloadDecision {
  NodeId checkpoint = -1;
  int64_t moved_bytes = 0;
  int64_t recompute_flops = -1;
  double offload_s = 0, recompute_s = 0;  // per step, at the prices
  bool offload = true;
};

// The planner's price of a training step (core/plan/segment_build.cpp), in FLOPs at Plan::prices,
// by what it pays for: a model for choosing between plans (and strategies, under auto), not a
// prediction of seconds.
struct PlanCost {
  double compute = 0;  // forward, recompute and backward FLOPs with halos; barriers' extra passes
  double tiles = 0;    // PlanOptions::Prices::per_tile per tile run
  double copies = 0;   // shared rows' concatenations, at PlanOptions::Prices::per_byte_copied
  double moved = 0;    // bytes to the offload tier and back, at PlanOptions::Prices::per_byte_moved
  double total() const { return compute + tiles + copies + moved; }
  PlanCost& operator+=(const PlanCost& o) {
    compute += o.compute;
    tiles += o.tiles;
    copies += o.copies;
    moved += o.moved;
    return *this;
  }
  PlanCost& operator-=(const PlanCost& o) {
    compute -= o.compute;
    tiles -= o.tiles;
    copies -= o.copies;
    moved -= o.moved;
    return *this;
  }
};

// What a plan's glass (core/plan/glass.h) saves, where the image has a background: its share of
// the image, the glass tiles of the forward and backward partitions, the share of the forward's
// FLOPs they hold and the share filled in the other tiles (positions outside their computed
// boxes). The uniform share less those is the margin: glass computed in boxes that hold tissue.
struct GlassSummary {
  double image_fraction = 0;
  double flops_fraction = 0;   // the forward's FLOPs in glass tiles (not run)
  double filled_fraction = 0;  // those filled in tiles that also see tissue (not computed)
  // The image's glass still computed: at the tissue's edges, in boxes that hold tissue.
  double margin() const { return std::max(0.0, image_fraction - flops_fraction - filled_fraction); }
  int64_t forward_tiles = 0, glass_forward_tiles = 0;
  int64_t backward_tiles = 0, glass_backward_tiles = 0;
  // The checkpoints' bytes, and of them the glass: the blocks forward glass tiles write, each
  // kept as one vector (resident: no memory; offloaded: never stored or moved).
  int64_t checkpoint_bytes = 0, uniform_checkpoint_bytes = 0;
  // By segment: its forward's FLOPs without glass, and of them those in glass tiles and those
  // filled in the other tiles.
  struct SegmentFlops {
    double dense = 0, in_glass_tiles = 0, filled = 0;
  };
  std::vector<SegmentFlops> segments;
  // Where glass stops: the first segment that gets uniform positions and cannot skip them
  // (glass_obstacle), and why; the segments after it get none. -1: none stops it.
  int64_t stopped_at = -1;
  std::string stopped_why;
  // Segments before it that compute their glass as tissue and hand it on (glass_dense), and why.
  std::vector<std::pair<int64_t, std::string>> dense;
  bool any_background() const { return image_fraction > 0; }
};

struct Plan {
  Strategy strategy = Strategy::kNone;
  Shape input;
  // Made for a step that also returns the image's gradient (PlanOptions::input_gradient): the
  // step's StepOptions::input_gradient must say the same (training runs without it).
  bool input_gradient = false;
  int64_t element_bytes = 4;
  std::vector<Shape> shapes;      // per node
  std::vector<Segment> segments;  // empty for kNone
  NodeId tail_input = 0;          // the last checkpoint or reduction: the head starts here
  std::vector<NodeId> checkpoints;
  MemoryBreakdown predicted;  // at the peak: the largest of `passes`
  // Each pass at its peak, as predicted: segment i's forward at 2i, its backward at 2i + 1
  // (empty for kNone). The bench harness reports them beside the timeline's measured ones.
  std::vector<MemoryBreakdown> passes;
  int64_t budget_bytes = 0;  // 0: unlimited
  int64_t plain_flops = 0;   // forward FLOPs of the whole network on the whole image
  int64_t tiled_flops = 0;   // the same with halo recompute (forward pass), for cost comparisons
  int64_t window_bytes = 0;  // offload: bytes read ahead of use
  int64_t write_behind_bytes = 0;  // offload: writes in flight before the caller waits
  PlanCost cost;                   // what the planner's search compared; zero for kNone
  // Offload: the prices the planner used and its decision for each checkpoint it considered
  // (kept in the tier, or dropped and recomputed).
  OffloadPrices prices;
  std::vector<OffloadDecision> decisions;
  // Made for an image with a background (PlanOptions::background): what its glass saves.
  GlassSummary glass;
  int64_t moved_bytes() const;
  bool offloads() const;
};

// The most bytes a training step under `plan` keeps in the tile store's `tier` at once, an upper
// bound: every offloaded checkpoint (less its resident blocks) and every offloaded inner
// checkpoint is held from its forward to its segment's backward, and on top of them, while a
// segment's backward runs, the gradients of its offloaded input, output and inner checkpoints.
// Checked against the scratch folder's free space before a step that uses the disk starts.
int64_t stored_bytes(const Graph& graph, const Plan& plan, Tier tier);

// How segment `s`'s barriers run, as the plan table says: "whole" (WholeBarriers),
// "inner", "inner kept" or "inner disk|host" (sub-segments), "N rounds" (recomputed), or "" (no
// barrier needing statistics in training).
std::string barrier_mode(const Graph& graph, const Segment& s);

// The input window that window `out` of node `node` reads along `axis` (0 rows, 1 columns), over
// every path back to the input and unclipped (padding included): its receptive field. Where an
// output cell sits over the image (heatmaps): cell i's field is cell 0's shifted by i strides.
Window receptive_field(const Graph& graph, NodeId node, int axis, Window out);

// A readable table: segments, ops, output shapes, tiles, bytes.
std::string to_string(const Plan& plan, const Graph& graph);

// The execution schemes `plan`'s segments use, each named once in plan order: "plain tiles",
// "kept graph", "shared rows (2PS)", "whole barriers", "sub-segments over inner checkpoints",
// "inner checkpoints recomputed", "recompute rounds", "streaming reduction", and where
// checkpoints live when not resident ("checkpoints on disk", "partly resident checkpoints").
// `tessel gradcheck` reports them: what a check checked.
std::vector<std::string> schemes_of(const Graph& graph, const Plan& plan);
std::string format_bytes(int64_t bytes);
// "2GiB", "512MiB", "1.5G", "3000000" → bytes; throws tessel::Error on anything else.
int64_t parse_bytes(const std::string& text);

}  // namespace tessel::core
