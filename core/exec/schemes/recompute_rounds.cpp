// Recompute rounds (RecomputeRounds): plain tiles around barriers that need whole-image
// statistics (core/exec/barrier.h, docs/barriers.md). The forward first takes each barrier's
// statistic in a pass over its input's shares; the backward first takes each barrier's gradient
// sums in rounds, latest barrier first; then the tiles run as plain tiles, each backward tile
// adding the barriers' corrections.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "core/exec/schemes/plain_tiles.h"
#include "core/plan/geometry.h"

namespace tessel::core {

namespace {

class RoundsRun : public TilesRun {
 public:
  RoundsRun(Step& step, int index) : TilesRun(step, index), barriers_(step.barriers(s_)) {}

  void before_forward() override {
    TilesRun::before_forward();
    statistic_passes();
  }

 protected:
  bool has_barriers() const override { return true; }
  void before_backward(const at::Tensor& grad_out) override { sums_passes(grad_out); }
  at::Tensor corrections(const Region& tile, at::Tensor root,
                         const std::map<NodeId, TileTensor>& acts) override {
    return step_.add_corrections(s_, tile, std::move(root), acts, barriers_);
  }

 private:
  void statistic_passes();
  void schedule_sums(size_t rounds);
  void sums_passes(const at::Tensor& grad_out);
  void sums_tile(const std::vector<NodeId>& round, int64_t t, const at::Tensor& grad_out);

  std::vector<NodeId> barriers_;  // those that need statistics, in order
};

// For each barrier in order, its input recomputed over the shares of the forward tiles (a
// partition of it) and added to its statistic; the earlier barriers run with theirs. Batch
// norm's running statistics are updated once, here.
void RoundsRun::statistic_passes() {
  for (NodeId b : barriers_) {
    const Node& node = step_.graph().node(b);
    const NodeId in = node.inputs[0];
    auto state = std::make_unique<BarrierState>(node, step_.tensor_options(), step_.ranks());
    std::vector<std::pair<Region, std::vector<Region>>> tiles;
    int64_t glass_positions = 0;  // the glass tiles' shares: the input's uniform value there
    for (int64_t t = 0; t < s_.forward.tiles(); ++t) {
      const Region r = step_.share(s_, b, s_.forward.tile(t));
      if (r.empty() || !step_.runs(index_, Pass::kForward, t)) continue;  // another rank's
      if (glass_.forward(t)) {
        glass_positions += r.area();
        continue;
      }
      tiles.emplace_back(r, segment_needs(step_.graph(), step_.plan().shapes, s_.input, in, r));
      if (const auto& stored = step_.stored(s_.input)) {
        step_.store()->schedule(stored->reads(tiles.back().second[static_cast<size_t>(s_.input)]));
      }
    }
    for (const auto& [r, need] : tiles) {
      const Region& in_region = need[static_cast<size_t>(s_.input)];
      TileBoxes boxes;
      TileExtras extras;
      glass_.fill(need, boxes, extras, in);
      state->add_input(step_.run_tile(s_.input, in, need, step_.read_input(s_, in_region), extras));
    }
    if (glass_positions > 0) state->add_uniform_input(glass_.value(in), glass_positions);
    state->finish_statistics(/*update_running=*/step_.training());
    step_.barrier_state(b) = std::move(state);
    glass_.refresh();  // the uniform values past this barrier
  }
}

// Every round's reads scheduled now, so the store reads the next round's first blocks while
// this one's last tiles run.
void RoundsRun::schedule_sums(size_t rounds) {
  TileStore* store = step_.store();
  if (store == nullptr) return;
  StoredActivation* stored_in = step_.stored(s_.input).get();
  StoredActivation* stored_grad_out = step_.stored_grad(s_.output).get();
  std::vector<TileStore::BlockId> reads;
  for (int64_t t = s_.backward.tiles() - 1; t >= 0; --t) {
    if (!step_.runs(index_, Pass::kBackward, t)) continue;  // another rank's
    const Region tile = s_.backward.tile(t);
    if (stored_in != nullptr && !glass_.backward(t)) {  // a glass tile reads no input
      const auto ids = stored_in->reads(needs(tile)[static_cast<size_t>(s_.input)]);
      reads.insert(reads.end(), ids.begin(), ids.end());
    }
    if (stored_grad_out != nullptr) {
      const auto ids = stored_grad_out->reads(tile);
      reads.insert(reads.end(), ids.begin(), ids.end());
    }
  }
  for (size_t k = 0; k < rounds && !reads.empty(); ++k) store->schedule(reads);
}

// A barrier's correction needs the gradient at its output summed over the image, which
// includes the corrections of the barriers after it. So the barriers go in rounds, latest
// first; each round recomputes the segment's tiles and takes the gradient at its barriers'
// outputs (nothing else: the parameters' gradients come in the main pass).
void RoundsRun::sums_passes(const at::Tensor& grad_out) {
  const auto rounds = barrier_rounds(step_.graph(), s_.input, s_.output);
  schedule_sums(rounds.size());
  for (const std::vector<NodeId>& round : rounds) {
    for (int64_t t = s_.backward.tiles() - 1; t >= 0; --t) {
      if (step_.runs(index_, Pass::kBackward, t)) sums_tile(round, t, grad_out);
    }
    glass_.finish_round(round);  // the uniform positions' part of the sums
    for (NodeId b : round) step_.barrier_state(b)->finish_sums();
  }
}

// Backward tile `t`'s part of `round`'s sums.
void RoundsRun::sums_tile(const std::vector<NodeId>& round, int64_t t, const at::Tensor& grad_out) {
  const Region tile = s_.backward.tile(t);
  if (glass_.backward(t)) {
    glass_.add_round_output_grad(tile, grad_out, step_.stored_grad(s_.output).get());
    return;
  }
  const std::vector<Region> need = needs(tile);
  const Region& in_region = need[static_cast<size_t>(s_.input)];
  at::AutoGradMode grad_mode(true);
  std::map<NodeId, TileTensor> acts;
  // The input requires a gradient so that every barrier output does (a squeeze-and-excitation
  // on the segment's input has no parameter in its tile form); only the barriers' output
  // gradients are computed.
  at::Tensor x = step_.read_input(s_, in_region).tensor.detach().requires_grad_(true);
  TileExtras extras;
  extras.barrier_acts = &acts;
  TileBoxes boxes;
  glass_.fill(need, boxes, extras);
  at::Tensor y = step_.run_tile(s_.input, s_.output, need, {std::move(x), in_region}, extras);
  at::Tensor root = step_.output_root(s_, tile, y, grad_out, step_.stored_grad(s_.output).get());
  root = step_.add_corrections(s_, tile, root, acts, barriers_);
  std::vector<NodeId> wanted;
  std::vector<at::Tensor> outputs;
  for (NodeId b : round) {
    const TileTensor& out = acts[b];
    if (out.tensor.defined() && out.tensor.requires_grad() && !out.region.empty()) {
      wanted.push_back(b);
      outputs.push_back(out.tensor);
    }
  }
  // The fills' leaves too: the gradient at the positions they fill, summed (GlassRun).
  const size_t barrier_outputs = outputs.size();
  const std::vector<NodeId> leaf_nodes = glass_.fill_leaves(outputs);
  if (!root.defined() || !root.requires_grad() || outputs.empty()) return;
  const auto grads = torch::autograd::grad({root}, outputs, {}, /*retain_graph=*/false,
                                           /*create_graph=*/false, /*allow_unused=*/true);
  glass_.add_round_fill_grads(
      leaf_nodes, std::vector<at::Tensor>(
                      grads.begin() + static_cast<std::ptrdiff_t>(barrier_outputs), grads.end()));
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (!grads[i].defined()) continue;
    const Node& node = step_.graph().node(wanted[i]);
    const Region& r = acts[wanted[i]].region;
    step_.barrier_state(wanted[i])->add_output_grad(crop(acts[node.inputs[0]], r).detach(),
                                                    grads[i]);
  }
}

}  // namespace

std::unique_ptr<SchemeRun> recompute_rounds_run(Step& step, int index) {
  return std::make_unique<RoundsRun>(step, index);
}

}  // namespace tessel::core
