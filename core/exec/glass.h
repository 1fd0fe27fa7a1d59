// Glass under tiling (core/plan/glass.h says which tiles are glass and which boxes the others
// compute), on tensors:
// - Each node's uniform value (1×C×1×1) is computed once, on a chain of one-position ops from
//   the input's (the image's background colour, or the previous segment's output value).
// - Forward: a glass tile is not run; its output is the output's value over the tile. A tile
//   that also sees tissue computes each node over its computed box only, and fills the rest of
//   the node's region with the node's value (Step::run_tile with TileExtras::fill).
// - Backward: every position holding a uniform value has the same Jacobians, so what its
//   gradient adds to the parameters' depends only on the gradient's sum over such positions, per
//   node. The fills' values are leaves that sum it (autograd's expand), the glass tiles add their
//   output gradient's sum, and one backward of the chain, seeded at each node with its sum, gives
//   all their shares at once. The sum of the chain input's gradient is what they hand the
//   previous segment's glass tiles (whose positions are the only uniform ones this segment reads:
//   the previous segment's SegmentGlass::output).
// - A one-tile segment with barriers run whole (WholeBarriers) fills too: each barrier over its
//   whole input, its value read off its output outside its boxes, the values past it chained
//   from that in the tile's own graph (take_barrier_value).
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <vector>

#include "core/exec/step.h"
#include "core/plan/glass.h"

namespace tessel::core {

// `parts` (a node's tile over each of `boxes`: disjoint, inside `r`; none where it computes
// nothing) inside its region `r`, the rest `value` (the node's uniform value, 1×C×1×1), in memory
// format `format`.
at::Tensor fill_around(const at::Tensor& value, const Region& r,
                       const std::vector<at::Tensor>& parts, const Boxes& boxes,
                       at::MemoryFormat format);

// `t` over each of `windows` (each inside it; an empty one gets `t` itself): what several boxes
// of a node read of one input, as views whose gradients autograd adds into one.
std::vector<TileTensor> crop_each(const TileTensor& t, const std::vector<Region>& windows);

class GlassRun {
 public:
  GlassRun(Step& step, int index);

  const SegmentGlass& tiles() const;
  bool forward(int64_t t) const { return tiles().forward[static_cast<size_t>(t)] != 0; }
  bool backward(int64_t t) const { return tiles().backward[static_cast<size_t>(t)] != 0; }

  // Before the forward's tiles: every node's uniform value (where the segment has glass).
  void before_forward();
  // Glass tile `tile`'s output: the uniform value over it.
  at::Tensor output_tile(const Region& tile) const;
  // What a tile over `need` (segment_needs up to `last`, the output when -1) fills: `extras`
  // gets what it holds and computes of each node and the nodes' values, unless the segment
  // fills nothing. `boxes` holds the regions meanwhile.
  // `given`: nodes whose tiles are given (sub-segments' leaves), with their uniform positions.
  // A segment that runs its barriers whole (WholeBarriers) fills from the tile's own values:
  // those before its first barrier, then each barrier's as the tile runs it and those past it
  // (take_barrier_value).
  void fill(const std::vector<Region>& need, TileBoxes& boxes, TileExtras& extras, NodeId last = -1,
            const std::map<NodeId, CellMask>* given = nullptr);
  // The tile's root plus, where the output's value is the tile's own (past a barrier it runs
  // whole), the gradient's sum over the glass the next segment took from it, seeded there.
  at::Tensor tile_root(at::Tensor root);
  // Whether the other tiles fill (the input has uniform positions the tiles fill from).
  bool fills() const { return !tiles().input.none(); }
  // By node: the gradient's sum at the fills since the last call (float64; undefined where
  // none), taken.
  std::vector<at::Tensor> take_fill_grads();
  // A node's uniform value (undefined past a barrier whose statistic is not yet taken).
  const at::Tensor& value(NodeId v) const { return values_.at(static_cast<size_t>(v)); }
  // After a barrier's statistic: the values past it (RecomputeRounds' statistic passes).
  void refresh();
  // Backward glass tile `t`: its output gradient's sum joins the chain's seed. `grad_out`,
  // `stored_grad_out`: the output's gradient as the segment's backward has it.
  void add_output_grad(const Region& tile, const at::Tensor& grad_out,
                       StoredActivation* stored_grad_out);
  // The glass tiles' output gradient summed (add_output_grad) and what the next segment's glass
  // handed back, taken (undefined where neither).
  at::Tensor take_output_seed();
  // Sub-segments (core/exec/schemes/sub_segments.h): the chain from `leaves` (each a new leaf
  // holding its node's uniform value and requiring a gradient) to `target`, by node.
  std::vector<at::Tensor> sub_chain(const std::vector<NodeId>& leaves, NodeId target) const;

  // Split over ranks, a one-tile segment with barriers (WholeBarriers) runs on one rank (`ran`):
  // after its forward every rank takes the output's uniform value from that rank's tile; before
  // its backward that rank takes every rank's part of the glass gradient the next segment handed
  // back (the others keep none, so the parts are counted once). Collectives: every rank calls.
  void share_whole_value(bool ran);
  void gather_whole_seed(bool ran);

  // After the backward's tiles: the chain's backward (the glass tiles' and fills' shares of the
  // parameters' gradients; the sum of the input's gradient to the previous segment).
  void after_backward();

  // RecomputeRounds' sums passes. A round's glass tile adds its output gradient's sum, a tile
  // that runs the gradient's sums at its fills (`grads` of the leaves fill_leaves names); then
  // finish_round adds the uniform positions' share to the round's barriers' sums.
  void add_round_output_grad(const Region& tile, const at::Tensor& grad_out,
                             StoredActivation* stored_grad_out);
  std::vector<NodeId> fill_leaves(std::vector<at::Tensor>& leaves) const;
  void add_round_fill_grads(const std::vector<NodeId>& nodes, const std::vector<at::Tensor>& grads);
  void finish_round(const std::vector<NodeId>& round);

 private:
  // The nodes' uniform values from the input's `x` (1×C×1×1), by node of (input, output].
  std::vector<at::Tensor> chain(const at::Tensor& x) const;
  void chain_from(std::vector<at::Tensor>& v, NodeId last) const;
  at::Tensor chain_root(const std::vector<at::Tensor>& v,
                        const std::vector<at::Tensor>& seeds) const;
  int64_t glass_share(NodeId b) const;
  void take_barrier_value(NodeId b, const at::Tensor& value);
  at::Tensor output_grad_sum(const Region& tile, const at::Tensor& grad_out,
                             StoredActivation* stored_grad_out);

  Step& step_;
  int index_;
  const Segment& s_;
  std::vector<at::Tensor> values_;  // by node: the leaves the tiles fill from
  // WholeBarriers: the tile's values (values_, then each barrier's and those past it), kept from
  // the forward to the backward where the tile keeps its graph.
  std::vector<at::Tensor> tile_values_;
  at::Tensor grad_sum_;
  struct Round {
    at::Tensor output;              // the glass tiles' output gradient, summed
    std::vector<at::Tensor> fills;  // by node: the gradient at the fills, summed
  } round_;
};

}  // namespace tessel::core
