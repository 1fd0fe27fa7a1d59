#include "core/exec/schemes/plain_tiles.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

namespace tessel::core {

std::unique_ptr<SchemeRun> plain_tiles_run(Step& step, int index) {
  return std::make_unique<TilesRun>(step, index);
}

void TilesRun::before_forward() {
  // The forward of a one-tile segment with barriers updates batch norm's running statistics
  // (once: the backward's recompute leaves them).
  step_.set_update_running(step_.training() && s_.is<WholeBarriers>());
  kept_.reset(s_.forward.tiles());
  glass_.before_forward();
}

// Split over ranks, one rank ran a whole-barrier segment's tile: every rank takes its running
// statistics, and its output's uniform value where the tile filled glass.
void TilesRun::after_forward() {
  step_.set_update_running(false);
  if (step_.ranks() == nullptr || !s_.is<WholeBarriers>()) return;
  const bool ran = step_.runs(index_, Pass::kForward, 0);
  if (step_.training()) {
    share_running_statistics(step_.graph(), s_.input, s_.output, ran, *step_.ranks());
  }
  glass_.share_whole_value(ran);
}

// A segment the plan keeps runs every tile with autograd and keeps its graph for the backward
// (core/plan/plan.h). Otherwise the last segment's last tile does when the backward uses the
// same tiles: backward starts with it, so it is not recomputed (for a one-tile plan, no
// recompute at all). Its graph is no larger than that tile's backward.
bool TilesRun::keeps(int64_t t) const {
  if (!step_.training() || glass_.forward(t)) return false;
  if (s_.keeps_graph()) return true;
  const bool same_tiles =
      s_.forward.y_edges == s_.backward.y_edges && s_.forward.x_edges == s_.backward.x_edges;
  const bool last = index_ + 1 == step_.segments();
  return last && same_tiles && !has_barriers() && t + 1 == s_.forward.tiles();
}

at::Tensor TilesRun::forward_tile(int64_t t, const Region& tile) {
  if (glass_.forward(t)) return glass_.output_tile(tile);
  const std::vector<Region> need = needs(tile);
  const Region& in_region = need[static_cast<size_t>(s_.input)];
  TileBoxes boxes;
  TileExtras extras;
  glass_.fill(need, boxes, extras);
  if (!keeps(t)) {
    return step_.run_tile(s_.input, s_.output, need, step_.read_input(s_, in_region), extras);
  }
  return kept_.keep(
      t, step_.wants_input_grad(s_), [&] { return step_.read_input(s_, in_region); },
      [&](const TileTensor& x) { return step_.run_tile(s_.input, s_.output, need, x, extras); });
}

// The store's reads in the order the tiles make them: the input tile (unless the tile kept its
// graph from the forward, or the previous segment already scheduled it), then the output
// gradient's tile.
void TilesRun::schedule_backward(StoredActivation* stored_in, StoredActivation* stored_grad_out) {
  TileStore* store = step_.store();
  if (store == nullptr) return;
  for (int64_t t = s_.backward.tiles() - 1; t >= 0; --t) {
    if (!step_.runs(index_, Pass::kBackward, t)) continue;  // another rank's
    const Region tile = s_.backward.tile(t);
    const bool prescheduled =
        step_.prescheduled(index_, true) && t == s_.backward.tiles() - 1 && !has_barriers();
    if (stored_in != nullptr && !kept_.has(t) && !prescheduled && !glass_.backward(t)) {
      store->schedule(stored_in->reads(needs(tile)[static_cast<size_t>(s_.input)]));
    }
    if (stored_grad_out != nullptr) store->schedule(stored_grad_out->reads(tile));
  }
}

at::Tensor TilesRun::backward(const at::Tensor& grad_out) {
  if (step_.ranks() != nullptr && s_.is<WholeBarriers>()) {
    glass_.gather_whole_seed(step_.runs(index_, Pass::kBackward, 0));
  }
  StoredActivation* stored_in = step_.stored(s_.input).get();
  StoredActivation* stored_grad_out = step_.stored_grad(s_.output).get();
  StoredActivation* stored_grad_in = stored_input_grad_by_tiles();
  before_backward(grad_out);
  schedule_backward(stored_in, stored_grad_out);
  // Tiles in reverse order: kept tiles give their graphs back; glass tiles give their output
  // gradient's sum to the column, which runs after them.
  at::Tensor grad_in =
      run_backward_tiles(stored_grad_in, [&](int64_t t, const std::vector<Region>& need) {
        if (!glass_.backward(t)) return backward_tile(t, need, grad_out, stored_grad_out);
        glass_.add_output_grad(s_.backward.tile(t), grad_out, stored_grad_out);
        ++step_.glass_backward_tiles;
        return at::Tensor();
      });
  glass_.after_backward();
  return grad_in;
}

// Backward tile `t` over `need`: its graph kept from the forward, else recomputed. Returns its
// input tile, whose gradient is the input's there.
at::Tensor TilesRun::backward_tile(int64_t t, const std::vector<Region>& need,
                                   const at::Tensor& grad_out, StoredActivation* stored_grad_out) {
  const Region tile = s_.backward.tile(t);
  const Region& in_region = need[static_cast<size_t>(s_.input)];
  auto [x, y] = backward_input(kept_, t, in_region);
  // Without its gradient wanted, the input tile is autograd's alone to keep: held here too, it
  // stayed beside the padded copy a border tile's first op saves in its place (tiny 910×872,
  // rows: a border tile 25.2 MiB, an inner one 22.9; bench/NOTES.md session 71).
  const at::Tensor input_for_grad = x.defined() && x.requires_grad() ? x : at::Tensor();
  at::AutoGradMode grad_mode(true);
  std::map<NodeId, TileTensor> acts;
  if (!y.defined()) {
    TileExtras extras;
    TileBoxes boxes;
    glass_.fill(need, boxes, extras);
    if (has_barriers()) extras.barrier_acts = &acts;
    y = step_.run_tile(s_.input, s_.output, need, {std::move(x), in_region}, extras);
  }
  at::Tensor root = step_.output_root(s_, tile, y, grad_out, stored_grad_out);
  root = glass_.tile_root(corrections(tile, root, acts));
  acts.clear();
  if (root.defined() && root.requires_grad()) root.backward();
  return input_for_grad;
}

}  // namespace tessel::core
