// Shared rows (SharedRows; LR-CNN's two-phase sharing, `rows-shared`): the segment runs in
// rows, top to bottom, each row computing only what no earlier row computed and keeping for
// the next the rows it will read again (core/exec/shared_row.h; their geometry: shared_row in
// core/plan/geometry.h). The backward goes bottom to top, each row handing back the gradient
// of the rows it inherited to the row that kept them. Kept rows live with the step, or in the
// tile store (SharedRows::kept_tier); with keep_graph the rows' graphs are kept, chained
// through their kept rows, and one backward runs over all of them.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <map>
#include <utility>

#include "core/error.h"
#include "core/exec/shared_row.h"
#include "core/exec/step.h"

namespace tessel::core {

namespace {

class SharedRowsRun : public SchemeRun {
 public:
  using SchemeRun::SchemeRun;
  std::vector<Region> needs(const Region& tile) const override { return row_of(tile.y).held; }
  void before_forward() override;
  at::Tensor forward_tile(int64_t t, const Region& tile) override;
  void after_forward() override;
  at::Tensor backward(const at::Tensor& grad_out) override;

 private:
  const SharedRow& row_of(Window rows) const;
  bool stored() const;
  at::Tensor run_row(const SharedRow& row, TileTensor input,
                     const std::vector<at::Tensor>& inherited, std::vector<at::Tensor>* kept,
                     const std::vector<at::Tensor>* handed = nullptr);
  const std::vector<at::Tensor>& kept_before(int64_t t) const;
  at::Tensor keep_graph_tile(int64_t t, const Region& in_region, const SharedRow& row);
  at::Tensor keep_last_tile(int64_t t, const Region& in_region, const SharedRow& row);
  void put_kept(int64_t t);
  void schedule_backward(StoredActivation* stored_in, StoredActivation* stored_grad_out);
  std::vector<at::Tensor> inherited_rows(int64_t t);
  at::Tensor backward_row(int64_t t, const at::Tensor& grad_out, StoredActivation* stored_grad_out);
  at::Tensor kept_graphs_backward(const at::Tensor& grad_out);

  // What each row kept for the next, by row and node, until the backward has used them; their
  // blocks in the tile store, by row and node (-1: none), when they live there.
  std::vector<std::vector<at::Tensor>> shared_;
  std::vector<std::vector<TileStore::BlockId>> shared_ids_;
  // Each row's geometry, worked out once a step: the forward, the store's schedule and the
  // backward each ask for it, and its cost grows with the segment's depth (bench/NOTES.md,
  // sessions 30-31).
  mutable std::map<std::pair<int64_t, int64_t>, SharedRow> rows_;
  KeptTiles kept_;                       // rows that keep their graphs
  std::vector<at::Tensor> last_leaves_;  // the inherited rows of a kept last row
  std::vector<at::Tensor>
      handed_back_;  // the backward's: the gradient for the row above's kept rows
};

const SharedRow& SharedRowsRun::row_of(Window rows) const {
  auto it = rows_.find({rows.begin, rows.end});
  if (it == rows_.end()) {
    it = rows_
             .emplace(std::pair{rows.begin, rows.end},
                      shared_row(step_.graph(), step_.plan().shapes, s_.input, s_.output, rows))
             .first;
  }
  return it->second;
}

// The kept rows live in the tile store (SharedRows::kept_tier).
bool SharedRowsRun::stored() const {
  return step_.training() && step_.store() != nullptr && s_.shared_tier() != Tier::kResident;
}

at::Tensor SharedRowsRun::run_row(const SharedRow& row, TileTensor input,
                                  const std::vector<at::Tensor>& inherited,
                                  std::vector<at::Tensor>* kept,
                                  const std::vector<at::Tensor>* handed) {
  return SharedRowRunner(step_.graph(), step_.plan().shapes, s_.input, s_.output)
      .run(row, step_.in_tile_format(std::move(input)), inherited, kept, handed);
}

const std::vector<at::Tensor>& SharedRowsRun::kept_before(int64_t t) const {
  static const std::vector<at::Tensor> none;
  return t > 0 ? shared_[static_cast<size_t>(t) - 1] : none;
}

void SharedRowsRun::before_forward() {
  shared_.assign(static_cast<size_t>(s_.forward.tiles()), {});
  shared_ids_.clear();
  kept_.reset(s_.forward.tiles());
}

at::Tensor SharedRowsRun::forward_tile(int64_t t, const Region& tile) {
  const SharedRow& row = row_of(tile.y);
  const Region& in_region = row.held[static_cast<size_t>(s_.input)];
  const bool last = index_ + 1 == step_.segments();
  if (step_.training() && s_.keeps_graph()) return keep_graph_tile(t, in_region, row);
  if (step_.training() && last && !stored() && t + 1 == s_.forward.tiles()) {
    return keep_last_tile(t, in_region, row);
  }
  at::Tensor y = run_row(row, step_.read_input(s_, in_region), kept_before(t),
                         &shared_[static_cast<size_t>(t)]);
  if (stored() && t + 1 < s_.forward.tiles()) put_kept(t);
  // Inference has no backward to keep them for; stored ones are in the store.
  if ((!step_.training() || stored()) && t > 0) shared_[static_cast<size_t>(t) - 1].clear();
  return y;
}

// Rows chained through their kept rows (views, with autograd): the segment's graph, row by
// row, for one backward over all of them (kept_graphs_backward).
at::Tensor SharedRowsRun::keep_graph_tile(int64_t t, const Region& in_region,
                                          const SharedRow& row) {
  at::Tensor y = kept_.keep(
      t, step_.wants_input_grad(s_), [&] { return step_.read_input(s_, in_region); },
      [&](const TileTensor& x) {
        return run_row(row, x, kept_before(t), &shared_[static_cast<size_t>(t)]);
      });
  if (t > 0) shared_[static_cast<size_t>(t) - 1].clear();  // the graph holds them
  return y;
}

// The last row of the last segment keeps its graph: the backward starts with it. Its
// inherited rows are leaves, as in the backward's recompute.
at::Tensor SharedRowsRun::keep_last_tile(int64_t t, const Region& in_region, const SharedRow& row) {
  last_leaves_.clear();
  for (const at::Tensor& k : kept_before(t)) {
    last_leaves_.push_back(k.defined() ? k.detach().requires_grad_(true) : at::Tensor());
  }
  return kept_.keep(
      t, step_.wants_input_grad(s_), [&] { return step_.read_input(s_, in_region); },
      [&](const TileTensor& x) { return run_row(row, x, last_leaves_, nullptr); });
}

// Row `t`'s kept rows to the store: each node's a block (any shape and dtype).
void SharedRowsRun::put_kept(int64_t t) {
  std::vector<TileStore::BlockId> ids;
  for (const at::Tensor& k : shared_[static_cast<size_t>(t)]) {
    ids.push_back(k.defined() ? step_.store()->put(k, s_.shared_tier()) : -1);
  }
  shared_ids_.push_back(std::move(ids));
}

void SharedRowsRun::after_forward() {
  if (!stored()) return;
  for (auto& kept : shared_) kept.clear();  // in the store
}

// The store's reads in the order the rows make them: the input's held rows (unless the row
// kept its graph, or the previous segment already scheduled them), the rows the row above
// kept, the output gradient's rows.
void SharedRowsRun::schedule_backward(StoredActivation* stored_in,
                                      StoredActivation* stored_grad_out) {
  TileStore* store = step_.store();
  if (store == nullptr) return;
  for (int64_t t = s_.backward.tiles() - 1; t >= 0; --t) {
    const Region tile = s_.backward.tile(t);
    const bool prescheduled = step_.prescheduled(index_, true) && t == s_.backward.tiles() - 1;
    if (stored_in != nullptr && !kept_.has(t) && !prescheduled) {
      store->schedule(stored_in->reads(needs(tile)[static_cast<size_t>(s_.input)]));
    }
    if (stored() && t > 0) {
      std::vector<TileStore::BlockId> ids;
      for (TileStore::BlockId id : shared_ids_.at(static_cast<size_t>(t) - 1)) {
        if (id >= 0) ids.push_back(id);
      }
      store->schedule(ids);
    }
    if (stored_grad_out != nullptr) store->schedule(stored_grad_out->reads(tile));
  }
}

at::Tensor SharedRowsRun::backward(const at::Tensor& grad_out) {
  if (s_.keeps_graph()) return kept_graphs_backward(grad_out);
  StoredActivation* stored_in = step_.stored(s_.input).get();
  StoredActivation* stored_grad_out = step_.stored_grad(s_.output).get();
  StoredActivation* stored_grad_in = stored_input_grad_by_tiles();
  schedule_backward(stored_in, stored_grad_out);
  handed_back_.clear();
  return run_backward_tiles(stored_grad_in, [&](int64_t t, const std::vector<Region>& /*need*/) {
    return backward_row(t, grad_out, stored_grad_out);
  });
}

// The rows row `t - 1` kept (the forward's copies, or the store's), as leaves whose gradient
// goes back to it.
std::vector<at::Tensor> SharedRowsRun::inherited_rows(int64_t t) {
  std::vector<at::Tensor> inherited;
  if (t == 0) return inherited;
  auto& kept = shared_.at(static_cast<size_t>(t) - 1);
  if (stored()) {
    const auto& ids = shared_ids_.at(static_cast<size_t>(t) - 1);
    kept.assign(ids.size(), at::Tensor());
    for (size_t v = 0; v < ids.size(); ++v) {
      if (ids[v] < 0) continue;
      kept[v] = step_.store()->get(ids[v]);
      step_.store()->erase(ids[v]);
    }
  }
  for (const at::Tensor& k : kept) {
    inherited.push_back(k.defined() ? k.detach().requires_grad_(true) : at::Tensor());
  }
  return inherited;
}

// Row `t`'s backward, bottom to top: recomputed from its input and inherited rows (or its
// graph, kept from the forward's last row), seeded at its output and at the rows it kept for
// the row below (with the gradient that row handed back). Returns its input tile, whose
// gradient is the input's there, and hands back its inherited rows' gradient.
at::Tensor SharedRowsRun::backward_row(int64_t t, const at::Tensor& grad_out,
                                       StoredActivation* stored_grad_out) {
  const Region tile = s_.backward.tile(t);
  const SharedRow& row = row_of(tile.y);
  const Region& in_region = row.held[static_cast<size_t>(s_.input)];
  auto [x, y] = backward_input(kept_, t, in_region);
  // Without its gradient wanted, the input row is autograd's alone to keep (as TilesRun's
  // backward_tile: a border row's first op saves a padded copy in its place).
  const at::Tensor input_for_grad = x.defined() && x.requires_grad() ? x : at::Tensor();
  at::AutoGradMode grad_mode(true);
  std::vector<at::Tensor> inherited, kept_views;
  if (y.defined()) {
    // The forward's last row, graph kept: it keeps no rows for a next one.
    inherited = std::move(last_leaves_);
    last_leaves_.clear();
  } else {
    inherited = inherited_rows(t);
    y = run_row(row, {std::move(x), in_region}, inherited, &kept_views, &handed_back_);
  }
  at::Tensor root = step_.output_root(s_, tile, y, grad_out, stored_grad_out);
  // The next row's gradient of the rows this one kept for it.
  for (size_t v = 0; v < handed_back_.size() && v < kept_views.size(); ++v) {
    const at::Tensor& g = handed_back_[v];
    if (!g.defined() || !kept_views[v].defined() || !kept_views[v].requires_grad()) continue;
    const at::Tensor seed = seeded(kept_views[v], g);
    root = root.defined() ? root + seed : seed;
  }
  kept_views.clear();
  handed_back_.clear();
  if (root.defined() && root.requires_grad()) root.backward();
  for (const at::Tensor& leaf : inherited) {
    handed_back_.push_back(leaf.defined() ? leaf.grad() : at::Tensor());
  }
  if (t > 0) shared_[static_cast<size_t>(t) - 1].clear();
  return input_for_grad;
}

// The rows' graphs are chained through their kept rows, so one backward runs over all of them,
// from every row's output gradient at once (each row's kept rows get their gradient from the
// row below within it). Only resident checkpoints (the planner keeps no graph by the store).
at::Tensor SharedRowsRun::kept_graphs_backward(const at::Tensor& grad_out) {
  at::Tensor root;
  for (int64_t t = s_.backward.tiles() - 1; t >= 0; --t) {
    step_.emit(index_, s_.backward, t, TileEvent::kBackward, false);
    at::Tensor y = std::move(kept_.at(t).output);
    at::Tensor r = step_.output_root(s_, s_.backward.tile(t), y, grad_out, nullptr);
    if (r.defined() && r.requires_grad()) root = root.defined() ? root + r : r;
  }
  shared_.clear();
  if (root.defined()) {
    at::AutoGradMode grad_mode(true);
    root.backward();
  }
  at::Tensor grad_in;
  for (int64_t t = s_.backward.tiles() - 1; t >= 0; --t) {
    KeptTiles::Tile& k = kept_.at(t);
    const Region in_region = needs(s_.backward.tile(t))[static_cast<size_t>(s_.input)];
    if (step_.wants_input_grad(s_) && k.input.defined() && k.input.grad().defined() &&
        !in_region.empty()) {
      step_.add_into(grad_in, s_.input, in_region, k.input.grad());
    }
    k = {};
    ++step_.backward_tiles;
    step_.emit(index_, s_.backward, t, TileEvent::kBackward, true);
  }
  return input_grad_result(nullptr, grad_in);
}

}  // namespace

std::unique_ptr<SchemeRun> shared_rows_run(Step& step, int index) {
  return std::make_unique<SharedRowsRun>(step, index);
}

}  // namespace tessel::core
