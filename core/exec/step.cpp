#include "core/exec/step.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

#include "core/device/copies.h"
#include "core/device/memory.h"
#include "core/error.h"
#include "core/exec/fault.h"
#include "core/exec/glass.h"
#include "core/exec/ranks.h"
#include "core/plan/geometry.h"
#include "core/plan/split.h"

namespace tessel::core {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// A root whose backward hands `seed` to `y` and lets go of it (see seeded in step.h):
// torch::autograd::backward({y}, {seed}) keeps both alive to the end, two more tile-sized
// tensors at the peak of every backward tile (bench/NOTES.md).
struct Seeded : torch::autograd::Function<Seeded> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& y,
                            const at::Tensor& seed) {
    ctx->saved_data["seed"] = seed;
    return at::zeros({}, y.options());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 const torch::autograd::variable_list& /*grad*/) {
    at::Tensor seed = ctx->saved_data["seed"].toTensor();
    ctx->saved_data.clear();
    return {seed, at::Tensor()};
  }
};

}  // namespace

// The parameters', or, for a network without parameters, the image's (a corner pixel is read
// to learn them), so a float64 image is never rounded to float. A source's pixels are moved
// there (slides are decoded on the CPU).
at::TensorOptions compute_options(Graph& graph, TileSource& source) {
  for (const auto& p : graph.module().parameters()) {
    return at::TensorOptions().dtype(p.scalar_type()).device(p.device());
  }
  const at::Tensor corner = source.read({{0, 1}, {0, 1}});
  return at::TensorOptions().dtype(corner.scalar_type()).device(corner.device());
}

at::Tensor to_compute(const at::Tensor& t, const at::TensorOptions& options) {
  if (t.scalar_type() == options.dtype() && t.device() == options.device()) return t;
  return t.to(options.device(), options.dtype().toScalarType());
}

at::Tensor seeded(const at::Tensor& y, const at::Tensor& seed) { return Seeded::apply(y, seed); }

// ---- Where a segment's forward output goes ----

// A whole checkpoint, the store's blocks, or (the last segment before a global pool) the
// streaming reduction the head reads: a mean, a max (with its position, for the backward) or
// an attention pool's sums.
class Step::Output {
 public:
  Output(Step& step, int index);
  bool stored() const { return stored_ != nullptr; }
  void add(const Region& tile, const at::Tensor& y);
  void finish();

 private:
  void add_max(const Region& tile, const at::Tensor& y);
  void merge_max();

  Step& step_;
  int index_;
  const Segment& s_;
  const Shape& shape_;
  bool is_max_ = false, is_attention_ = false;
  bool output_is_tile_ = false;  // a one-tile segment that keeps its graph: no copy
  at::Tensor out_, best_value_, best_index_;
  StoredActivation* stored_ = nullptr;
  SparseCheckpoint* sparse_ = nullptr;  // resident, its glass as one vector
  at::ScalarType tile_dtype_;           // the step's, or under bf16 autocast that of the last op
};

Step::Output::Output(Step& step, int index)
    : step_(step), index_(index), s_(step.segment(index)), shape_(step.shape(s_.output)) {
  const at::TensorOptions& options = step.tensor_options_;
  tile_dtype_ = options.dtype().toScalarType();
  const Node& reduction = step.graph_.node(s_.reduction >= 0 ? s_.reduction : 0);
  is_max_ = s_.reduction >= 0 && reduction.kind == OpKind::kGlobalMaxPool;
  is_attention_ = s_.reduction >= 0 && reduction.kind == OpKind::kAttentionPool;
  // Split over ranks, each rank's output holds its tiles and zeros, summed in finish().
  output_is_tile_ = step.training_ && s_.keeps_graph() && s_.forward.tiles() == 1 && !step.split();
  if (step.offloaded(index)) {
    auto& stored = step.stored_[s_.output];
    // Blocks a forward glass tile writes keep the output's uniform value alone (glass.h).
    stored = std::make_unique<StoredActivation>(
        *step.store_, shape_, s_.blocks, s_.tier, options,
        KeptBlocks{s_.resident_blocks, step.glass(index).uniform_blocks(s_.forward, s_.blocks)});
    stored_ = stored.get();
  } else if (!output_is_tile_ && !step.split() &&
             sparse_checkpoint(step.plan_, static_cast<size_t>(index), step.glass_)) {
    // Resident, by forward tile: a glass tile's block keeps the output's uniform value alone.
    auto& sparse = step.sparse_[s_.output];
    sparse =
        std::make_unique<SparseCheckpoint>(shape_, s_.forward, step.glass(index).forward, options);
    sparse_ = sparse.get();
  } else if (s_.reduction < 0 && !output_is_tile_) {
    // Split over ranks: over the region this rank writes and reads (Step::held), zeros where
    // no tile of it writes.
    const Region& held = step.held(s_.output);
    const std::vector<int64_t> size{1, shape_.channels, held.y.size(), held.x.size()};
    out_ = step.split() ? at::zeros(size, options) : at::empty(size, options);
  } else if (is_attention_) {
    step.attention_ = std::make_unique<AttentionStream>(reduction, options);
  } else if (is_max_) {
    best_value_ = at::full({1, shape_.channels}, -std::numeric_limits<double>::infinity(), options);
    best_index_ = at::full({1, shape_.channels}, std::numeric_limits<int64_t>::max(),
                           options.dtype(at::kLong));
  } else if (s_.reduction >= 0) {
    out_ = at::zeros({1, shape_.channels}, options);
  }
}

void Step::Output::add(const Region& tile, const at::Tensor& y) {
  tile_dtype_ = y.scalar_type();
  if (stored_ != nullptr) {
    stored_->write(tile, y);
  } else if (sparse_ != nullptr) {
    sparse_->write(tile, y);
  } else if (s_.reduction < 0 && output_is_tile_) {
    out_ = y;
  } else if (s_.reduction < 0) {
    copy_tile(crop({out_, step_.held(s_.output)}, tile), y);
  } else if (is_attention_) {
    step_.attention_->add(y);
  } else if (!is_max_) {
    out_ += y.sum({2, 3});
  } else {
    add_max(tile, y);
  }
}

// Streaming global max: the first maximum in row-major order of the whole activation, as plain
// LibTorch. Within a tile row-major order agrees with the global one.
void Step::Output::add_max(const Region& tile, const at::Tensor& y) {
  const auto [value, local] = y.flatten(2).max(2);
  const int64_t w = tile.x.size();
  const at::Tensor global = (at::div(local, w, "floor") + tile.y.begin) * shape_.width +
                            at::remainder(local, w) + tile.x.begin;
  const at::Tensor better =
      (value > best_value_).logical_or((value == best_value_).logical_and(global < best_index_));
  best_value_ = at::where(better, value, best_value_);
  best_index_ = at::where(better, global, best_index_);
}

// Split over ranks: every rank's maxima and their positions in one all-gather (the positions as
// float64, exact below 2^53), the largest kept and the first in row-major order among equals,
// as one rank adding every tile keeps them.
void Step::Output::merge_max() {
  const at::Tensor mine =
      at::cat({best_value_.to(at::kDouble), best_index_.to(at::kDouble)}, 1).flatten();
  std::vector<at::Tensor> all;
  for (int q = 0; q < step_.options_.ranks->size(); ++q) all.push_back(at::empty_like(mine));
  step_.summed_bytes += static_cast<int64_t>(mine.nbytes());
  step_.options_.ranks->allgather(mine, all);
  const int64_t c = shape_.channels;
  at::Tensor value = all[0].narrow(0, 0, c), index = all[0].narrow(0, c, c);
  for (size_t q = 1; q < all.size(); ++q) {
    const at::Tensor v = all[q].narrow(0, 0, c), i = all[q].narrow(0, c, c);
    const at::Tensor better = (v > value).logical_or((v == value).logical_and(i < index));
    value = at::where(better, v, value);
    index = at::where(better, i, index);
  }
  best_value_ = value.view({1, c}).to(best_value_.scalar_type());
  // A channel no rank saw a number in keeps the start's "none" (beyond every position).
  best_index_ = at::where(index < 9e18, index, 9e18).view({1, c}).to(at::kLong);
}

void Step::Output::finish() {
  if (stored_ != nullptr) {
    // Split over ranks: the parts of this rank's blocks the others read, and theirs it reads.
    step_.exchange_stored(*stored_, shape_.channels, step_.gives_checkpoint(index_));
    return;
  }
  if (sparse_ != nullptr) return;  // by block (never split)
  // Split over ranks: each rank's tiles exchanged, a global average's sums summed, the attention
  // pool's running maxima and sums or the maxima merged.
  if (out_.defined() && s_.reduction < 0) {
    step_.exchange_over_ranks({out_, step_.held(s_.output)}, step_.gives_checkpoint(index_), false);
  } else if (out_.defined()) {
    step_.sum_over_ranks({out_});
  } else if (is_attention_ && step_.split()) {
    step_.summed_bytes += step_.attention_->merge_ranks(*step_.options_.ranks);
  } else if (is_max_ && step_.split()) {
    merge_max();
  }
  if (s_.reduction < 0) {
    step_.checkpoints_[s_.output] = out_;
  } else if (is_attention_) {
    step_.reduced_ = step_.attention_->pooled(tile_dtype_);
  } else if (is_max_) {
    step_.reduced_ = best_value_.to(tile_dtype_);  // exact: the maxima are tile values
    step_.reduced_index_ = best_index_;
  } else {
    // Summed in the step's dtype; rounded to the tiles' as plain's mean of them is (bf16).
    step_.reduced_ = (out_ / static_cast<double>(shape_.height * shape_.width)).to(tile_dtype_);
  }
}

// ---- The step ----

Step::Step(Graph& graph, const Plan& plan, TileSource& source, const StepOptions& options,
           bool training)
    : training_(training),
      graph_(graph),
      plan_(plan),
      source_(source),
      options_(options),
      tensor_options_(compute_options(graph, source)),
      formats_(
          options.tile_formats.value_or(tile_formats(tensor_options_.device(), options.precision))),
      checkpoints_(graph.size()),
      held_(graph.size()),
      stored_(graph.size()),
      stored_grads_(graph.size()),
      sparse_(graph.size()),
      barrier_states_(graph.size()),
      uniform_(graph.size()),
      glass_grads_(graph.size()),
      passed_at_(graph.size()) {
  memory_baseline_ = std::max<int64_t>(0, memory_reading(tensor_options_.device()).live);
  if (options.inject == Fault::kHalo) {
    const int halo = halo_fault_segment(graph, plan);
    if (halo < 0) throw Error("cannot inject halo: every tile reads its whole input");
    halo_segment_ = &plan.segments[static_cast<size_t>(halo)];
  }
  if (plan.offloads()) {
    TileStoreOptions o;
    o.scratch_dir = options.scratch_dir;
    o.bypass_page_cache = options.bypass_page_cache;
    o.direct_io = options.direct_io.value_or(direct_disk_io(tensor_options_.device()));
    o.window_bytes = plan.window_bytes > 0 ? plan.window_bytes : o.window_bytes;
    o.write_behind_bytes = plan.write_behind_bytes;
    if (training)
      TileStore::check_free_space(o.scratch_dir, stored_bytes(graph, plan, Tier::kDisk));
    store_ = std::make_unique<TileStore>(o);
  }
  check_split();
  hold();
  find_glass();
  for (int i = 0; i < segments(); ++i) runs_.push_back(make_scheme_run(*this, i));
}

bool Step::split() const { return options_.ranks != nullptr && options_.ranks->size() > 1; }

bool Step::runs(int index, Pass pass, int64_t t) const {
  if (!split()) return true;
  return rank_range(segment(index), pass, index, options_.ranks->rank(), options_.ranks->size())
      .has(t);
}

void Step::sum_over_ranks(const std::vector<at::Tensor>& tensors) const {
  if (!split()) return;
  for (const at::Tensor& t : tensors) summed_bytes += static_cast<int64_t>(t.nbytes());
  options_.ranks->allreduce_sum(tensors);
}

// Each rank's pieces for the others (`give`), packed in the order of `gives` and padded to the
// busiest rank's (one broadcast each, Ranks::allgather); each receiver walks every other rank's
// buffer and hands the pieces addressed to it to `take`, in order.
void Step::exchange_pieces(int64_t channels, const at::TensorOptions& options, const Gives& gives,
                           const GivePiece& give, const TakePiece& take) const {
  if (!split()) return;
  const int64_t longest = given_area(gives) * channels;
  if (longest == 0) return;
  const auto me = static_cast<size_t>(options_.ranks->rank());
  const at::Tensor mine = at::empty({longest}, options);
  int64_t offset = 0;
  for (const std::vector<Region>& pieces : gives[me]) {
    for (const Region& r : pieces) {
      const at::Tensor part = give(r);
      mine.narrow(0, offset, part.numel()).view(part.sizes()).copy_(part);
      offset += part.numel();
    }
  }
  mine.narrow(0, offset, longest - offset).zero_();  // a shorter rank's padding
  std::vector<at::Tensor> all;
  for (size_t q = 0; q < gives.size(); ++q) all.push_back(at::empty({longest}, options));
  summed_bytes += static_cast<int64_t>(mine.nbytes());
  options_.ranks->allgather(mine, all);
  for (size_t p = 0; p < gives.size(); ++p) {
    if (p == me) continue;
    offset = 0;
    for (size_t q = 0; q < gives[p].size(); ++q) {
      for (const Region& r : gives[p][q]) {
        const int64_t n = channels * r.area();
        if (q == me) {
          take(r, all[p].narrow(0, offset, n).view({1, channels, r.y.size(), r.x.size()}));
        }
        offset += n;
      }
    }
  }
}

void Step::exchange_over_ranks(const TileTensor& held, const Gives& gives, bool add) const {
  exchange_pieces(
      held.tensor.size(1), held.tensor.options(), gives,
      [&](const Region& r) { return crop(held, r); },
      [&](const Region& r, const at::Tensor& piece) {
        const at::Tensor to = crop(held, r);
        if (add) {
          to.add_(piece);
        } else {
          to.copy_(piece);
        }
      });
}

namespace {

// The pieces this rank gives of `gives` and receives, in the order exchange_pieces reads them.
std::vector<Region> pieces_given(const Gives& gives, size_t me) {
  std::vector<Region> out;
  for (const std::vector<Region>& pieces : gives[me]) {
    out.insert(out.end(), pieces.begin(), pieces.end());
  }
  return out;
}
std::vector<Region> pieces_received(const Gives& gives, size_t me) {
  std::vector<Region> out;
  for (size_t p = 0; p < gives.size(); ++p) {
    if (p != me) out.insert(out.end(), gives[p][me].begin(), gives[p][me].end());
  }
  return out;
}

}  // namespace

void Step::exchange_stored(StoredActivation& stored, int64_t channels, const Gives& gives) const {
  if (!split()) return;
  const auto me = static_cast<size_t>(options_.ranks->rank());
  for (const Region& r : pieces_given(gives, me)) store_->schedule(stored.reads(r));
  exchange_pieces(
      channels, tensor_options_, gives, [&](const Region& r) { return stored.read(r); },
      [&](const Region& r, const at::Tensor& piece) { stored.receive(r, piece); });
  stored.seal();
}

void Step::exchange_stored_gradient(StoredActivation& stored, int64_t channels,
                                    const Gives& gives) const {
  if (!split()) return;
  const auto me = static_cast<size_t>(options_.ranks->rank());
  std::vector<TileStore::BlockId> reads;
  for (const Region& r : pieces_given(gives, me)) {
    const auto ids = stored.reads(r);
    reads.insert(reads.end(), ids.begin(), ids.end());
  }
  const std::vector<Region> received = pieces_received(gives, me);
  std::vector<char> listed;
  for (const Region& r : received) {
    const auto ids = stored.reopen_reads(r, listed);
    reads.insert(reads.end(), ids.begin(), ids.end());
  }
  store_->schedule(reads);
  stored.expect_additions(received);
  exchange_pieces(
      channels, tensor_options_, gives, [&](const Region& r) { return stored.read(r); },
      [&](const Region& r, const at::Tensor& piece) { stored.accumulate(r, piece); });
}

Gives Step::gives_checkpoint(int index) const {
  if (!split()) return {};
  return checkpoint_gives(graph_, plan_, index, options_.ranks->size());
}

Gives Step::gives_inner(int index, NodeId v) const {
  if (!split()) return {};
  return inner_gives(graph_, plan_, index, v, options_.ranks->size());
}

Gives Step::gives_gradient(int index, NodeId v) const {
  if (!split()) return {};
  return gradient_gives(graph_, plan_, index, v, options_.ranks->size());
}

std::vector<Region> Step::held_gradient(int index) const {
  const Gives gives = gives_gradient(index, segment(index).input);
  std::vector<Region> held = pieces_given(gives, static_cast<size_t>(options_.ranks->rank()));
  const Segment& before = segment(index - 1);
  for (int64_t t = 0; t < before.backward.tiles(); ++t) {
    if (runs(index - 1, Pass::kBackward, t)) held.push_back(before.backward.tile(t));
  }
  return held;
}

Region Step::backward_reads(int index, NodeId v) const {
  if (!split()) return whole(shape(v));
  return rank_reads(graph_, plan_, index, v, {options_.ranks->rank(), options_.ranks->size()},
                    Passes::kBackward);
}

// Each node's resident tensors cover it whole but, split over ranks, a resident checkpoint
// between segments or inner checkpoint of sub-segments: the region this rank's tiles write and
// read of it (held_checkpoint, held_inner).
void Step::hold() {
  for (NodeId v = 0; v < static_cast<NodeId>(plan_.shapes.size()); ++v) held_[v] = whole(shape(v));
  if (!split()) return;
  const RankOf me{options_.ranks->rank(), options_.ranks->size()};
  for (int i = 0; i < segments(); ++i) {
    const Segment& s = segment(i);
    if (s.reduction < 0 && s.tier == Tier::kResident) {
      held_[s.output] = held_checkpoint(graph_, plan_, i, me);
    }
    if (!s.is<SubSegments>() || s.inner_tier() != Tier::kResident) continue;
    for (NodeId v : kept_inner(graph_, s)) held_[v] = held_inner(graph_, plan_, i, v, me);
  }
}

// What a step split over ranks does not split yet (docs/slide-parallel.md): each of these keeps
// state that one rank's tiles alone would leave wrong on the others.
void Step::check_split() const {
  if (!split()) return;
  const std::string why = split_refusal(graph_, plan_);
  if (why.empty()) return;
  throw Error("slide-parallel: " + why +
              ", which is not yet split over ranks; run it on one rank per slide "
              "(--distributed gives each rank its own slides)");
}

Step::~Step() = default;

// Each segment's glass tiles (core/plan/glass.h), where the image declares a background.
void Step::find_glass() {
  const Background* background = options_.glass ? source_.background() : nullptr;
  if (background != nullptr && split()) {
    const std::string why = glass_split_refusal(graph_, plan_, training_);
    if (!why.empty()) {
      spdlog::debug("split over ranks, the glass is computed as tissue: {}", why);
      background = nullptr;
    }
  }
  CellMask image;
  if (background != nullptr) {
    if (background->cells.height() != shape(0).height ||
        background->cells.width() != shape(0).width) {
      throw Error("internal: the image's background covers " + to_string(background->cells) +
                  ", the image is " + to_string(shape(0)));
    }
    image = background->cells;
    uniform_[0] = at::tensor(background->value, at::TensorOptions().dtype(at::kDouble))
                      .view({1, -1, 1, 1})
                      .to(tensor_options_);
  }
  glass_ = plan_glass(graph_, plan_, image, training_, options_.input_gradient);
  for (int i = 0; i < segments(); ++i) {
    const SegmentGlass& g = glass_[static_cast<size_t>(i)];
    if (!g.obstacle.empty()) spdlog::debug("segment {} runs its glass tiles: {}", i, g.obstacle);
    if (!g.dense.empty()) spdlog::debug("segment {} computes its glass as tissue: {}", i, g.dense);
    if (!g.dense.empty() && segment(i).reduction < 0) {
      passed_at_[segment(i).output] = first_position(g.output);
    }
  }
}

// A segment that computes its glass as tissue and hands it on: its output's uniform value, read
// at one of its uniform positions (all hold it, up to rounding) from the tile `y` over `tile`.
void Step::take_uniform(const Segment& s, const Region& tile, const at::Tensor& y) {
  const Region& at = passed_at_[s.output];
  if (at.empty() || intersect(at, tile).empty()) return;
  uniform_[s.output] = crop({y, tile}, at).detach().clone();
}

// Its backward: the gradient's sum over the uniform positions, which the next segment took as
// a sum (core/exec/glass.h), seeded at the one position its value was read at, in the tile that
// holds it. Every uniform position has the same Jacobians towards the parameters and every
// statistic (its cone is uniform), so only the sum matters; towards the input, the gradient moves
// within the previous segment's uniform positions, which that segment takes as a sum too.
at::Tensor Step::passed_glass_root(const Segment& s, const Region& tile,
                                   const at::Tensor& y) const {
  const Region& at = passed_at_[s.output];
  const at::Tensor& sum = glass_grads_[s.output];
  if (at.empty() || !sum.defined() || intersect(at, tile).empty() || !y.requires_grad()) return {};
  const at::Tensor y_at = crop({y, tile}, at);
  return seeded(y_at, sum.to(y_at.scalar_type()).view_as(y_at));
}

// The store's write-behind for the pass about to run: the plan's for it (make_plan sizes it
// from the pass's slack), else the plan's one.
void Step::write_behind(int64_t bytes) {
  if (store_) store_->set_write_behind(bytes > 0 ? bytes : plan_.write_behind_bytes);
}

at::Tensor Step::forward() {
  at::NoGradGuard no_grad;
  for (int i = 0; i < segments(); ++i) {
    const PassLog log(*this, i, "forward");
    write_behind(segment(i).forward_write_behind);
    forward_segment(i);
  }
  const Segment& last = plan_.segments.back();
  return last.reduction >= 0 ? reduced_ : checkpoints_[last.output];
}

void Step::forward_segment(int index) {
  const Segment& s = segment(index);
  SchemeRun& run = *runs_[static_cast<size_t>(index)];
  Output out(*this, index);
  run.before_forward();
  run.schedule_forward();
  for (int64_t t = 0; t < s.forward.tiles(); ++t) {
    if (!runs(index, Pass::kForward, t)) continue;  // another rank's
    if (t + 1 == s.forward.tiles() && out.stored()) preschedule(index + 1, /*backward=*/false);
    emit(index, s.forward, t, TileEvent::kForward, false);
    const Region tile = s.forward.tile(t);
    const at::Tensor y = run.forward_tile(t, tile);
    take_uniform(s, tile, y);
    out.add(tile, y);
    ++forward_tiles;
    glass_forward_tiles += glass(index).forward[static_cast<size_t>(t)];
    emit(index, s.forward, t, TileEvent::kForward, true);
  }
  run.after_forward();
  out.finish();
}

at::Tensor Step::backward(at::Tensor grad) {
  for (int i = segments() - 1; i >= 0; --i) {
    const NodeId out = segment(i).output;
    // An offloaded output is not read by its own segment's backward (its gradient is): its
    // resident blocks go now (the planner counts them until the next segment's backward).
    stored_[out].reset();
    const PassLog log(*this, i, "backward");
    write_behind(segment(i).backward_write_behind);
    grad = runs_[static_cast<size_t>(i)]->backward(grad);
    // Split over ranks: each rank's tiles' part of the input's gradient, summed where the
    // previous segment's tiles read it (the image's whole).
    if (grad.defined() && i > 0) {
      exchange_over_ranks({grad, held(segment(i).input)}, gives_gradient(i, segment(i).input),
                          true);
    } else if (i > 0 && stored_grads_[segment(i).input]) {
      exchange_stored_gradient(*stored_grads_[segment(i).input], shape(segment(i).input).channels,
                               gives_gradient(i, segment(i).input));
    } else if (grad.defined()) {
      sum_over_ranks({grad});
    }
    glass_grads_[out] = at::Tensor();  // taken: by the segment's chain, or its passed_glass_root
    checkpoints_[out] = at::Tensor();
    sparse_[out].reset();
    stored_grads_[out].reset();
  }
  return grad;
}

Step::PassLog::PassLog(const Step& step, int segment, std::string pass)
    : step_(step),
      segment_(segment),
      pass_(std::move(pass)),
      on_(spdlog::should_log(spdlog::level::debug)) {
  if (on_) {
    start_ = step_.store_stats();
    t0_ = Clock::now();
  }
}

Step::PassLog::~PassLog() {
  if (!on_) return;
  const TileStoreStats end = step_.store_stats();
  spdlog::debug(
      "segment {} {}: {:.0f} ms; waited {:.0f} ms for reads, {:.0f} ms for writes; read {}, "
      "wrote {}; the I/O thread busy {:.0f} ms",
      segment_, pass_, ms_since(t0_), end.read_wait_ms - start_.read_wait_ms,
      end.write_wait_ms - start_.write_wait_ms, format_bytes(end.read_bytes - start_.read_bytes),
      format_bytes(end.written_bytes - start_.written_bytes),
      end.read_ms + end.write_ms - start_.read_ms - start_.write_ms);
}

std::vector<NodeId> Step::barriers(const Segment& s) const {
  std::vector<NodeId> out;
  if (s.is<WholeBarriers>()) return out;
  for (NodeId v = s.input + 1; v <= s.output; ++v) {
    if (needs_statistics(graph_.node(v), training_)) out.push_back(v);
  }
  return out;
}

Region Step::share(const Segment& s, NodeId b, const Region& tile) const {
  return barrier_share(tile, shape(s.output), shape(graph_.node(b).inputs[0]));
}

// Segment `index`'s output lives in the tile store (never the last's: the head reads it).
bool Step::offloaded(int index) const {
  const Segment& s = segment(index);
  return store_ && s.tier != Tier::kResident && s.reduction < 0 && index + 1 < segments();
}

TileTensor Step::read_input(const Segment& s, const Region& r) {
  return short_halo(s, read_input_exactly(s, r));
}

TileTensor Step::read_input_exactly(const Segment& s, const Region& r) {
  if (s.input == 0) {
    if (r.empty()) {
      return {at::empty({1, source_.channels(), 0, 0}, tensor_options_), r};
    }
    return {to_compute(source_.read(r), tensor_options_), r};
  }
  if (const auto& stored = stored_[s.input]) {
    return {stored->read(r, read_format(at::GradMode::is_enabled())), r};  // as run_tile's
  }
  if (const auto& sparse = sparse_[s.input]) {
    return {sparse->read(r, read_format(at::GradMode::is_enabled())), r};
  }
  return {crop({checkpoints_[s.input], held(s.input)}, r), r};
}

// Fault::kHalo: the first window read in halo_fault_segment's segment that ends inside the
// activation on some side comes one row (or column) short on that side, and the rows that
// remain stand where the window's should (a zero row fills the other end), in every pass that
// reads that window again. Zeroing the lost row alone can be invisible: a max pool after
// resnet18's first convolution never picked it, and the step came out bit-identical.
TileTensor Step::short_halo(const Segment& s, TileTensor t) {
  if (options_.inject != Fault::kHalo || &s != halo_segment_ || t.region.empty()) return t;
  const Shape& in = shape(s.input);
  const Region& r = t.region;
  const int dim = r.y.begin > 0 || r.y.end < in.height ? 2 : 3;
  const bool at_start = dim == 2 ? r.y.begin > 0 : r.x.begin > 0;
  if (!at_start && (dim == 2 ? r.y.end == in.height : r.x.end == in.width)) return t;
  const int64_t n = t.tensor.size(dim);
  if (n < 2) return t;
  if (!halo_region_) halo_region_ = r;
  if (!(*halo_region_ == r)) return t;
  at::Tensor shorted = at::zeros_like(t.tensor);
  if (at_start) {
    shorted.narrow(dim, 0, n - 1).copy_(t.tensor.narrow(dim, 1, n - 1));
  } else {
    shorted.narrow(dim, 1, n - 1).copy_(t.tensor.narrow(dim, 0, n - 1));
  }
  return {shorted, t.region};
}

at::MemoryFormat Step::read_format(bool grad) const {
  return grad ? formats_.recompute.value_or(at::MemoryFormat::Contiguous) : formats_.forward;
}

// The recompute's copy is autograd's (the gradient reaches the tile as it was).
TileTensor Step::in_tile_format(TileTensor input) const {
  if (input.tensor.numel() == 0) return input;
  if (!at::GradMode::is_enabled()) {
    if (!input.tensor.is_contiguous(formats_.forward)) {
      at::Tensor t = at::empty_like(input.tensor, formats_.forward);
      copy_tile(t, input.tensor);
      input.tensor = std::move(t);
    }
  } else if (formats_.recompute) {
    input.tensor = input.tensor.contiguous(*formats_.recompute);
  }
  return input;
}

at::Tensor Step::run_tile(NodeId first, NodeId output, const std::vector<Region>& need,
                          TileTensor input, const TileExtras& extras) {
  std::vector<TileTensor> acts(static_cast<size_t>(output) + 1);
  std::vector<int> uses(static_cast<size_t>(output) + 1, 0);
  for (NodeId v = first + 1; v <= output; ++v) {
    for (NodeId p : graph_.node(v).inputs) ++uses[static_cast<size_t>(p)];
  }
  acts[static_cast<size_t>(first)] = in_tile_format(std::move(input));
  // An empty tile's options: the input tile's (it may be freed before a later node's).
  const at::TensorOptions options = acts[static_cast<size_t>(first)].tensor.options();
  std::vector<GlassParts> parts(extras.boxes != nullptr ? acts.size() : 0);
  for (NodeId v = first + 1; v <= output; ++v) {
    const Node& node = graph_.node(v);
    const bool keep = keeps_parts(v, output, extras);
    if (parts.empty() || !run_parts(v, acts, parts, extras, keep)) {
      for (NodeId p : node.inputs) {
        if (!parts.empty()) fill_parts(p, acts, parts, extras);
      }
      const bool leaf = extras.leaves != nullptr && extras.leaves->count(v) > 0;
      acts[static_cast<size_t>(v)] =
          extras.boxes != nullptr && !leaf
              ? run_boxed(first, v, acts, extras, options,
                          keep ? &parts[static_cast<size_t>(v)] : nullptr)
              : run_node(first, v, need[static_cast<size_t>(v)], acts, extras, options);
    }
    // A barrier's input, also where the barrier's own output is not needed: the tile's share
    // of it may still hold positions (the correction's).
    if (node.is_barrier() && extras.barrier_acts != nullptr) {
      (*extras.barrier_acts)[node.inputs[0]] = acts[static_cast<size_t>(node.inputs[0])];
    }
    for (NodeId p : node.inputs) {
      if (--uses[static_cast<size_t>(p)] > 0) continue;
      acts[static_cast<size_t>(p)] = {};
      if (!parts.empty()) parts[static_cast<size_t>(p)] = {};
    }
  }
  return acts[static_cast<size_t>(output)].tensor;
}

// Node `v`'s tile over `r` from its producers' tiles in `acts`.
TileTensor Step::run_node(NodeId first, NodeId v, const Region& r,
                          const std::vector<TileTensor>& acts, const TileExtras& extras,
                          const at::TensorOptions& options) {
  if (extras.leaves != nullptr && extras.leaves->count(v) > 0) {
    // A leaf read when the tile gets here, so that it is freed after its last consumer like
    // any activation.
    const TileTensor& leaf = extras.leaves->at(v);
    return leaf.tensor.defined() ? leaf : TileTensor{extras.read_leaf(v, leaf.region), leaf.region};
  }
  return compute_node(first, v, r, acts, extras, options);
}

// Node `v`'s tile in a tile with glass (extras.boxes): over all it holds where it is computed
// whole, else over its boxes (run_filled; kept as parts where `keep` is given).
TileTensor Step::run_boxed(NodeId first, NodeId v, const std::vector<TileTensor>& acts,
                           const TileExtras& extras, const at::TensorOptions& options,
                           GlassParts* keep) {
  const Region& held = extras.boxes->held[static_cast<size_t>(v)];
  const Boxes& boxes = extras.boxes->computed[static_cast<size_t>(v)];
  if (extras.barrier_value && barrier_states_[v] == nullptr &&
      needs_statistics(graph_.node(v), training_)) {
    return run_whole_barrier(first, v, acts, extras, options);
  }
  if (held.empty() || (boxes.size() == 1 && boxes.front() == held) ||
      runs_whole(graph_.node(v), static_cast<bool>(extras.barrier_value))) {
    return compute_node(first, v, held, acts, extras, options);
  }
  return run_filled(first, v, acts, extras, options, keep);
}

// Barrier `v`, run whole in a tile that fills its glass (WholeBarriers): over its whole input
// (its uniform positions filled), so its statistic is the whole activation's; its output at a
// position outside its boxes is its uniform value, handed to extras.barrier_value.
TileTensor Step::run_whole_barrier(NodeId first, NodeId v, const std::vector<TileTensor>& acts,
                                   const TileExtras& extras, const at::TensorOptions& options) {
  const Region& held = extras.boxes->held[static_cast<size_t>(v)];
  TileTensor out = compute_node(first, v, held, acts, extras, options);
  const Boxes uniform = ring(held, extras.boxes->computed[static_cast<size_t>(v)]);
  if (!uniform.empty()) {
    const Region& r = uniform.front();
    const Region at{{r.y.begin, r.y.begin + 1}, {r.x.begin, r.x.begin + 1}};
    extras.barrier_value(v, crop(out, at).clone());  // a view would hold the whole output
  }
  return out;
}

// Node `v` over what the tile holds of it, computed over its boxes only (extras.boxes;
// core/exec/glass.h), its uniform value around them. Several boxes read their inputs through
// crop_each.
TileTensor Step::run_filled(NodeId first, NodeId v, const std::vector<TileTensor>& acts,
                            const TileExtras& extras, const at::TensorOptions& options,
                            GlassParts* keep) {
  ++glass_filled;
  const Region& r = extras.boxes->held[static_cast<size_t>(v)];
  const Boxes& boxes = extras.boxes->computed[static_cast<size_t>(v)];
  const Node& node = graph_.node(v);
  std::vector<std::vector<TileTensor>> by_input;  // by input, by box
  if (boxes.size() > 1 && at::GradMode::is_enabled()) {
    for (NodeId p : node.inputs) {
      std::vector<Region> windows;
      for (const Region& box : boxes) windows.push_back(needed_input(node, box, shape(p)));
      by_input.push_back(crop_each(acts[static_cast<size_t>(p)], windows));
    }
  }
  std::vector<at::Tensor> parts;
  std::vector<TileTensor> own;
  for (size_t b = 0; b < boxes.size(); ++b) {
    if (by_input.empty()) {
      parts.push_back(compute_node(first, v, boxes[b], acts, extras, options).tensor);
      continue;
    }
    own = acts;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      own[static_cast<size_t>(node.inputs[i])] = by_input[i][b];
    }
    parts.push_back(compute_node(first, v, boxes[b], own, extras, options).tensor);
  }
  if (keep != nullptr) {
    *keep = {std::move(parts), &boxes};
    return {};
  }
  const at::MemoryFormat format = parts.empty() ? read_format(at::GradMode::is_enabled())
                                                : parts.front().suggest_memory_format();
  const at::Tensor& value = (*extras.fill)[static_cast<size_t>(v)];
  if (!value.defined()) {
    throw Error("internal: " + node.name + " fills around its boxes without its uniform value");
  }
  return {fill_around(value, r, parts, boxes, format), r};
}

// Whether node `v` of a tile ending at `output` may stay parts (GlassParts) when computed over
// its boxes: each of its consumers in the tile is a pointwise op or a join, which can run part
// by part; not the output, nor where barriers run whole (their consumers compute all they hold).
bool Step::keeps_parts(NodeId v, NodeId output, const TileExtras& extras) const {
  if (extras.boxes == nullptr || extras.barrier_value || v >= output) return false;
  if (extras.leaves != nullptr && extras.leaves->count(v) > 0) return false;
  for (NodeId c : graph_.consumers()[static_cast<size_t>(v)]) {
    const OpKind kind = graph_.node(c).kind;
    if (c <= output && kind != OpKind::kPointwise && kind != OpKind::kBinary) return false;
  }
  return true;
}

// Pointwise op or join `v`, some of whose inputs are parts, computed part by part when each of
// its boxes lies in one part of each such input (its other inputs hold it whole): kept as parts
// (`keep`) or filled. False where it cannot (the caller fills its inputs and runs it as usual).
bool Step::run_parts(NodeId v, std::vector<TileTensor>& acts, std::vector<GlassParts>& parts,
                     const TileExtras& extras, bool keep) {
  const Node& node = graph_.node(v);
  const auto i = static_cast<size_t>(v);
  const Region& held = extras.boxes->held[i];
  const Boxes& boxes = extras.boxes->computed[i];
  if ((node.kind != OpKind::kPointwise && node.kind != OpKind::kBinary) || held.empty() ||
      boxes.empty() || runs_whole(node, static_cast<bool>(extras.barrier_value)) ||
      std::none_of(node.inputs.begin(), node.inputs.end(),
                   [&](NodeId p) { return parts[static_cast<size_t>(p)].defined(); })) {
    return false;
  }
  std::vector<std::vector<TileTensor>> ins(boxes.size());
  for (size_t b = 0; b < boxes.size(); ++b) {
    for (NodeId p : node.inputs) {
      const GlassParts& in = parts[static_cast<size_t>(p)];
      if (!in.defined()) {
        const TileTensor& t = acts[static_cast<size_t>(p)];
        if (!(intersect(t.region, boxes[b]) == boxes[b])) return false;
        ins[b].push_back(t);
        continue;
      }
      const auto k = std::find_if(in.boxes->begin(), in.boxes->end(), [&](const Region& r) {
        return intersect(r, boxes[b]) == boxes[b];
      });
      if (k == in.boxes->end()) return false;
      ins[b].push_back({in.tensors[static_cast<size_t>(k - in.boxes->begin())], *k});
    }
  }
  ++glass_filled;
  std::vector<at::Tensor> out;
  for (size_t b = 0; b < boxes.size(); ++b) {
    std::vector<Shape> shapes;
    for (NodeId p : node.inputs) shapes.push_back(shape(p));
    out.push_back(forward_tile(node, boxes[b], ins[b], shapes));
  }
  if (keep) {
    parts[i] = {std::move(out), &boxes};
  } else if (boxes.size() == 1 && boxes.front() == held) {
    acts[i] = {std::move(out.front()), held};
  } else {
    acts[i] = {
        fill_around((*extras.fill)[i], held, out, boxes, out.front().suggest_memory_format()),
        held};
  }
  return true;
}

// Node `v`'s tile filled from its parts, where it is parts (GlassParts).
void Step::fill_parts(NodeId v, std::vector<TileTensor>& acts, std::vector<GlassParts>& parts,
                      const TileExtras& extras) const {
  GlassParts& p = parts[static_cast<size_t>(v)];
  if (!p.defined()) return;
  const auto i = static_cast<size_t>(v);
  const Region& held = extras.boxes->held[i];
  if (!(*extras.fill)[i].defined()) {
    throw Error("internal: " + graph_.node(v).name + " fills around its parts without its value");
  }
  const at::MemoryFormat format = p.tensors.empty() ? read_format(at::GradMode::is_enabled())
                                                    : p.tensors.front().suggest_memory_format();
  acts[i] = {fill_around((*extras.fill)[i], held, p.tensors, *p.boxes, format), held};
  p = {};
}

TileTensor Step::compute_node(NodeId first, NodeId v, const Region& r,
                              const std::vector<TileTensor>& acts, const TileExtras& extras,
                              const at::TensorOptions& options) {
  const Node& node = graph_.node(v);
  if (node.is_barrier()) return run_barrier(node, r, acts, extras, options);
  if (r.empty()) return {at::empty({1, node.channels, 0, 0}, options), r};
  std::vector<TileTensor> ins;
  std::vector<Shape> in_shapes;
  for (NodeId p : node.inputs) {
    ins.push_back(acts[static_cast<size_t>(p)]);
    in_shapes.push_back(shape(p));
  }
  // A pointwise op may overwrite its input when it is the only reader of a tensor the
  // producer freshly allocated (never a view of a checkpoint, the image, or an alias).
  const Node& producer = graph_.node(node.inputs[0]);
  const bool overwrite = allocates_output(producer) && producer.id != first &&
                         graph_.consumers()[static_cast<size_t>(producer.id)].size() == 1;
  return {forward_tile(node, r, ins, in_shapes, overwrite), r};
}

// `options`: an empty tile's (the segment input tile's).
TileTensor Step::run_barrier(const Node& node, const Region& r, const std::vector<TileTensor>& acts,
                             const TileExtras& extras, const at::TensorOptions& options) {
  BarrierState* state = barrier_states_[node.id].get();
  const TileTensor& in = acts[static_cast<size_t>(node.inputs[0])];
  if (state == nullptr && needs_statistics(node, training_)) {
    // A one-tile segment (WholeBarriers): the barrier over its whole input, as plain LibTorch
    // runs it (its statistic counts every position, also those no consumer reads), then the
    // part the segment needs.
    const Shape& in_shape = shape(node.inputs[0]);
    if (in.region.y.size() != in_shape.height || in.region.x.size() != in_shape.width) {
      throw Error("internal: " + node.name + " runs whole on part of its input");
    }
    const at::Tensor y = barrier_plain(node, in.tensor, training_, update_running_);
    return {crop({y, in.region}, r), r};
  }
  if (r.empty()) return {at::empty({1, node.channels, 0, 0}, options), r};
  const at::Tensor x = crop(in, r);
  at::Tensor y = state ? state->forward(x) : batch_norm_eval(node, x);
  if (extras.hooks && state != nullptr && !state->sums_done() && y.requires_grad()) {
    y.register_hook(
        [state, x = x.detach()](const at::Tensor& grad) { state->add_output_grad(x, grad); });
  }
  TileTensor out{std::move(y), r};
  if (extras.barrier_acts != nullptr) (*extras.barrier_acts)[node.id] = out;
  return out;
}

at::Tensor Step::output_root(const Segment& s, const Region& tile, at::Tensor& y,
                             const at::Tensor& grad_out, StoredActivation* stored_grad_out) {
  const Shape& out_shape = shape(s.output);
  const bool is_max = s.reduction >= 0 && graph_.node(s.reduction).kind == OpKind::kGlobalMaxPool;
  at::Tensor surrogate, seed;
  if (s.reduction >= 0 && attention_) {
    // A scalar whose gradient is the tile's part of the whole map's (core/exec/attention.h).
    surrogate = attention_->surrogate(y, grad_out);
    seed = at::ones({}, surrogate.options());
  } else if (s.reduction < 0) {
    const at::Tensor passed = passed_glass_root(s, tile, y);
    surrogate = y;
    seed = stored_grad_out != nullptr ? stored_grad_out->read(tile)
                                      : crop({grad_out, held(s.output)}, tile);
    if (passed.defined()) {  // then y requires a gradient (passed_glass_root)
      y.reset();
      return seeded(surrogate, seed.to(surrogate.scalar_type())) + passed;
    }
  } else if (!is_max) {
    surrogate = y.sum({2, 3});
    seed = grad_out / static_cast<double>(out_shape.height * out_shape.width);
  } else {
    // Route each channel's gradient to its maximum, if that lies in this tile.
    const int64_t w = tile.x.size();
    const at::Tensor gy = at::div(reduced_index_, out_shape.width, "floor");
    const at::Tensor gx = at::remainder(reduced_index_, out_shape.width);
    const at::Tensor inside = (gy >= tile.y.begin)
                                  .logical_and(gy < tile.y.end)
                                  .logical_and(gx >= tile.x.begin)
                                  .logical_and(gx < tile.x.end);
    const at::Tensor local =
        at::where(inside, (gy - tile.y.begin) * w + (gx - tile.x.begin), at::zeros_like(gy));
    surrogate = y.flatten(2).gather(2, local.unsqueeze(2)).squeeze(2);
    seed = at::where(inside, grad_out, at::zeros_like(grad_out));
  }
  y.reset();
  if (!surrogate.requires_grad()) return {};
  return seeded(surrogate, seed.to(surrogate.scalar_type()));
}

at::Tensor Step::add_corrections(const Segment& s, const Region& tile, at::Tensor root,
                                 const std::map<NodeId, TileTensor>& acts,
                                 const std::vector<NodeId>& barriers) const {
  for (NodeId b : barriers) {
    const BarrierState& state = *barrier_states_[b];
    if (!state.sums_done()) continue;
    const Region r = share(s, b, tile);
    if (r.empty()) continue;
    const at::Tensor x = crop(acts.at(graph_.node(b).inputs[0]), r);
    if (!x.requires_grad()) continue;
    const at::Tensor c = state.correction(x);
    root = root.defined() ? root + c : c;
  }
  return root;
}

at::Tensor Step::zeros(const Shape& s) const {
  return at::zeros({1, s.channels, s.height, s.width}, tensor_options_);
}

at::Tensor Step::held_zeros(NodeId v) const {
  const Region& r = held(v);
  return at::zeros({1, shape(v).channels, r.y.size(), r.x.size()}, tensor_options_);
}

// Allocated at the first addition; a first addition that covers it all is taken as it is (a
// one-tile segment's gradients move rather than being added to zeros: bench/NOTES.md
// session 20).
void Step::add_into(at::Tensor& grad, NodeId v, const Region& r, const at::Tensor& g) const {
  if (!grad.defined()) {
    if (r == held(v) && g.is_non_overlapping_and_dense() &&
        g.scalar_type() == tensor_options_.dtype().toScalarType()) {
      grad = g;
      return;
    }
    grad = held_zeros(v);
  }
  crop({grad, held(v)}, r).add_(g);
}

void Step::emit(int segment, const Partition& part, int64_t index, TileEvent::Pass pass,
                bool done) {
  if (options_.observer == nullptr) return;
  TileEvent e;
  e.segment = segment;
  e.tile = index;
  e.tiles = part.tiles();
  e.row = index / part.cols();
  e.col = index % part.cols();
  e.out = part.tile(index);
  e.pass = pass;
  e.done = done;
  const SegmentGlass& g = glass(segment);
  const std::vector<uint8_t>& flags = pass == TileEvent::kForward ? g.forward : g.backward;
  e.glass = index < static_cast<int64_t>(flags.size()) && flags[static_cast<size_t>(index)] != 0;
  options_.observer->on_tile(e);
  const MemoryReading reading = done ? memory_reading(tensor_options_.device()) : MemoryReading{};
  if (reading.live < 0) return;
  MemorySample m;
  m.live = reading.live;
  m.peak = reading.peak;
  m.baseline = memory_baseline_;
  m.budget = plan_.budget_bytes;
  if (store_) {
    const TileStoreStats st = store_->stats();
    m.by_category["store resident"] = st.resident_bytes;
    m.by_category["host"] = st.host_bytes;
    m.by_category["disk"] = st.disk_bytes;
    m.by_category["in flight"] = st.in_flight_bytes;
  }
  options_.observer->on_memory(m);
}

// The store reads what segment `next`'s first tile reads (those the last tile is still to
// write included: the store keeps them when they come), so the next segment does not start by
// waiting. That segment then leaves those reads out of its own schedule, which keeps the
// schedule in the order the reads happen.
void Step::preschedule(int next, bool backward) {
  // Split over ranks, a rank's first tile of the next segment is not its first: no prefetch.
  if (next < 0 || next >= segments() || split()) return;
  const Segment& n = segment(next);
  const auto& stored = stored_[n.input];
  // A segment with barriers starts with other reads (its statistic or sums passes).
  if (!stored || !barriers(n).empty()) return;
  const Partition& part = backward ? n.backward : n.forward;
  const int64_t first = backward ? part.tiles() - 1 : 0;
  if (backward && n.keeps_graph()) return;
  const SegmentGlass& g = glass(next);
  if ((backward ? g.backward : g.forward)[static_cast<size_t>(first)] != 0)
    return;  // a glass tile reads nothing
  store_->schedule(stored->reads(run(next).needs(part.tile(first))[n.input]));
  (backward ? prescheduled_backward_ : prescheduled_forward_) = next;
}

}  // namespace tessel::core
