#include "core/exec/schemes/sub_segments.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "core/device/copies.h"
#include "core/error.h"
#include "core/exec/step.h"
#include "core/plan/geometry.h"
#include "core/plan/glass.h"

namespace tessel::core {

SubSegmentsRun::SubSegmentsRun(Step& step, int index)
    : SchemeRun(step, index), glass_(step, index) {
  const Graph& graph = step.graph();
  leaves_ = {s_.input};
  for (NodeId v : kept_inner(graph, s_)) leaves_.push_back(v);
  const auto readers = dropped_readers(graph, step.plan().shapes, s_);
  for (size_t k = 0; k < readers.size(); ++k) {
    const NodeId d = s_.dropped_inner()[k];
    if (!barrier_input(graph, s_, d)) continue;  // a fork: each reader recomputes it
    if (readers[k].size() != 1) {
      throw Error("internal: dropped inner checkpoint " + graph.node(d).name + " is read by " +
                  std::to_string(readers[k].size()) + " sub-segments");
    }
    auto& list = interior_[readers[k][0]];
    for (NodeId b : barriers_reading(graph, s_, d)) list.push_back(b);
  }
  for (auto& [owner, list] : interior_) std::sort(list.begin(), list.end());
}

// ---- Geometry ----

// The barriers of the segment that read node `v`.
std::vector<NodeId> SubSegmentsRun::readers(NodeId v) const {
  std::vector<NodeId> out;
  for (NodeId b : step_.barriers(s_)) {
    if (step_.graph().node(b).inputs[0] == v) out.push_back(b);
  }
  return out;
}

// What sub-segment `target` holds over `r` (its share of output tile `tile`), the dropped inner
// checkpoints it recomputes over their shares at least (their barriers' corrections).
std::vector<Region> SubSegmentsRun::sub_needs(NodeId target, const Region& r,
                                              const Region& tile) const {
  return sub_segment_needs(step_.graph(), step_.plan().shapes, {s_.input, leaves_, target}, r,
                           {s_.dropped_inner(), tile, step_.shape(s_.output)});
}

const std::vector<NodeId>& SubSegmentsRun::interior(NodeId target) const {
  static const std::vector<NodeId> none;
  const auto it = interior_.find(target);
  return it == interior_.end() ? none : it->second;
}

// The inner checkpoints live in the tile store (SubSegments::tier).
bool SubSegmentsRun::offloaded() const {
  return step_.store() != nullptr && s_.inner_tier() != Tier::kResident;
}

// The store's reads a sub-segment's tile over `need` makes, in the order it makes them: the
// segment's input (read_input), then the inner checkpoints before `target` (leaf_tiles).
std::vector<TileStore::BlockId> SubSegmentsRun::tile_reads(NodeId target,
                                                           const std::vector<Region>& need) const {
  std::vector<TileStore::BlockId> ids;
  auto append = [&](const StoredActivation& stored, const Region& r) {
    const auto more = stored.reads(r);
    ids.insert(ids.end(), more.begin(), more.end());
  };
  if (const auto& stored = step_.stored(s_.input)) {
    append(*stored, need[static_cast<size_t>(s_.input)]);
  }
  for (NodeId l : inner_nodes()) {
    if (l >= target || need[static_cast<size_t>(l)].empty()) continue;
    const auto it = inner_.find(l);
    if (it != inner_.end() && it->second.stored_value) {
      append(*it->second.stored_value, need[static_cast<size_t>(l)]);
    }
  }
  return ids;
}

// ---- Leaves ----

// Region `r` of inner checkpoint `l`: a view of a resident one, a copy of an offloaded one (in
// its pass's format, as run_tile's input tile).
at::Tensor SubSegmentsRun::read_leaf(NodeId l, const Region& r, bool grad) {
  const Inner& in = inner_.at(l);
  if (!in.stored_value) return crop({in.value, step_.held(l)}, r);
  return in.stored_value->read(r, step_.read_format(grad));
}

// The inner checkpoints' tiles a sub-segment reads (those before `target`), requiring a
// gradient when `grad`. Without: only their regions, read as run_tile reaches them (a
// sub-segment late in a ResNet stage recomputes the residual chain from every earlier block's
// last inner checkpoint, and reading them all first held them all at once: bench/NOTES.md).
std::map<NodeId, TileTensor> SubSegmentsRun::leaf_tiles(const std::vector<Region>& need,
                                                        NodeId target, bool grad) {
  std::map<NodeId, TileTensor> out;
  for (NodeId l : inner_nodes()) {
    if (l >= target || need[static_cast<size_t>(l)].empty()) continue;
    const Region& r = need[static_cast<size_t>(l)];
    out[l] = {grad ? read_leaf(l, r, true).detach().requires_grad_(true) : at::Tensor(), r};
  }
  return out;
}

TileExtras SubSegmentsRun::leaf_extras(const std::map<NodeId, TileTensor>& given, bool hooks) {
  TileExtras extras;
  extras.leaves = &given;
  extras.read_leaf = [this](NodeId l, const Region& r) { return read_leaf(l, r, false); };
  extras.hooks = hooks;
  return extras;
}

TileExtras SubSegmentsRun::tile_extras(const std::map<NodeId, TileTensor>& given, bool hooks,
                                       const std::vector<Region>& need, NodeId target,
                                       TileBoxes& boxes) {
  TileExtras extras = leaf_extras(given, hooks);
  glass_.fill(need, boxes, extras, target, &given_);
  return extras;
}

// ---- Forward ----

void SubSegmentsRun::before_forward() {
  glass_.before_forward();
  given_.clear();
  if (glass_.fills()) {
    for (NodeId l : inner_nodes()) {
      Segment to = s_;
      to.output = l;
      given_[l] = uniform_through(step_.graph(), step_.plan().shapes, to, glass_.tiles().input);
    }
  }
  inner_forward(/*with_statistics=*/true);
}

at::Tensor SubSegmentsRun::forward_tile(int64_t t, const Region& tile) {
  if (glass_.forward(t)) return glass_.output_tile(tile);
  const std::vector<Region> need = sub_needs(s_.output, tile, tile);
  const TileTensor x = step_.read_input(s_, need[static_cast<size_t>(s_.input)]);
  const auto given = leaf_tiles(need, s_.output, false);
  TileBoxes boxes;
  return step_.run_tile(s_.input, s_.output, need, x,
                        tile_extras(given, false, need, s_.output, boxes));
}

void SubSegmentsRun::after_forward() {
  if (!(step_.training() && s_.keeps_inner())) inner_.clear();
}

void SubSegmentsRun::start_statistics(NodeId v) {
  if (!statistics_) return;
  for (NodeId b : readers(v)) {
    step_.barrier_state(b) = std::make_unique<BarrierState>(step_.graph().node(b),
                                                            step_.tensor_options(), step_.ranks());
  }
}

void SubSegmentsRun::add_statistics(NodeId v, const at::Tensor& x) {
  if (!statistics_) return;
  for (NodeId b : readers(v)) step_.barrier_state(b)->add_input(x);
}

// `positions` positions of v in the glass tiles' shares, each holding v's uniform value.
void SubSegmentsRun::add_uniform_statistics(NodeId v, int64_t positions) {
  if (!statistics_ || positions == 0) return;
  for (NodeId b : readers(v)) step_.barrier_state(b)->add_uniform_input(glass_.value(v), positions);
}

void SubSegmentsRun::finish_statistics(NodeId v) {
  if (!statistics_) return;
  for (NodeId b : readers(v)) step_.barrier_state(b)->finish_statistics(step_.training());
  glass_.refresh();  // the uniform values past v's barriers
}

// Each inner checkpoint computed over the shares of the forward tiles from the leaves before
// it and kept (whole, or in the store's blocks); with `with_statistics`, each barrier's
// statistic added there (the step's forward), else the checkpoints rebuilt for the backward.
void SubSegmentsRun::inner_forward(bool with_statistics) {
  at::NoGradGuard no_grad;
  statistics_ = with_statistics;
  const StoredActivation* stored_in = step_.stored(s_.input).get();
  // Barriers on the segment's input read it over the shares.
  const bool input_pass = with_statistics && !readers(s_.input).empty();
  std::vector<Region> shares;
  std::vector<TileStore::BlockId> reads;
  int64_t uniform = 0;  // the glass tiles' shares' positions
  for (int64_t t = 0; input_pass && t < s_.forward.tiles(); ++t) {
    const Region r =
        barrier_share(s_.forward.tile(t), step_.shape(s_.output), step_.shape(s_.input));
    if (r.empty() || !step_.runs(index_, Pass::kForward, t)) continue;  // another rank's
    if (glass_.forward(t)) {
      uniform += r.area();
      continue;
    }
    shares.push_back(r);
    if (stored_in != nullptr) {
      const auto ids = stored_in->reads(r);
      reads.insert(reads.end(), ids.begin(), ids.end());
    }
  }
  const std::vector<InnerPass> passes = inner_passes(reads);
  // The step's forward then runs the output's tiles over the leaves (forward_tile).
  for (int64_t t = 0; with_statistics && t < s_.forward.tiles(); ++t) {
    if (glass_.forward(t) || !step_.runs(index_, Pass::kForward, t)) continue;  // reads nothing
    const Region tile = s_.forward.tile(t);
    const auto ids = tile_reads(s_.output, sub_needs(s_.output, tile, tile));
    reads.insert(reads.end(), ids.begin(), ids.end());
  }
  // Every pass's reads scheduled at once, in order: the store reads the next pass's first
  // blocks while this one's last tiles run (bench/NOTES.md, session 36).
  if (!reads.empty()) step_.store()->schedule(reads);
  if (input_pass) {
    start_statistics(s_.input);
    for (const Region& r : shares) add_statistics(s_.input, step_.read_input(s_, r).tensor);
    add_uniform_statistics(s_.input, uniform);
    finish_statistics(s_.input);
  }
  for (const InnerPass& p : passes) run_inner_pass(p);
}

// The kept inner checkpoints and, in order among them, the dropped ones: a dropped one is
// computed over its shares for its barriers' statistics only (the forward has none to
// rebuild), and recomputed by the sub-segment that reads it. Each pass over its tiles, whose
// reads go to `reads`.
std::vector<SubSegmentsRun::InnerPass> SubSegmentsRun::inner_passes(
    std::vector<TileStore::BlockId>& reads) {
  const std::vector<NodeId> inner = inner_nodes();
  std::vector<NodeId> order = inner;
  if (statistics_) {
    order.insert(order.end(), s_.dropped_inner().begin(), s_.dropped_inner().end());
    std::sort(order.begin(), order.end());
  }
  std::vector<InnerPass> passes;
  size_t k = 0;  // kept ones so far (their blocks' index)
  for (const NodeId v : order) {
    const bool dropped = std::find(inner.begin(), inner.end(), v) == inner.end();
    if (dropped && readers(v).empty()) continue;  // a fork: no statistic to take
    if (!dropped) {
      // An offloaded one's blocks exist (reserved) from now: the passes' reads of them can be
      // scheduled before they are written.
      Inner& in = inner_[v];
      in = Inner{};
      if (offloaded()) {
        in.stored_value = std::make_unique<StoredActivation>(
            *step_.store(), step_.shape(v), s_.as<SubSegments>()->blocks.at(k), s_.inner_tier(),
            step_.tensor_options());
      }
      ++k;
    }
    InnerPass& p = passes.emplace_back(InnerPass{v, dropped, {}, {}});
    for (int64_t t = 0; t < s_.forward.tiles(); ++t) {
      const Region r = barrier_share(s_.forward.tile(t), step_.shape(s_.output), step_.shape(v));
      if (r.empty() || !step_.runs(index_, Pass::kForward, t)) continue;  // another rank's
      if (glass_.forward(t)) {
        p.glass.push_back(r);
        continue;
      }
      p.tiles.emplace_back(r, sub_needs(v, r, s_.forward.tile(t)));
      const auto ids = tile_reads(v, p.tiles.back().second);
      reads.insert(reads.end(), ids.begin(), ids.end());
    }
  }
  return passes;
}

void SubSegmentsRun::run_inner_pass(const InnerPass& p) {
  const NodeId v = p.v;
  const Step::PassLog log(step_, index_, "forward to " + step_.graph().node(v).name);
  start_statistics(v);
  Inner* in = p.dropped ? nullptr : &inner_.at(v);
  const Shape& vs = step_.shape(v);
  if (in != nullptr && !in->stored_value) {
    // In the forward's format (as run_tile's input tiles); rebuilt for the backward's
    // recompute in its format (kept ones stay in the forward's). Split over ranks: over what
    // this rank writes and reads (held_inner), its shares and zeros, the others' parts it reads
    // received after the pass.
    const auto options = step_.tensor_options().memory_format(step_.read_format(!statistics_));
    const Region& held = step_.held(v);  // split over ranks: what this rank writes and reads
    const std::vector<int64_t> size{1, vs.channels, held.y.size(), held.x.size()};
    in->value = step_.split() ? at::zeros(size, options) : at::empty(size, options);
  }
  for (const auto& [r, need] : p.tiles) {
    const TileTensor x_in = step_.read_input(s_, need[static_cast<size_t>(s_.input)]);
    const auto given = leaf_tiles(need, v, false);
    TileBoxes boxes;
    const at::Tensor x =
        step_.run_tile(s_.input, v, need, x_in, tile_extras(given, false, need, v, boxes));
    if (in != nullptr && in->stored_value) {
      in->stored_value->write(r, x);
    } else if (in != nullptr) {
      copy_tile(crop({in->value, step_.held(v)}, r), x);
    }
    add_statistics(v, x);
  }
  int64_t uniform = 0;
  for (const Region& r : p.glass) {
    uniform += r.area();
    if (in == nullptr) continue;
    const at::Tensor u = glass_.value(v).detach();
    const at::Tensor x = u.expand({1, u.size(1), r.y.size(), r.x.size()});
    if (in->stored_value) {
      in->stored_value->write(r, x.contiguous());
    } else {
      crop({in->value, step_.held(v)}, r).copy_(x);
    }
  }
  if (in != nullptr && !in->stored_value) {
    step_.exchange_over_ranks({in->value, step_.held(v)}, step_.gives_inner(index_, v), false);
  }
  add_uniform_statistics(v, uniform);
  finish_statistics(v);
}

// ---- Backward ----

// The output's tiles (gradients into the inner checkpoints, the segment's input and the
// parameters; the barriers' sums through hooks), then each inner checkpoint latest first: its
// barriers' corrections added to its gradient, and its sub-segment's tiles. Resident inner
// checkpoints take their corrections whole; offloaded ones accumulate their gradients in the
// store's blocks and add the corrections to each share as their sub-segment reads it. Returns
// the input's gradient, accumulated whole; an offloaded input's goes to the store block by
// block, each after the last addition of each pass into it, and nothing is returned.
at::Tensor SubSegmentsRun::backward(const at::Tensor& grad_out) {
  grad_out_ = grad_out;
  grad_in_ = at::Tensor();
  glass_sums_.clear();
  stored_grad_out_ = step_.stored_grad(s_.output).get();
  if (!s_.keeps_inner()) inner_forward(/*with_statistics=*/false);
  const std::vector<NodeId> inner = inner_nodes();
  if (offloaded()) {
    for (size_t k = 0; k < inner.size(); ++k) {
      inner_.at(inner[k]).stored_grad = std::make_unique<StoredActivation>(
          *step_.store(), step_.shape(inner[k]), s_.as<SubSegments>()->grad_blocks.at(k),
          s_.inner_tier(), step_.tensor_options());
    }
  }
  stored_grad_in_ = stored_input_grad();
  // The output's sub-segment, then each inner checkpoint's, latest first. Each one's reads are
  // scheduled before the one before it runs, so the store reads its first blocks while that
  // one's last tiles run (and keeps a block read again within its window: bench/NOTES.md,
  // session 36).
  SubPass next = sub_pass(s_.output, true, nullptr);
  if (step_.store() != nullptr) schedule(next);
  auto run_next = [&](size_t k) {
    const SubPass current = std::move(next);
    if (k < inner.size()) {
      next = sub_pass(inner[inner.size() - 1 - k], false, &current);
      if (step_.store() != nullptr) schedule(next);
    }
    run_sub_pass(current);
  };
  run_next(0);
  for (auto it = inner.rbegin(); it != inner.rend(); ++it) {
    correct_inner(*it);
    run_next(static_cast<size_t>(it - inner.rbegin()) + 1);
    inner_.erase(*it);
  }
  input_barriers();
  at::Tensor result = input_grad_result(stored_grad_in_, std::move(grad_in_));
  grad_out_ = grad_in_ = at::Tensor();
  return result;
}

// A resident inner checkpoint's gradient exists from the first tile that adds into it until
// its sub-segment has run (the planner's inner_backward_bytes counts the same).
void SubSegmentsRun::add_grad(NodeId l, const Region& r, const at::Tensor& g) {
  Inner& in = inner_.at(l);
  if (in.stored_grad) {
    in.stored_grad->accumulate(r, g);
  } else {
    step_.add_into(in.grad, l, r, g);
  }
}

// The gradient at inner checkpoint `v`'s share `r`, its barriers' corrections included; `x`:
// v's value there, as the sub-segment recomputed it (not read back from the store: one read of
// every offloaded inner checkpoint less).
at::Tensor SubSegmentsRun::grad_at(NodeId v, const Region& r, const at::Tensor& x) {
  Inner& in = inner_.at(v);
  if (!in.stored_grad) {
    if (!in.grad.defined()) in.grad = step_.held_zeros(v);
    return crop({in.grad, step_.held(v)}, r);
  }
  at::Tensor g = in.stored_grad->read(r);
  for (NodeId b : readers(v)) g.add_(step_.barrier_state(b)->correction_gradient(x));
  return g;
}

// The root a sub-segment's backward tile starts from: the output's (output_root), or the
// gradient at inner checkpoint `p.target`'s share `r` as the seed of `y`. Consumes `y`.
at::Tensor SubSegmentsRun::sub_segment_root(const SubPass& p, const Region& tile, const Region& r,
                                            at::Tensor& y) {
  if (p.output) return step_.output_root(s_, tile, y, grad_out_, stored_grad_out_);
  at::Tensor root;
  if (y.requires_grad()) {
    root = seeded(y, grad_at(p.target, r, y.detach().to(step_.tensor_options().dtype())));
  }
  y.reset();
  return root;
}

// `before`: the sub-pass that runs first, not yet run (its additions store the blocks they
// touch, which this one then reads back).
SubSegmentsRun::SubPass SubSegmentsRun::sub_pass(NodeId target, bool output,
                                                 const SubPass* before) const {
  SubPass p{target, output, {}, {}, {}, {}, {}, {}};
  std::map<const StoredActivation*, std::vector<char>> listed, stored;
  if (before != nullptr) {
    for (const auto& [g, regions] : before->adds) stored[g] = g->stored_after(regions);
  }
  auto reopens = [&](const StoredActivation* g, const Region& r) {
    const auto it = stored.find(g);
    const auto ids = g->reopen_reads(r, listed[g], it == stored.end() ? nullptr : &it->second);
    p.pass_reads.insert(p.pass_reads.end(), ids.begin(), ids.end());
  };
  for (int64_t t = s_.backward.tiles() - 1; t >= 0; --t) {
    const Region tile = s_.backward.tile(t);
    const Region r =
        output ? tile : barrier_share(tile, step_.shape(s_.output), step_.shape(target));
    if (r.empty() || !step_.runs(index_, Pass::kBackward, t)) continue;  // another rank's
    if (glass_.backward(t)) {  // reads nothing but, of the output, its gradient
      p.glass.emplace_back(t, r);
      if (output && stored_grad_out_ != nullptr) {
        const auto ids = stored_grad_out_->reads(tile);
        p.glass_reads.insert(p.glass_reads.end(), ids.begin(), ids.end());
      }
      continue;
    }
    p.tiles.emplace_back(t, r, sub_needs(target, r, tile));
    if (step_.store() == nullptr) continue;
    const std::vector<Region>& need = std::get<2>(p.tiles.back());
    auto ids = tile_reads(target, need);
    if (const StoredActivation* g =
            output ? stored_grad_out_ : inner_.at(target).stored_grad.get()) {
      const auto more = g->reads(r);
      ids.insert(ids.end(), more.begin(), more.end());
    }
    p.reads.insert(p.reads.end(), ids.begin(), ids.end());
    p.pass_reads.insert(p.pass_reads.end(), ids.begin(), ids.end());
    // The pass adds into the input's gradient, then into the leaves' (leaf_tiles' order).
    if (stored_grad_in_ != nullptr && !need[static_cast<size_t>(s_.input)].empty()) {
      p.adds[stored_grad_in_].push_back(need[static_cast<size_t>(s_.input)]);
      reopens(stored_grad_in_, need[static_cast<size_t>(s_.input)]);
    }
    for (NodeId l : inner_nodes()) {
      if (l >= target || need[static_cast<size_t>(l)].empty()) continue;
      if (StoredActivation* g = inner_.at(l).stored_grad.get()) {
        p.adds[g].push_back(need[static_cast<size_t>(l)]);
        reopens(g, need[static_cast<size_t>(l)]);
      }
    }
  }
  return p;
}

// Its reads, in the order it makes them: the glass tiles' output gradient, each round's, then the
// pass's.
void SubSegmentsRun::schedule(const SubPass& p) {
  if (!p.glass_reads.empty()) step_.store()->schedule(p.glass_reads);
  const size_t rounds = interior(p.target).size();
  for (size_t k = 0; k < rounds && !p.reads.empty(); ++k) step_.store()->schedule(p.reads);
  if (!p.pass_reads.empty()) step_.store()->schedule(p.pass_reads);
}

// Rounds of sums for the barriers this sub-segment recomputes the inputs of (dropped inner
// checkpoints), latest first, then its tiles.
void SubSegmentsRun::run_sub_pass(const SubPass& p) {
  const Step::PassLog log(step_, index_, "backward to " + step_.graph().node(p.target).name);
  const std::vector<NodeId>& mine = interior(p.target);
  const at::Tensor seed = glass_seed(p);
  for (auto b = mine.rbegin(); b != mine.rend(); ++b) sums_round(p, *b, seed);
  for (const auto& [g, regions] : p.adds) g->expect_additions(regions);
  for (const auto& [t, r, need] : p.tiles) backward_tile(p, t, r, need);
  glass_backward(p, seed, glass_.take_fill_grads());
}

// One round of sums: each tile recomputed and the gradient taken back to barrier `b`'s output,
// the later barriers' corrections added (their sums are done).
void SubSegmentsRun::sums_round(const SubPass& p, NodeId b, const at::Tensor& seed) {
  const std::vector<NodeId>& mine = interior(p.target);
  BarrierState& state = *step_.barrier_state(b);
  std::vector<at::Tensor> fills(static_cast<size_t>(s_.output) + 1);  // by node, summed
  for (const auto& [t, r, need] : p.tiles) {
    const Region tile = s_.backward.tile(t);
    const Region& in_region = need[static_cast<size_t>(s_.input)];
    // The input requires a gradient so that the barrier's output does (as RecomputeRounds).
    at::Tensor x = step_.read_input(s_, in_region).tensor.detach().requires_grad_(true);
    const auto given = leaf_tiles(need, p.target, true);
    at::AutoGradMode grad_mode(true);
    std::map<NodeId, TileTensor> acts;
    TileBoxes boxes;
    TileExtras extras = tile_extras(given, false, need, p.target, boxes);
    extras.barrier_acts = &acts;
    at::Tensor y = step_.run_tile(s_.input, p.target, need, {x, in_region}, extras);
    at::Tensor root = sub_segment_root(p, tile, r, y);
    root = step_.add_corrections(s_, tile, root, acts, mine);
    // Only the barrier's output and input are held on (the rest is autograd's to free).
    const TileTensor out = acts[b];
    const at::Tensor x_b = out.tensor.defined() && !out.region.empty()
                               ? crop(acts[step_.graph().node(b).inputs[0]], out.region).detach()
                               : at::Tensor();
    acts.clear();
    if (!root.defined() || !root.requires_grad()) continue;
    // The barrier's output, and the fills' leaves: the gradient at the positions they fill.
    std::vector<at::Tensor> outputs;
    const bool out_grad = out.tensor.defined() && out.tensor.requires_grad() && !out.region.empty();
    if (out_grad) outputs.push_back(out.tensor);
    const std::vector<NodeId> leaves = glass_.fill_leaves(outputs);
    if (outputs.empty()) continue;
    const auto g = torch::autograd::grad({root}, outputs, {}, /*retain_graph=*/false,
                                         /*create_graph=*/false, /*allow_unused=*/true);
    if (out_grad && g[0].defined()) state.add_output_grad(x_b, g[0]);
    for (size_t k = 0; k < leaves.size(); ++k) {
      const at::Tensor& f = g[k + (out_grad ? 1 : 0)];
      if (!f.defined()) continue;
      at::Tensor& sum = fills[static_cast<size_t>(leaves[k])];
      sum = sum.defined() ? sum + f.to(at::kDouble) : f.to(at::kDouble);
    }
  }
  glass_round(p, b, seed, fills);
  state.finish_sums();
}

// Backward tile `t` of sub-pass `p`, over share `r`: gradients into the segment's input, the
// leaves it reads, the parameters, and (hooks) the sums of the barriers it passes.
void SubSegmentsRun::backward_tile(const SubPass& p, int64_t t, const Region& r,
                                   const std::vector<Region>& need) {
  const Region tile = s_.backward.tile(t);
  const std::vector<NodeId>& mine = interior(p.target);
  if (p.output) step_.emit(index_, s_.backward, t, TileEvent::kBackward, false);
  const Region& in_region = need[static_cast<size_t>(s_.input)];
  at::Tensor x = step_.read_input(s_, in_region).tensor.detach();
  if (step_.wants_input_grad(s_)) x.requires_grad_(true);
  const at::Tensor input_for_grad = x.requires_grad() ? x : at::Tensor();
  const auto given = leaf_tiles(need, p.target, true);
  {
    at::AutoGradMode grad_mode(true);
    std::map<NodeId, TileTensor> acts;
    TileBoxes boxes;
    TileExtras extras = tile_extras(given, true, need, p.target, boxes);
    if (!mine.empty()) extras.barrier_acts = &acts;
    // Without its gradient wanted, the input tile is autograd's alone to keep (as TilesRun's
    // backward_tile).
    at::Tensor y = step_.run_tile(s_.input, p.target, need, {std::move(x), in_region}, extras);
    at::Tensor root = sub_segment_root(p, tile, r, y);
    if (!mine.empty()) root = step_.add_corrections(s_, tile, root, acts, mine);
    acts.clear();  // the corrections hold what they need; a barrier's output is not
    if (root.defined() && root.requires_grad()) root.backward();
  }
  if (step_.wants_input_grad(s_) && input_for_grad.grad().defined() && !in_region.empty()) {
    add_input_grad(stored_grad_in_, grad_in_, in_region, input_for_grad.grad());
  }
  for (const auto& [l, leaf] : given) {
    if (leaf.tensor.grad().defined()) add_grad(l, leaf.region, leaf.tensor.grad());
  }
  if (p.output) {
    ++step_.backward_tiles;
    step_.emit(index_, s_.backward, t, TileEvent::kBackward, true);
  }
}

// Inner checkpoint `v`'s gradient complete but for its barriers' corrections: resident, they
// are added whole; offloaded, its sub-segment adds them to each share (grad_at).
void SubSegmentsRun::correct_inner(NodeId v) {
  Inner& in = inner_.at(v);
  for (NodeId b : readers(v)) step_.barrier_state(b)->finish_sums();
  if (in.stored_grad) {
    in.stored_grad->finish_additions();
    return;
  }
  if (!in.grad.defined()) in.grad = step_.held_zeros(v);
  // Split over ranks: each rank's tiles added their part, summed where the others' tiles read
  // it; the corrections go on the sum, once, where this rank's backward tiles read it.
  step_.exchange_over_ranks({in.grad, step_.held(v)}, step_.gives_gradient(index_, v), true);
  const Region reads = step_.backward_reads(index_, v);
  const at::Tensor grad = crop({in.grad, step_.held(v)}, reads);
  const at::Tensor value = crop({in.value, step_.held(v)}, reads);
  for (NodeId b : readers(v)) {
    const BarrierState& state = *step_.barrier_state(b);
    // In slices of rows: the correction's gradient is elementwise, and a whole one would be one
    // more activation-sized tensor at this pass's fullest.
    const int64_t rows = std::max<int64_t>(1, (reads.y.size() + 15) / 16);
    const auto grads = grad.split(rows, 2);
    const auto values = value.split(rows, 2);
    for (size_t k = 0; k < grads.size(); ++k) {
      grads[k].add_(state.correction_gradient(values[k]));
    }
  }
  // Its sub-segment reads the inner checkpoints before it, not this one.
  in.value.reset();
}

// Barriers on the segment's input: their corrections go straight to its gradient, over the
// shares (one pass for all of them).
void SubSegmentsRun::input_barriers() {
  const std::vector<NodeId> on_input = readers(s_.input);
  for (NodeId b : on_input) step_.barrier_state(b)->finish_sums();
  if (!step_.wants_input_grad(s_) || on_input.empty()) return;
  std::vector<Region> shares;
  for (int64_t t = 0; t < s_.backward.tiles(); ++t) {
    const Region r =
        barrier_share(s_.backward.tile(t), step_.shape(s_.output), step_.shape(s_.input));
    // Split over ranks: this rank's shares (the input's gradient is summed after the segment).
    if (!r.empty() && step_.runs(index_, Pass::kBackward, t)) shares.push_back(r);
  }
  if (stored_grad_in_ != nullptr) {
    stored_grad_in_->expect_additions(shares);
    std::vector<TileStore::BlockId> reads;
    for (const Region& r : shares) {
      const auto ids = step_.stored(s_.input)->reads(r);
      reads.insert(reads.end(), ids.begin(), ids.end());
    }
    step_.store()->schedule(reads);
  }
  for (const Region& r : shares) {
    const at::Tensor x = step_.read_input(s_, r).tensor;
    at::Tensor g = step_.barrier_state(on_input[0])->correction_gradient(x);
    for (size_t k = 1; k < on_input.size(); ++k) {
      g.add_(step_.barrier_state(on_input[k])->correction_gradient(x));
    }
    add_input_grad(stored_grad_in_, grad_in_, r, g);
  }
}

// ---- Glass ----
//
// A glass tile's share of every node is uniform (its whole cone is), so a sub-segment's glass
// tiles need only the gradient's sum over their shares of its target: one backward of the chain
// from the sub-segment's leaves, seeded with it, gives their part of the parameters' gradients,
// of the sums of the barriers on the way, and the sums at the leaves' uniform positions (the
// input's handed to the previous segment, a kept inner checkpoint's to its own sub-segment's
// seed: every uniform position of a node has the same Jacobians, so only the sum matters).

at::Tensor SubSegmentsRun::glass_seed(const SubPass& p) {
  at::Tensor seed;
  if (p.output) {
    for (const auto& [t, r] : p.glass) {
      step_.emit(index_, s_.backward, t, TileEvent::kBackward, false);
      glass_.add_output_grad(r, grad_out_, stored_grad_out_);
      ++step_.backward_tiles;
      ++step_.glass_backward_tiles;
      step_.emit(index_, s_.backward, t, TileEvent::kBackward, true);
    }
    return glass_.take_output_seed();
  }
  Inner& in = inner_.at(p.target);
  for (const auto& [t, r] : p.glass) {
    const at::Tensor g =
        in.grad.defined() ? crop({in.grad, step_.held(p.target)}, r) : in.stored_grad->read(r);
    const at::Tensor sum = g.sum({2, 3}, /*keepdim=*/true, at::kDouble);
    seed = seed.defined() ? seed + sum : sum;
  }
  const auto handed = glass_sums_.find(p.target);
  if (handed != glass_sums_.end()) {
    seed = seed.defined() ? seed + handed->second : handed->second;
    glass_sums_.erase(handed);
  }
  return seed;
}

namespace {

bool any_defined(const std::vector<at::Tensor>& ts) {
  return std::any_of(ts.begin(), ts.end(), [](const at::Tensor& t) { return t.defined(); });
}

}  // namespace

// The segment's input and the kept inner checkpoints before `target`.
std::vector<NodeId> SubSegmentsRun::leaves_before(NodeId target) const {
  std::vector<NodeId> out;
  for (NodeId l : leaves_) {
    if (l < target) out.push_back(l);
  }
  return out;
}

// The seed on the target's value, and the corrections of the barriers this sub-segment
// recomputes (those whose sums are taken) over the positions of their input the glass tiles'
// shares hold, which no tile adds.
at::Tensor SubSegmentsRun::glass_root(const SubPass& p, const std::vector<at::Tensor>& v,
                                      const at::Tensor& seed,
                                      const std::vector<at::Tensor>& fills) const {
  at::Tensor root;
  const auto add = [&root](const at::Tensor& r) { root = root.defined() ? root + r : r; };
  const auto seed_at = [&](NodeId n, const at::Tensor& g) {
    const at::Tensor& y = v[static_cast<size_t>(n)];
    if (g.defined() && y.defined() && y.requires_grad()) {
      add(seeded(y, g.to(y.scalar_type()).view_as(y)));
    }
  };
  seed_at(p.target, seed);
  for (size_t n = 0; n < fills.size() && static_cast<NodeId>(n) <= p.target; ++n) {
    seed_at(static_cast<NodeId>(n), fills[n]);
  }
  for (NodeId b : interior(p.target)) {
    const BarrierState& state = *step_.barrier_state(b);
    const at::Tensor& x = v[static_cast<size_t>(step_.graph().node(b).inputs[0])];
    if (!state.sums_done() || !x.defined() || !x.requires_grad()) continue;
    int64_t positions = 0;
    for (const auto& [t, r] : p.glass) positions += step_.share(s_, b, s_.backward.tile(t)).area();
    if (positions > 0) add(state.correction(x) * static_cast<double>(positions));
  }
  return root;
}

// Barrier `b`'s sums over the positions whose gradient the glass takes as a sum.
void SubSegmentsRun::glass_round(const SubPass& p, NodeId b, const at::Tensor& seed,
                                 const std::vector<at::Tensor>& fills) {
  if (!seed.defined() && p.glass.empty() && !any_defined(fills)) return;
  const at::AutoGradMode grad_mode(true);
  const std::vector<at::Tensor> v = glass_.sub_chain(leaves_before(p.target), p.target);
  const at::Tensor root = glass_root(p, v, seed, fills);
  const at::Tensor& y = v[static_cast<size_t>(b)];
  if (!root.defined() || !root.requires_grad() || !y.defined() || !y.requires_grad()) return;
  const auto g = torch::autograd::grad({root}, {y}, {}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
  if (!g[0].defined()) return;
  const at::Tensor& x = v[static_cast<size_t>(step_.graph().node(b).inputs[0])];
  step_.barrier_state(b)->add_output_grad(x.detach(), g[0]);
}

// The chain's backward: the parameters' gradients, the sums of the barriers on the leaves (the
// tiles' hooks take the rest), and the leaves' sums.
void SubSegmentsRun::glass_backward(const SubPass& p, const at::Tensor& seed,
                                    const std::vector<at::Tensor>& fills) {
  if (!seed.defined() && p.glass.empty() && !any_defined(fills)) return;
  const at::AutoGradMode grad_mode(true);
  const std::vector<NodeId> leaves = leaves_before(p.target);
  std::vector<at::Tensor> v = glass_.sub_chain(leaves, p.target);
  const std::vector<NodeId>& mine = interior(p.target);
  std::vector<NodeId> hooked;
  for (NodeId b : step_.barriers(s_)) {
    at::Tensor& y = v[static_cast<size_t>(b)];
    // A leaf is given, not computed here (its own sub-segment's tiles and chain take its sums).
    if (b > p.target || !y.defined() || !y.requires_grad() ||
        std::find(leaves.begin(), leaves.end(), b) != leaves.end() ||
        std::find(mine.begin(), mine.end(), b) != mine.end() ||
        step_.barrier_state(b)->sums_done()) {
      continue;
    }
    y.retain_grad();
    hooked.push_back(b);
  }
  const at::Tensor root = glass_root(p, v, seed, fills);
  if (!root.defined() || !root.requires_grad()) return;
  root.backward();
  for (NodeId b : hooked) {
    const at::Tensor& g = v[static_cast<size_t>(b)].grad();
    if (!g.defined()) continue;
    const at::Tensor& x = v[static_cast<size_t>(step_.graph().node(b).inputs[0])];
    step_.barrier_state(b)->add_output_grad(x.detach(), g);
  }
  for (NodeId l : leaves) {
    const at::Tensor& g = v[static_cast<size_t>(l)].grad();
    if (!g.defined()) continue;
    at::Tensor& sum = l == s_.input ? step_.glass_grad(s_.input) : glass_sums_[l];
    sum = sum.defined() ? sum + g.to(at::kDouble) : g.to(at::kDouble);
  }
}

std::unique_ptr<SchemeRun> sub_segments_run(Step& step, int index) {
  return std::make_unique<SubSegmentsRun>(step, index);
}

}  // namespace tessel::core
