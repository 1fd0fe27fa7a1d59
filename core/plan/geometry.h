// The geometry of a segment's tiles that the planner and the executor share: which region of
// each node a tile needs, barriers' shares and rounds, shared rows, inner checkpoints and the
// sub-segments over them. Engine-internal (core/plan's and core/exec's; tests): callers outside
// core/ read a plan through plan.h. Pure: shapes and regions, no tensors.
#pragma once

#include <vector>

#include "core/graph/graph.h"
#include "core/graph/window.h"
#include "core/plan/plan.h"

namespace tessel::core {

// The share of an activation of shape `at` that output tile `tile` (of an activation of shape
// `out`) owns: the tile's edges scaled, so the tiles of any partition of `out` give a partition
// of `at` (possibly with empty shares). A barrier's statistic pass and correction run over them.
Region barrier_share(const Region& tile, const Shape& out, const Shape& at);

// The barriers of segment (input, output] in the rounds of its backward's sums passes
// (core/exec/barrier.h): a barrier's sums need the corrections of every barrier after it on a path,
// so each round holds the barriers with no pending barrier downstream, latest first. `training`:
// batch norms count (else only group norm and squeeze-and-excitation need statistics).
std::vector<std::vector<NodeId>> barrier_rounds(const Graph& graph, NodeId input, NodeId output,
                                                bool training = true);

// The region of every node of a segment (input..output) that output tile `tile` needs: clipped
// at every activation (DESIGN.md rule 1), the hull over consumers inside the segment, and at a
// barrier's input the tile's share of it (barrier_share). Indexed by node id; nodes outside the
// segment are left empty. Pure: shared by planner and executor.
std::vector<Region> segment_needs(const Graph& graph, const std::vector<Shape>& shapes,
                                  NodeId input, NodeId output, const Region& tile);

// One row of a segment run as shared rows (LR-CNN 2PS, SharedRows), by node: the
// rows it `held` (those the previous row kept, then those it computes: what its consumers read
// in this row), `computed` (the rows no earlier row computed, so every position is computed
// once) and `kept` for the next row (the held rows the next row's consumers read). Rows are
// full width (the x extent of segment_needs for the whole output); the segment's input holds
// what the row reads of it and computes and keeps nothing (it is read again). `rows`: the
// row's output rows; rows must run top to bottom over a partition of the output.
struct SharedRow {
  std::vector<Region> held, computed, kept;
};
SharedRow shared_row(const Graph& graph, const std::vector<Shape>& shapes, NodeId input,
                     NodeId output, Window rows);

// The inner checkpoints of segment (input, output], in order: the inputs of its barriers other
// than the segment's input, and the forks between them: nodes that several sub-segments would
// compute, whose consumers are computed by different ones (a ResNet block's output, read by the
// next block's first conv and by its skip connection), so each op runs in one sub-segment.
std::vector<NodeId> inner_checkpoints(const Graph& graph, NodeId input, NodeId output);
// The inner checkpoints segment `s` keeps: inner_checkpoints less those it drops
// (SubSegments::dropped).
std::vector<NodeId> kept_inner(const Graph& graph, const Segment& s);

// The shares (barrier_share) of the tiles of `tiles`, a partition of an activation of shape
// `out`, at an activation of shape `at`: a partition of `at` (empty shares dropped).
Partition share_partition(const Partition& tiles, const Shape& out, const Shape& at);

// The regions the backward of segment `s` (run as sub-segments) adds into the gradient of `v`
// (an inner checkpoint or the segment's input), in the executor's order, one list per pass
// that adds into it: the output's backward tiles latest first, then each later inner
// checkpoint's sub-segment (latest first) over its shares of the backward tiles, and for the
// input the corrections of the barriers that read it, over its shares. A stored gradient's
// blocks are stored after each pass's last addition into them (StoredActivation).
// `readers`, when given, receives each pass's sub-segment: the node it computes (the output or
// an inner checkpoint), or `v` itself for the corrections' pass.
std::vector<std::vector<Region>> grad_additions(const Graph& graph,
                                                const std::vector<Shape>& shapes, const Segment& s,
                                                NodeId v, std::vector<NodeId>* readers = nullptr);

// A sub-segment of a segment from `input`: the nodes that compute `target` from `leaves` (the
// segment's input and inner checkpoints before `target`, whose values are read, not computed).
struct SubSegment {
  NodeId input = 0;
  const std::vector<NodeId>& leaves;
  NodeId target = 0;
};

// Dropped inner checkpoints a sub-segment recomputes (SubSegments::dropped): at each it
// computes, also the share of the segment's output tile `out_tile` (of `out`), where its
// barriers' corrections are added.
struct DroppedShares {
  const std::vector<NodeId>& dropped;
  Region out_tile;
  Shape out;
};

// segment_needs for sub-segment `sub` over `tile` of its target: needs stop at the leaves; no
// barrier shares (the corrections are added to the inner checkpoints' gradients).
std::vector<Region> sub_segment_needs(const Graph& graph, const std::vector<Shape>& shapes,
                                      const SubSegment& sub, const Region& tile);
// The same where the sub-segment recomputes dropped inner checkpoints. Without any, the plain
// sub_segment_needs.
std::vector<Region> sub_segment_needs(const Graph& graph, const std::vector<Shape>& shapes,
                                      const SubSegment& sub, const Region& tile,
                                      const DroppedShares& drops);
// Where each of segment `s`'s dropped inner checkpoints is recomputed (in dropped_inner's
// order): the kept inner checkpoints (or the output) whose sub-segments read it.
std::vector<std::vector<NodeId>> dropped_readers(const Graph& graph,
                                                 const std::vector<Shape>& shapes,
                                                 const Segment& s);
// The barriers of segment `s` that read node `v`, in order; barrier_input: whether there is one.
std::vector<NodeId> barriers_reading(const Graph& graph, const Segment& s, NodeId v);
bool barrier_input(const Graph& graph, const Segment& s, NodeId v);
// The dropped inner checkpoints of `s` a plan may not drop: a barrier's input read by other than
// exactly one sub-segment (its barriers' sums are taken in that one's rounds; split between two,
// each would see part of them). A fork (no barrier reads it) may be recomputed by several.
std::vector<NodeId> misplaced_drops(const Graph& graph, const std::vector<Shape>& shapes,
                                    const Segment& s);

}  // namespace tessel::core
