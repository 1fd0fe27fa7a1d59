// Sub-segments (SubSegments), engine-internal (the run is in sub_segments.cpp): barriers inside
// a segment without recompute rounds. The barriers' inputs (inner checkpoints,
// core/plan/geometry.h inner_checkpoints) are computed once in the forward, each over the
// shares of the forward tiles from the leaves before it (the segment's input and the earlier
// inner checkpoints), taking the barriers' statistics as they pass; the output's tiles then run
// from the leaves. Kept inner checkpoints live whole or in the tile store's blocks
// (SubSegments::tier); dropped ones are recomputed by the sub-segment that reads them. The
// backward runs the output's sub-segment, then each inner checkpoint's, latest first, so each
// op is recomputed once.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "core/exec/glass.h"
#include "core/exec/step.h"

namespace tessel::core {

class SubSegmentsRun : public SchemeRun {
 public:
  SubSegmentsRun(Step& step, int index);
  void before_forward() override;
  void schedule_forward() override { schedule_source(); }  // inner_forward scheduled the store's
  at::Tensor forward_tile(int64_t t, const Region& tile) override;
  void after_forward() override;
  at::Tensor backward(const at::Tensor& grad_out) override;

 protected:
  std::vector<Region> forward_needs(const Region& tile) const override {
    return sub_needs(s_.output, tile, tile);
  }

 private:
  // An inner checkpoint and its gradient: whole tensors, or blocks in the tile store.
  struct Inner {
    at::Tensor value, grad;
    std::unique_ptr<StoredActivation> stored_value, stored_grad;
  };
  // The forward's pass over one inner checkpoint's shares: (share, what it needs) by tile.
  struct InnerPass {
    NodeId v;
    bool dropped;
    std::vector<std::pair<Region, std::vector<Region>>> tiles;
    std::vector<Region> glass;  // the glass tiles' shares: v's uniform value there
  };
  // One sub-segment's backward over the backward tiles (shares of them for an inner
  // checkpoint): its tiles, the store's reads of each round and of the pass (which also reads
  // back the stored gradient blocks it adds into, as accumulate reaches them), and its
  // additions into stored gradients (grad_additions' pass for this sub-segment).
  struct SubPass {
    NodeId target;
    bool output;
    // Backward tile index, region at target, and what it needs.
    std::vector<std::tuple<int64_t, Region, std::vector<Region>>> tiles;
    // Glass tiles with a share of the target (not run), and of the output's, the output
    // gradient's reads (their sums are taken first).
    std::vector<std::pair<int64_t, Region>> glass;
    std::vector<TileStore::BlockId> glass_reads, reads, pass_reads;
    std::map<StoredActivation*, std::vector<Region>> adds;
  };

  // Geometry.
  std::vector<NodeId> readers(NodeId v) const;
  std::vector<NodeId> inner_nodes() const { return {leaves_.begin() + 1, leaves_.end()}; }
  std::vector<Region> sub_needs(NodeId target, const Region& r, const Region& tile) const;
  const std::vector<NodeId>& interior(NodeId target) const;
  bool offloaded() const;
  std::vector<TileStore::BlockId> tile_reads(NodeId target, const std::vector<Region>& need) const;
  // Leaves.
  at::Tensor read_leaf(NodeId l, const Region& r, bool grad);
  std::map<NodeId, TileTensor> leaf_tiles(const std::vector<Region>& need, NodeId target,
                                          bool grad);
  TileExtras leaf_extras(const std::map<NodeId, TileTensor>& given, bool hooks);
  // The same with the tile's glass filled (GlassRun::fill) over `need` up to `target`.
  TileExtras tile_extras(const std::map<NodeId, TileTensor>& given, bool hooks,
                         const std::vector<Region>& need, NodeId target, TileBoxes& boxes);
  // Forward.
  void inner_forward(bool with_statistics);
  std::vector<InnerPass> inner_passes(std::vector<TileStore::BlockId>& reads);
  void run_inner_pass(const InnerPass& p);
  void start_statistics(NodeId v);
  void add_statistics(NodeId v, const at::Tensor& x);
  void add_uniform_statistics(NodeId v, int64_t positions);
  void finish_statistics(NodeId v);
  // Backward.
  void add_grad(NodeId l, const Region& r, const at::Tensor& g);
  at::Tensor grad_at(NodeId v, const Region& r, const at::Tensor& x);
  at::Tensor sub_segment_root(const SubPass& p, const Region& tile, const Region& r, at::Tensor& y);
  SubPass sub_pass(NodeId target, bool output, const SubPass* before) const;
  void schedule(const SubPass& p);
  void run_sub_pass(const SubPass& p);
  void sums_round(const SubPass& p, NodeId b, const at::Tensor& seed);
  // Glass (core/exec/glass.h): the gradient's sum over the target's uniform positions this
  // sub-segment takes as one (its glass tiles', and what later sub-segments or the next segment
  // handed back); the chain's surrogate from it; its part of a round's sums; its backward.
  at::Tensor glass_seed(const SubPass& p);
  std::vector<NodeId> leaves_before(NodeId target) const;
  at::Tensor glass_root(const SubPass& p, const std::vector<at::Tensor>& v, const at::Tensor& seed,
                        const std::vector<at::Tensor>& fills) const;
  void glass_round(const SubPass& p, NodeId b, const at::Tensor& seed,
                   const std::vector<at::Tensor>& fills);
  void glass_backward(const SubPass& p, const at::Tensor& seed,
                      const std::vector<at::Tensor>& fills);
  void backward_tile(const SubPass& p, int64_t t, const Region& r, const std::vector<Region>& need);
  void correct_inner(NodeId v);
  void input_barriers();

  // The segment's input and its kept inner checkpoints, in order.
  std::vector<NodeId> leaves_;
  // The barriers whose inputs (dropped inner checkpoints) each sub-segment recomputes, by the
  // node it computes (the output or a kept inner checkpoint), in order.
  std::map<NodeId, std::vector<NodeId>> interior_;
  std::map<NodeId, Inner> inner_;
  bool statistics_ = false;  // inner_forward takes the barriers' statistics
  GlassRun glass_;
  // By kept inner checkpoint: the gradient's sum over its uniform positions that the glass of
  // later sub-segments handed back (added to its own sub-segment's seed).
  std::map<NodeId, at::Tensor> glass_sums_;
  // The kept inner checkpoints' uniform positions, which the tiles that read them fill from.
  std::map<NodeId, CellMask> given_;
  // The backward's: the output's gradient (whole, or in the store), the input's.
  at::Tensor grad_out_, grad_in_;
  StoredActivation* stored_grad_out_ = nullptr;
  StoredActivation* stored_grad_in_ = nullptr;
};

}  // namespace tessel::core
