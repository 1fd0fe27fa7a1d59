// The planner's tile model (engine-internal: plan/ and its tests). `Analysis` holds what a plan
// request fixes (the graph, its shapes, the options, the element size) and prices one tile of a
// segment: its working set forward and backward, its FLOPs, what its autograd graph keeps; the
// partitions' worst tiles and balanced rows build on it.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

#include "core/graph/graph.h"
#include "core/plan/geometry.h"
#include "core/plan/glass.h"
#include "core/plan/plan.h"
#include "core/plan/planner.h"

namespace tessel::core::planning {

inline constexpr int64_t kUnfit = std::numeric_limits<int64_t>::max() / 4;

inline constexpr double kNever = std::numeric_limits<double>::infinity();

inline int64_t elements(const Shape& s) { return s.channels * s.height * s.width; }

inline int64_t elements(const Node& n, const Region& r) { return n.channels * r.area(); }

// Elements of a conv's weight (0 for other ops).
int64_t weight_elements(const Node& n);

// Forward multiply-adds ×2 of node `n` producing region `r`.
int64_t flops(const Node& n, const Region& r);

struct Analysis {
  const Graph& graph;
  std::vector<Shape> shapes;
  PlanOptions options;
  int64_t eb;

  int64_t bytes(NodeId v) const { return elements(shapes[static_cast<size_t>(v)]) * eb; }
  // Split over ranks (options.ranks, with checkpoints_by_rank): about what one rank holds of
  // checkpoint `v`, which the segment (v, `next`] reads, and of its gradient (Step::held): its
  // band of rows, at least the P-th part, and what the segment's band of a middle rank reads of
  // it (its halo). The search's estimate; the plan's passes then count each rank's actual part
  // (hold_split) and make_plan checks them against the budget. Whole without ranks, past the
  // last segment (`next` < 0: the head reads it whole), or without checkpoints_by_rank.
  int64_t held_bytes(NodeId v, NodeId next) const;

  // Working set of one tile of segment (input, output]. Forward without autograd: each
  // activation lives until its last consumer. Backward: the recompute keeps what autograd saves
  // (conv and max pool inputs, max pool indices, relu/sigmoid/tanh outputs, gelu/leaky/affine
  // inputs), then gradients flow down, freeing each node's saved tensors as it passes.
  struct TileCost {
    int64_t forward_bytes = 0, backward_bytes = 0, flops = 0;
    int64_t kept_bytes = 0;  // what the tile's autograd graph holds after its forward (and y)
    int64_t kept_input_bytes = 0, kept_output_bytes = 0;  // the input's and y's part of it
    int64_t shared_kept_bytes = 0;  // shared rows: what the row keeps for the next (shared_row)
  };
  // Memoised: the search builds many plans that share segments and tiles (the local search
  // below made planning resnet50 at 2048² take 3 s without it). Depends only on the graph, the
  // shapes and the element size, none of which change during a search.
  using TileKey = std::array<int64_t, 6>;
  mutable std::map<TileKey, TileCost> tile_costs;
  // worst_tile's, by segment and partition.
  using PartitionKey =
      std::tuple<NodeId, NodeId, std::vector<int64_t>, std::vector<int64_t>, bool /*shared*/>;
  mutable std::map<PartitionKey, TileCost> worst_tiles;
  // Segments run as sub-segments: grad_additions and the search's estimate of the bytes they
  // leave open (Offloading::grad_strip_bytes), by segment, backward partition and node.
  using GradKey = std::tuple<NodeId, NodeId, std::vector<int64_t>, std::vector<int64_t>, NodeId,
                             std::vector<NodeId> /*dropped_inner*/>;
  struct Additions {
    std::vector<std::vector<Region>> passes;
    std::vector<NodeId> readers;  // each pass's sub-segment (grad_additions)
  };
  mutable std::map<GradKey, Additions> grad_adds;
  // Glass (core/plan/glass.h) over a segment's input's uniform positions, by segment, scheme,
  // partitions and the mask's fingerprint: the segment's glass (segment_glass), which gives
  // refine_for_glass's price of a partition, the output's uniform positions the next segment's
  // candidates start from and each finished candidate's savings (glass_savings). The search
  // prices the same segments over the same masks in many candidates (vgg-mini 2048² on a slide:
  // 10 s of planning against 1.6 s without glass).
  using GlassKey =
      std::tuple<NodeId, NodeId, NodeId, size_t, std::vector<int64_t>, std::vector<int64_t>,
                 std::vector<int64_t>, std::vector<int64_t>, uint64_t>;
  static GlassKey glass_key(const Segment& s, const CellMask& uniform) {
    return {s.input,
            s.output,
            s.reduction,
            s.scheme.index(),
            s.forward.y_edges,
            s.forward.x_edges,
            s.backward.y_edges,
            s.backward.x_edges,
            uniform.fingerprint()};
  }
  mutable std::map<GlassKey, SegmentGlass> glass_memo;
  mutable std::map<GradKey, int64_t> grad_strips;
  // A streaming reduction's own bytes per position of the tiles of `reduction_input` (the last
  // segment's output): an attention pool copies its tile to float64 and holds a few float64
  // rows per branch (core/exec/attention.cpp) in both passes.
  NodeId reduction_input = -1;
  int64_t reduction_bytes_per_position = 0;
  static GradKey grad_key(const Segment& s, NodeId v) {
    return {s.input, s.output, s.backward.y_edges, s.backward.x_edges, v, s.dropped_inner()};
  }
  const Additions& additions_by_pass(const Segment& s, NodeId v) const {
    const GradKey key = grad_key(s, v);
    const auto hit = grad_adds.find(key);
    if (hit != grad_adds.end()) return hit->second;
    Additions adds;
    adds.passes = grad_additions(graph, shapes, s, v, &adds.readers);
    return grad_adds.emplace(key, std::move(adds)).first->second;
  }
  const std::vector<std::vector<Region>>& additions(const Segment& s, NodeId v) const {
    return additions_by_pass(s, v).passes;
  }
  TileCost tile_cost(NodeId input, NodeId output, const Region& tile) const {
    const TileKey key{input, output, tile.y.begin, tile.y.end, tile.x.begin, tile.x.end};
    const auto hit = tile_costs.find(key);
    if (hit != tile_costs.end()) return hit->second;
    return tile_costs.emplace(key, compute_tile_cost(input, output, tile)).first->second;
  }
  TileCost compute_tile_cost(NodeId input, NodeId output, const Region& tile) const {
    return compute_cost(input, output, tile, segment_needs(graph, shapes, input, output, tile),
                        nullptr);
  }
  // One row of a shared-rows segment (core/plan/plan.h shared_row), memoised like tile_cost.
  TileCost shared_cost(NodeId input, NodeId output, Window rows) const {
    const TileKey key{input, output, rows.begin, rows.end, -1, -1};
    const auto hit = tile_costs.find(key);
    if (hit != tile_costs.end()) return hit->second;
    return tile_costs.emplace(key, compute_shared_cost(input, output, rows)).first->second;
  }
  // The row holds its held rows where a tile holds its needs, and computes only its computed
  // rows. Beyond them: the forward's concatenation of the inherited rows with the computed ones
  // (both at once, at the widest node) and its copies of the rows it keeps; the backward's
  // gradients of the inherited rows (handed back) and of the kept ones (handed to it).
  TileCost compute_shared_cost(NodeId input, NodeId output, Window rows) const;
  // Working set and FLOPs of a tile whose nodes hold `need`; FLOPs over `computed` when given
  // (shared rows), else over `need`.
  // `copies`: what a tile that fills its glass holds beside it at each node (boxed_copies).
  TileCost compute_cost(NodeId input, NodeId output, const Region& tile,
                        const std::vector<Region>& need, const std::vector<Region>* computed,
                        const std::vector<BoxCopies>* copies = nullptr) const;
  // The request's ends: the last tiled node and the streaming reduction that closes it (-1:
  // none); what every pass holds whatever the tiling (the model's state, the head); the budget
  // plans aim at (the budget less the headroom; 0: none).
  NodeId last = 0, reduction = -1;
  MemoryBreakdown fixed = {};
  int64_t target = 0;
  // Split over ranks: the search counts a rank's part of each checkpoint (held_bytes).
  bool checkpoints_by_rank = false;
};

// The tile that holds most: the middle one (border tiles lose their halo to clipping).
inline Region middle_tile(const Partition& p) {
  return p.tile((p.rows() / 2) * p.cols() + p.cols() / 2);
}

inline bool row_strategy(Strategy s) { return s == Strategy::kRows || s == Strategy::kRowsShared; }

Partition partition_for(Strategy s, const Shape& out, int64_t n);

int64_t max_count(Strategy s, const Shape& out);

// LR-CNN OverL: rows balanced so that each row with its overlap reads the same number of input
// rows (border rows have a one-sided halo, so they get more output rows).
// Shared rows (2PS, `shared`) are balanced by the input rows each holds: the first row holds
// the halo of every layer, the others one layer's, so the first gets fewer output rows (the
// paper's skewed rows).
std::vector<int64_t> balanced_rows(const Analysis& a, NodeId input, NodeId output, int64_t rows,
                                   bool shared = false);

// The largest working set over the tiles of a partition: every row or column when there are
// few, else the picks below on each axis.
Analysis::TileCost worst_tile(const Analysis& a, const Segment& s, const Partition& p);

// The tiles that stand for all of a partition's: border tiles and their neighbours (clipped
// halos), the middle one, and the largest interior one: the partition's tiles differ by one row
// or column (26 rows over 64 output rows are 2 or 3 high), and the middle tile may be a small one
// (measured: darknet19 1024² rows, 107 MiB on the 3-row tiles, 92 predicted from a 2-row middle
// tile). Every tile where there are at most 8 per axis.
std::vector<int64_t> sample_tiles(const Partition& p);

Analysis::TileCost compute_worst_tile(const Analysis& a, const Segment& s, const Partition& p);

}  // namespace tessel::core::planning
