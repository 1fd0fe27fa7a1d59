// What every scheme's run shares (exec/step.h SchemeRun, KeptTiles), and the dispatch from a
// segment's scheme to its run.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "core/exec/step.h"
#include "core/plan/geometry.h"

namespace tessel::core {

SchemeRun::SchemeRun(Step& step, int index) : step_(step), index_(index), s_(step.segment(index)) {}

std::vector<Region> SchemeRun::needs(const Region& tile) const {
  return segment_needs(step_.graph(), step_.plan().shapes, s_.input, s_.output, tile);
}

void SchemeRun::schedule_source() {
  if (s_.input != 0) return;
  std::vector<Region> schedule;
  for (int64_t t = 0; t < s_.forward.tiles(); ++t) {
    if (step_.glass(index_).forward[static_cast<size_t>(t)] != 0) continue;  // not read
    if (!step_.runs(index_, Pass::kForward, t)) continue;                    // another rank's
    schedule.push_back(forward_needs(s_.forward.tile(t))[0]);
  }
  step_.source().will_read(schedule);
}

void SchemeRun::schedule_forward() {
  schedule_source();
  const auto& stored_in = step_.stored(s_.input);
  if (!stored_in || s_.input == 0) return;
  for (int64_t t = step_.prescheduled(index_, false) ? 1 : 0; t < s_.forward.tiles(); ++t) {
    if (step_.glass(index_).forward[static_cast<size_t>(t)] != 0) continue;
    if (!step_.runs(index_, Pass::kForward, t)) continue;  // another rank's
    step_.store()->schedule(stored_in->reads(needs(s_.forward.tile(t))[s_.input]));
  }
}

StoredActivation* SchemeRun::stored_input_grad() {
  if (!step_.wants_input_grad(s_) || !step_.stored(s_.input)) return nullptr;
  const Segment& producer = step_.segment(index_ - 1);
  auto& g = step_.stored_grad(s_.input);
  g = std::make_unique<StoredActivation>(*step_.store(), step_.shape(s_.input),
                                         s_.input_grad_blocks, producer.tier,
                                         step_.tensor_options());
  return g.get();
}

void SchemeRun::add_input_grad(StoredActivation* stored, at::Tensor& grad_in, const Region& r,
                               const at::Tensor& g) {
  if (stored != nullptr) {
    stored->accumulate(r, g);
  } else {
    step_.add_into(grad_in, s_.input, r, g);
  }
}

at::Tensor SchemeRun::input_grad_result(StoredActivation* stored, at::Tensor grad_in) {
  if (stored != nullptr && step_.split()) {
    const std::vector<Region> held = step_.held_gradient(index_);
    stored->finish_additions(&held);
    return {};
  }
  if (stored != nullptr) {
    stored->finish_additions();
    return {};
  }
  if (step_.wants_input_grad(s_) && !grad_in.defined()) grad_in = step_.held_zeros(s_.input);
  return grad_in;
}

at::Tensor KeptTiles::keep(int64_t t, bool grad, const std::function<TileTensor()>& read,
                           const std::function<at::Tensor(const TileTensor&)>& run) {
  at::AutoGradMode grad_mode(true);
  Tile& k = at(t);
  const TileTensor input = read();
  k.input = input.tensor.detach();
  if (grad) k.input.requires_grad_(true);
  k.output = run({k.input, input.region});
  // Without its gradient wanted, the input tile is the graph's alone to keep (what its first op
  // saved): held here too, it stayed to the tile's backward beside the padded copy a border
  // tile's first op saves (tiny, slide_003, shared rows: the last row's backward 30.3 MiB, a
  // recomputed row's 27.6; bench/NOTES.md session 72).
  if (!grad) k.input = at::Tensor();
  return k.output.detach();
}

std::pair<at::Tensor, at::Tensor> KeptTiles::take(int64_t t) {
  if (!has(t)) return {};
  Tile& k = at(t);
  std::pair<at::Tensor, at::Tensor> out{std::move(k.input), std::move(k.output)};
  k = {};
  return out;
}

std::pair<at::Tensor, at::Tensor> SchemeRun::backward_input(KeptTiles& kept, int64_t t,
                                                            const Region& in_region) {
  auto [x, y] = kept.take(t);
  if (y.defined()) return {x, y};
  x = step_.read_input(s_, in_region).tensor.detach();
  if (step_.wants_input_grad(s_)) x.requires_grad_(true);
  return {x, y};
}

// The input's gradient goes to the store block by block, each after its last addition; the
// blocks follow this segment's backward tiles (core/plan/plan.h).
StoredActivation* SchemeRun::stored_input_grad_by_tiles() {
  StoredActivation* stored = stored_input_grad();
  if (stored == nullptr) return nullptr;
  std::vector<Region> additions;
  for (int64_t t = s_.backward.tiles() - 1; t >= 0; --t) {
    if (step_.glass(index_).backward[static_cast<size_t>(t)] != 0) continue;  // adds nothing
    if (!step_.runs(index_, Pass::kBackward, t)) continue;                    // another rank's
    additions.push_back(needs(s_.backward.tile(t))[static_cast<size_t>(s_.input)]);
  }
  stored->expect_additions(additions);
  return stored;
}

at::Tensor SchemeRun::run_backward_tiles(StoredActivation* stored_grad_in,
                                         const BackwardTile& tile) {
  at::Tensor grad_in;
  for (int64_t t = s_.backward.tiles() - 1; t >= 0; --t) {
    if (!step_.runs(index_, Pass::kBackward, t)) continue;  // another rank's (Step::split)
    if (t == 0 && step_.store() != nullptr) step_.preschedule(index_ - 1, /*backward=*/true);
    step_.emit(index_, s_.backward, t, TileEvent::kBackward, false);
    const std::vector<Region> need = needs(s_.backward.tile(t));
    const Region& in_region = need[static_cast<size_t>(s_.input)];
    const at::Tensor x = tile(t, need);
    if (step_.wants_input_grad(s_) && x.defined() && x.grad().defined() && !in_region.empty()) {
      add_input_grad(stored_grad_in, grad_in, in_region, x.grad());
    }
    ++step_.backward_tiles;
    step_.emit(index_, s_.backward, t, TileEvent::kBackward, true);
  }
  return input_grad_result(stored_grad_in, grad_in);
}

std::unique_ptr<SchemeRun> make_scheme_run(Step& step, int index) {
  const Segment& s = step.segment(index);
  if (s.is<SharedRows>()) return shared_rows_run(step, index);
  if (step.barriers(s).empty()) return plain_tiles_run(step, index);
  if (s.is<SubSegments>()) return sub_segments_run(step, index);
  return recompute_rounds_run(step, index);
}

}  // namespace tessel::core
