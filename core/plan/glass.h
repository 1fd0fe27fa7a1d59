// Glass under tiling: which tiles of a segment see nothing but the image's constant region, so
// their activations are one vector per node and need not be computed tile by tile. Pure: shapes,
// regions and cell masks (core/graph/cells.h); the executor's side is core/exec/glass.h.
//
// A network's ops are translation-equivariant: where a position's window lies wholly in a
// region that holds one value (and reads no padding), its value is the same vector everywhere.
// A tile is glass when every node's region it needs (segment_needs) reads no padding and its
// input region lies in the input's uniform positions: then its whole cone is uniform, and its
// output is the segment's uniform value. Its backward is linear in its output gradient with the
// same Jacobians everywhere, so what it adds to a parameter's gradient depends on that gradient's
// sum over the tile alone (core/exec/glass.h does the sum once for all glass tiles).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/graph/cells.h"
#include "core/graph/graph.h"
#include "core/plan/box_set.h"
#include "core/plan/plan.h"

namespace tessel::core {

// Why segment `s` cannot skip glass nor hand it on in a step (`training`: a backward follows),
// or "" where it can: an op that is not the same at every position (dropout while training), or
// a global max pool closing it (its ties with the uniform value).
std::string glass_obstacle(const Graph& graph, const Segment& s, bool training);

// Why segment `s`, whose ops are the same at every position, computes its glass as tissue, or
// "" where it skips it: a barrier reading a statistic of the whole activation in this step
// outside recompute rounds, whole barriers and sub-segments with resident inner checkpoints (the
// barrier schemes that take glass into their statistics and sums: core/exec/glass.h), or shared
// rows (full
// width: every node reads padding). Such a segment still hands its glass on (uniform_through).
std::string glass_dense(const Graph& graph, const Segment& s, bool training);

// The output positions of segment `s` whose windows read only positions of `input` (its input's
// uniform positions) and no padding, on cells of at most 128 a side: where a segment computed
// whole holds one value (an erosion of `input` by the segment's windows). Empty where none.
CellMask uniform_through(const Graph& graph, const std::vector<Shape>& shapes, const Segment& s,
                         const CellMask& input);

// The first position (row-major by cell) of `m`, as a 1×1 region; empty for an empty mask.
Region first_position(const CellMask& m);

// Whether the regions `need` (segment_needs of one tile) read no padding: every node of (input,
// output] reads only positions inside its inputs.
bool padding_free(const Graph& graph, const std::vector<Shape>& shapes, NodeId input, NodeId output,
                  const std::vector<Region>& need);

// Glass within a tile that also sees tissue: for each node of (input, output], the parts of its
// region `need[v]` the tile computes, disjoint boxes holding the positions that are not uniform:
// those whose window reads padding or some position of an input's boxes (one box per input box
// reached and per side whose padding is read, overlaps cut away, at most kMostBoxes). The rest
// of the region holds the node's uniform value (core/exec/glass.h fills it). need[input]'s boxes
// hold its positions outside `uniform`, the input's uniform positions, by connected piece.
// Indexed as `need`; a glass tile's boxes are all empty, a node whose inputs are computed whole
// has {need[v]}. `uniform.given`: nodes before `output` whose tiles are given rather than
// computed (sub-segments' inner checkpoints), each with its uniform positions; their boxes are
// those outside them. A barrier's boxes are one (their hull: a tile applies it to one tensor),
// unless `uniform.barriers_whole` (WholeBarriers: it runs over its whole input, and a position
// of its output is uniform where its input's is, as for a pointwise op).
constexpr int kMostBoxes = 8;
// A whole segment's one tile (WholeBarriers): its input's positions outside `uniform` by block
// of an 8 × 8 grid, and at most this many boxes a node (a box's call costs little beside the
// positions of a whole activation).
constexpr int kMostWholeBoxes = 24;
struct TileUniform {
  const CellMask& input;
  const std::map<NodeId, CellMask>* given = nullptr;
  bool barriers_whole = false;
};
std::vector<Boxes> computed_boxes(const Graph& graph, const std::vector<Shape>& shapes,
                                  NodeId input, NodeId output, const std::vector<Region>& need,
                                  const TileUniform& uniform);
inline std::vector<Boxes> computed_boxes(const Graph& graph, const std::vector<Shape>& shapes,
                                         NodeId input, NodeId output,
                                         const std::vector<Region>& need, const CellMask& uniform) {
  return computed_boxes(graph, shapes, input, output, need, TileUniform{uniform});
}

// What a tile whose boxes are `box` (computed_boxes of `need`) holds of each node of (input,
// output]: the part its consumers' windows read, around each consumer's computed parts (its boxes
// within what it holds), so that a node's boxes are filled only with the ring of uniform values
// its consumers read, not over its whole region. The output, a barrier and a barrier's input
// hold their whole region (the output is the tile; a barrier's statistic and corrections take
// every position of the tile's share). A node no consumer reads holds nothing. Indexed as `need`.
// `barriers_whole` (WholeBarriers): pointwise ops, joins and barriers are computed over all they
// hold (runs_whole), so their inputs hold that too.
struct NodeSpan {  // nodes (input, output]
  NodeId input = 0, output = 0;
};
std::vector<Region> held_regions(const Graph& graph, const std::vector<Shape>& shapes,
                                 NodeSpan nodes, const std::vector<Region>& need,
                                 const std::vector<Boxes>& box, bool barriers_whole = false);
// Whether a tile of a WholeBarriers segment (`barriers_whole`) computes `node` over all it holds
// rather than its boxes: an op at one position (a pointwise op, a join, a barrier applying its
// statistic) costs little, and boxes would copy its input and output a box at a time and hold
// them beside the filled tensor (resnet50 train-mode BN 1024² at 88% glass: 1.05 GB measured
// against 0.80 GB dense).
bool computed_whole(const Node& node, bool barriers_whole);
// Whether a tile with glass runs `node` over all it holds rather than box by box: where
// computed_whole says so, and an op whose backward keeps its own output (relu, sigmoid, tanh)
// everywhere. Box by box, that op would keep its parts while the conv that reads it through views
// keeps the filled tensor: twice the bytes dense keeps once. Measured on an interior tile whose
// boxes cover most of it: 16% over the same tile run dense (resnet50 frozen 4096² at 30% tissue,
// 591 MiB against 510 predicted; Glass.FilledTilesHoldNoMoreThanTheirDenseRun). Its boxes still
// say where it is not uniform (computed_boxes).
bool runs_whole(const Node& node, bool barriers_whole);
// `box` within `held`, by node: what the tile computes (empty parts dropped).
std::vector<Boxes> held_boxes(const std::vector<Boxes>& box, const std::vector<Region>& held);

// A node computed over boxes (several, or one short of what it holds), as the tile walk
// (core/plan/tile_cost.cpp) prices it: its kernels' scratch is over one box at a time (the
// largest: its output `out` and input window `window`), and beside what the same node holds
// dense it holds its parts until they are filled into one tensor (`parts`, their sum) and, in the
// backward, LibTorch's contiguous copies of the views it reads (a conv's output gradient and
// input window, a pool's output gradient) and a box's input gradient before it is added into the
// whole one (none for the image). Measured: tiny 910×872 at 40% glass, a backward row tile of
// three boxes, 5.7 MiB over the same tile dense at conv2's boxes (issue 50).
struct BoxCopies {
  bool boxed = false;
  int64_t out = 0, window = 0, parts = 0;
  int64_t backward_copies = 0;
};
// By node of (input, output] (indexed as `held`); `computed`: held_boxes, as the executor runs
// them; `boxed` false where the node is computed as it is dense.
std::vector<BoxCopies> boxed_copies(const Graph& graph, const std::vector<Shape>& shapes,
                                    NodeSpan nodes, const std::vector<Boxes>& computed,
                                    const std::vector<Region>& held, int64_t element_bytes);

// The forward FLOPs of nodes (input, output] over `regions` (a tile's needs), or over `boxes`.
int64_t regions_flops(const Graph& graph, NodeId input, NodeId output,
                      const std::vector<Region>& regions);
int64_t boxes_flops(const Graph& graph, NodeId input, NodeId output,
                    const std::vector<Boxes>& boxes);

// A segment's glass tiles, by tile of its forward and backward partitions (1: glass), and what
// each tile computes of its needs (computed_boxes).
struct SegmentGlass {
  std::vector<uint8_t> forward, backward;
  // Per tile, the forward FLOPs of its computed boxes (0 for a glass tile), and the sum of its
  // needs' FLOPs over all tiles (what the pass computes without glass); empty and 0 where the
  // input has no uniform positions.
  std::vector<int64_t> forward_flops, backward_flops;
  int64_t forward_dense_flops = 0, backward_dense_flops = 0;
  std::string obstacle;  // why it has none though its input has uniform positions (glass_obstacle)
  // Why it computes its glass as tissue and only hands it on (glass_dense): then `output` is
  // uniform_through's, and the tiles' flags and FLOPs are those of a segment without glass.
  std::string dense;
  // The input's uniform positions the tiles fill from (computed_boxes): none where the segment
  // cannot skip glass, or its backward must run its glass tiles (the image's gradient).
  CellMask input;
  // The output positions the next segment may take as uniform: the backward's glass tiles and,
  // in its other tiles, the positions outside the output's computed box, whose gradient this
  // segment takes as a sum (empty where its backward skips and fills none); without a backward,
  // the forward's.
  CellMask output;

  int64_t forward_count() const;
  int64_t backward_count() const;
  bool any() const { return forward_count() + backward_count() > 0; }
  // The share of the output the forward's glass tiles cover.
  double forward_fraction(const Partition& part) const;
  // The forward FLOPs the forward's tiles do not compute (glass tiles and filled positions).
  int64_t forward_saved_flops() const;
  // Of the output checkpoint's offload blocks `blocks` (Segment::blocks: the forward partition
  // `forward`'s tiles split, so each lies in one), those a forward glass tile writes: they hold
  // the output's uniform value alone, and the store keeps that vector instead (one flag a block;
  // empty where the forward has no glass tile).
  std::vector<uint8_t> uniform_blocks(const Partition& forward, const Partition& blocks) const;
};

// Whether segment `s` runs barriers that take a statistic in this step whole, as one tile
// (WholeBarriers): it has no glass tiles (its uniform values past such a barrier are known only
// once the tile has run it) and fills its glass around boxes in which a barrier is pointwise.
bool whole_statistics(const Graph& graph, const Segment& s, bool training);

// Segment `s`'s glass tiles over `input`, its input's uniform positions. `training`: a backward
// follows; `skip_backward`: it may skip glass tiles (false where the input's gradient is wanted
// position by position: the image's, when asked for). Without a backward, the output's uniform
// positions are the forward's glass tiles.
SegmentGlass glass_tiles(const Graph& graph, const std::vector<Shape>& shapes, const Segment& s,
                         const CellMask& input, bool training, bool skip_backward);

// Segment `s`'s glass tiles in a step over `input`, its input's uniform positions: none where
// glass_obstacle says so, nor where glass_dense does (then its output's uniform positions are
// uniform_through's); the backward's none in the first segment where the image's gradient is
// wanted (`image_gradient`: it is wanted position by position; nor any uniform output then).
SegmentGlass segment_glass(const Graph& graph, const std::vector<Shape>& shapes, const Segment& s,
                           const CellMask& input, bool training, bool image_gradient);

// Whether segment `i`'s output, a resident checkpoint, keeps its glass as one vector a block
// (SparseCheckpoint) in a step whose segments' glass tiles are `glass`: where the forward has
// glass tiles and the next segment reads it tile by tile without keeping the tiles' graphs (a
// kept graph holds the tile it read; a copy across blocks would be held beside the checkpoint).
bool sparse_checkpoint(const Plan& plan, size_t i, const std::vector<SegmentGlass>& glass);

// Every segment's glass tiles in a step of `plan` on an image whose uniform positions are
// `image` (cells over the image; empty: none): each segment's input is uniform where the
// previous one's glass tiles cover it (SegmentGlass::output). `image_gradient`: the image's
// gradient is wanted (then the first segment's backward runs its glass tiles).
std::vector<SegmentGlass> plan_glass(const Graph& graph, const Plan& plan, const CellMask& image,
                                     bool training, bool image_gradient);

// What `plan`'s glass saves (GlassSummary) over `image`, given its segments' glass tiles.
GlassSummary summarize(const Plan& plan, const CellMask& image,
                       const std::vector<SegmentGlass>& glass);

}  // namespace tessel::core
