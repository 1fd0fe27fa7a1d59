#include "core/exec/executor.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <tuple>

#include "core/device/device.h"
#include "core/device/memory.h"
#include "core/error.h"
#include "core/exec/attention.h"
#include "core/exec/barrier.h"
#include "core/exec/dropout.h"
#include "core/exec/shared_rows.h"
#include "core/exec/tile_ops.h"
#include "core/plan/geometry.h"
#include "core/store/stored_activation.h"
#include "core/store/tile_store.h"

namespace tessel::core {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The dtype and device a step computes in: the parameters', or, for a network without
// parameters, the image's (a corner pixel is read to learn them), so a float64 image is never
// rounded to float. A source's pixels are moved there (slides are decoded on the CPU).
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

Region whole(const Shape& s) { return {{0, s.height}, {0, s.width}}; }

// A tile's backward from its output `y` with the output's gradient tile as the seed, such that
// the caller holds neither while it runs: the seed lives in this node until its backward hands
// it on, and `y` only where autograd saved it, so each is freed as the gradient passes (as the
// planner's tile model counts). torch::autograd::backward({y}, {seed}) keeps both alive to the
// end: two more tile-sized tensors at the peak of every backward tile (vgg-mini 4096², segment
// 1: 987 MiB measured against 876 predicted, bench/NOTES.md).
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

// One step of a tiled plan. Holds the checkpoints between segments.
class TiledStep {
 public:
  // `training`: a backward pass follows (train_step), so the last tile may keep its graph.
  TiledStep(Graph& graph, const Plan& plan, TileSource& source, const StepOptions& options,
            bool training)
      : training_(training),
        graph_(graph),
        plan_(plan),
        source_(source),
        options_(options),
        tensor_options_(compute_options(graph, source)),
        formats_(options.tile_formats.value_or(
            tile_formats(tensor_options_.device(), options.precision))),
        checkpoints_(static_cast<size_t>(graph.size())),
        stored_(static_cast<size_t>(graph.size())),
        stored_grads_(static_cast<size_t>(graph.size())),
        barrier_states_(static_cast<size_t>(graph.size())),
        kept_(plan.segments.size()),
        shared_kept_(plan.segments.size()),
        shared_ids_(plan.segments.size()),
        shared_rows_(plan.segments.size()),
        leaves_(static_cast<size_t>(graph.size())),
        interior_(static_cast<size_t>(graph.size())) {
    // Each segment's leaves once: inner_checkpoints walks the segment for its forks, and the
    // sub-segments ask for them at every tile. And the barriers each sub-segment recomputes the
    // input of (SubSegments::dropped), by the node it computes.
    for (const Segment& s : plan.segments) {
      auto& l = leaves_[static_cast<size_t>(s.input)];
      l = {s.input};
      for (NodeId v : kept_inner(graph, s)) l.push_back(v);
      const auto readers = dropped_readers(graph, plan.shapes, s);
      for (size_t k = 0; k < readers.size(); ++k) {
        const NodeId d = s.dropped_inner()[k];
        if (!barrier_input(graph, s, d)) continue;  // a fork: each reader recomputes it
        if (readers[k].size() != 1) {
          throw Error("internal: dropped inner checkpoint " + graph.node(d).name + " is read by " +
                      std::to_string(readers[k].size()) + " sub-segments");
        }
        auto& list = interior_[static_cast<size_t>(s.input)][readers[k][0]];
        for (NodeId b : barriers_reading(graph, s, d)) list.push_back(b);
      }
      for (auto& [owner, list] : interior_[static_cast<size_t>(s.input)]) {
        std::sort(list.begin(), list.end());
      }
    }
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
  }

  // The store's write-behind for the pass about to run: the plan's for it (make_plan sizes it
  // from the pass's slack), else the plan's one.
  void write_behind(int64_t bytes) {
    if (store_) store_->set_write_behind(bytes > 0 ? bytes : plan_.write_behind_bytes);
  }

  // Forward of every segment without autograd; returns the head's input (the last checkpoint
  // or the streaming reduction's result).
  at::Tensor forward() {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < plan_.segments.size(); ++i) {
      const PassLog log(*this, static_cast<int>(i), "forward");
      write_behind(plan_.segments[i].forward_write_behind);
      forward_segment(static_cast<int>(i));
    }
    const Segment& last = plan_.segments.back();
    return last.reduction >= 0 ? reduced_ : checkpoints_[static_cast<size_t>(last.output)];
  }

  // Backward of every segment in reverse, from the gradient of the head's input. Returns the
  // gradient of the image when asked for.
  at::Tensor backward(at::Tensor grad) {
    for (int i = static_cast<int>(plan_.segments.size()) - 1; i >= 0; --i) {
      const auto out = static_cast<size_t>(plan_.segments[static_cast<size_t>(i)].output);
      // An offloaded output is not read by its own segment's backward (its gradient is): its
      // resident blocks go now (the planner counts them until the next segment's backward).
      stored_[out].reset();
      const PassLog log(*this, i, "backward");
      write_behind(plan_.segments[static_cast<size_t>(i)].backward_write_behind);
      grad = backward_segment(i, grad);
      checkpoints_[out] = at::Tensor();
      stored_grads_[out].reset();
    }
    return grad;
  }

  int64_t forward_tiles = 0, backward_tiles = 0;
  TileStoreStats store_stats() const { return store_ ? store_->stats() : TileStoreStats{}; }

 private:
  // At debug level, a line per segment and pass: its time, and the store's waits and bytes
  // during it (where an offloading step's time goes, bench/NOTES.md).
  class PassLog {
   public:
    PassLog(const TiledStep& step, int segment, std::string pass)
        : step_(step),
          segment_(segment),
          pass_(std::move(pass)),
          on_(spdlog::should_log(spdlog::level::debug)) {
      if (on_) {
        start_ = step_.store_stats();
        t0_ = Clock::now();
      }
    }
    ~PassLog() {
      if (!on_) return;
      const TileStoreStats end = step_.store_stats();
      spdlog::debug(
          "segment {} {}: {:.0f} ms; waited {:.0f} ms for reads, {:.0f} ms for writes; read {}, "
          "wrote {}; the I/O thread busy {:.0f} ms",
          segment_, pass_, ms_since(t0_), end.read_wait_ms - start_.read_wait_ms,
          end.write_wait_ms - start_.write_wait_ms,
          format_bytes(end.read_bytes - start_.read_bytes),
          format_bytes(end.written_bytes - start_.written_bytes),
          end.read_ms + end.write_ms - start_.read_ms - start_.write_ms);
    }
    PassLog(const PassLog&) = delete;
    PassLog& operator=(const PassLog&) = delete;

   private:
    const TiledStep& step_;
    int segment_;
    std::string pass_;
    bool on_;
    TileStoreStats start_;
    Clock::time_point t0_;
  };

  const Shape& shape(NodeId v) const { return plan_.shapes[static_cast<size_t>(v)]; }
  bool wants_input_grad(const Segment& s) const { return s.input != 0 || options_.input_gradient; }

  // What each node of `s` holds for output tile `tile`: its share of the shared rows' held rows
  // (SharedRows), else the tile's needs.
  std::vector<Region> needs(const Segment& s, const Region& tile) const {
    if (s.is<SharedRows>()) return shared_row_of(s, tile.y).held;
    return segment_needs(graph_, plan_.shapes, s.input, s.output, tile);
  }

  // Segment `s`'s shared row over `rows` (core/plan/plan.h shared_row), worked out once a step: the
  // forward, the store's schedule and the backward each ask for it, and its cost grows with
  // the segment's depth (bench/NOTES.md, sessions 30-31).
  const SharedRow& shared_row_of(const Segment& s, Window rows) const {
    const auto index = static_cast<size_t>(&s - plan_.segments.data());
    if (index >= plan_.segments.size())
      throw Error("internal: shared rows of a segment not in the plan");
    auto& memo = shared_rows_[index];
    auto it = memo.find({rows.begin, rows.end});
    if (it == memo.end()) {
      it = memo.emplace(std::pair{rows.begin, rows.end},
                        shared_row(graph_, plan_.shapes, s.input, s.output, rows))
               .first;
    }
    return it->second;
  }

  TileTensor read_input(const Segment& s, const Region& r) {
    return short_halo(s, read_input_exactly(s, r));
  }

  TileTensor read_input_exactly(const Segment& s, const Region& r) {
    if (s.input == 0) {
      if (r.empty()) {
        return {at::empty({1, source_.channels(), 0, 0}, tensor_options_), r};
      }
      return {to_compute(source_.read(r), tensor_options_), r};
    }
    if (const auto& stored = stored_[static_cast<size_t>(s.input)]) {
      return {stored->read(r, read_format(at::GradMode::is_enabled())), r};  // as run_tile's
    }
    const at::Tensor& ckpt = checkpoints_[static_cast<size_t>(s.input)];
    return {crop({ckpt, whole(shape(s.input))}, r), r};
  }

  // Fault::kHalo: the first window read in halo_fault_segment's segment that ends inside the
  // activation on some side comes one row (or column) short on that side, and the rows that
  // remain stand where the window's should (a zero row fills the other end), in every pass that
  // reads that window again. Zeroing the lost row alone can be invisible: a max pool after
  // resnet18's first convolution never picked it, and the step came out bit-identical.
  TileTensor short_halo(const Segment& s, TileTensor t) {
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

  // Segment `index`'s output lives in the tile store (never the last's: the head reads it).
  bool offloaded(int index) const {
    const Segment& s = plan_.segments[static_cast<size_t>(index)];
    return store_ && s.tier != Tier::kResident && s.reduction < 0 &&
           index + 1 < static_cast<int>(plan_.segments.size());
  }

  // Runs nodes (input, output] of `s` over `need`, from the input tile; frees each activation
  // after its last consumer in the segment.
  at::Tensor run_tile(const Segment& s, const std::vector<Region>& need, TileTensor input) {
    return run_tile(s.input, s.output, need, std::move(input), nullptr);
  }

  // How many ops of first+1 … output read each node (a node's tile is freed after its last).
  std::vector<int> reader_counts(NodeId first, NodeId output) const {
    std::vector<int> uses(static_cast<size_t>(output) + 1, 0);
    for (NodeId v = first + 1; v <= output; ++v) {
      for (NodeId p : graph_.node(v).inputs) ++uses[static_cast<size_t>(p)];
    }
    return uses;
  }

  // The format a tile read from the store, or allocated for one, takes in a pass (with a
  // gradient: the recompute's, contiguous where it takes its input as it comes).
  at::MemoryFormat read_format(bool grad) const {
    return grad ? formats_.recompute.value_or(at::MemoryFormat::Contiguous) : formats_.forward;
  }

  // A segment's input tile in the format its pass's convs run in (formats_, core/device/device.h).
  // The recompute's copy is autograd's (the gradient reaches the tile as it was).
  TileTensor in_tile_format(TileTensor input) const {
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

  // `node` over `out` from its producers' tiles in `acts` (core/exec/tile_ops.h forward_tile).
  at::Tensor forward_node(const Node& node, const Region& out, const std::vector<TileTensor>& acts,
                          bool overwrite) const {
    std::vector<TileTensor> ins;
    std::vector<Shape> in_shapes;
    for (NodeId p : node.inputs) {
      ins.push_back(acts[static_cast<size_t>(p)]);
      in_shapes.push_back(shape(p));
    }
    return forward_tile(node, out, ins, in_shapes, overwrite);
  }

  // Runs nodes (input, output] over `need`; `barrier_acts`, when given, receives every barrier's
  // output and input tiles there (by node), for the backward's sums and corrections. `leaves`:
  // nodes whose tiles are given (inner checkpoints), not computed. `hooks`: each barrier's output
  // adds its gradient to the barrier's sums as the backward passes it.
  at::Tensor run_tile(NodeId first, NodeId output, const std::vector<Region>& need,
                      TileTensor input, std::map<NodeId, TileTensor>* barrier_acts,
                      const std::map<NodeId, TileTensor>* leaves = nullptr, bool hooks = false) {
    std::vector<TileTensor> acts(static_cast<size_t>(output) + 1);
    std::vector<int> uses = reader_counts(first, output);
    acts[static_cast<size_t>(first)] = in_tile_format(std::move(input));
    const at::TensorOptions options = acts[static_cast<size_t>(first)].tensor.options();
    for (NodeId v = first + 1; v <= output; ++v) {
      const Node& node = graph_.node(v);
      const Region& r = need[static_cast<size_t>(v)];
      const bool given = leaves != nullptr && leaves->count(v) > 0;
      BarrierState* state =
          node.is_barrier() ? barrier_states_[static_cast<size_t>(v)].get() : nullptr;
      if (given) {
        // A leaf the forward reads when it gets here (leaf_tiles), so that it is freed after
        // its last consumer like any activation.
        const TileTensor& leaf = leaves->at(v);
        acts[static_cast<size_t>(v)] =
            leaf.tensor.defined() ? leaf
                                  : TileTensor{read_leaf(v, leaf.region, false), leaf.region};
      } else if (node.is_barrier() && state == nullptr && needs_statistics(node, training_)) {
        // A one-tile segment (WholeBarriers): the barrier over its whole input, as
        // plain LibTorch runs it (its statistic counts every position, also those no consumer
        // reads), then the part the segment needs.
        const TileTensor& in = acts[static_cast<size_t>(node.inputs[0])];
        const Shape& in_shape = shape(node.inputs[0]);
        if (in.region.y.size() != in_shape.height || in.region.x.size() != in_shape.width) {
          throw Error("internal: " + node.name + " runs whole on part of its input");
        }
        const at::Tensor y = barrier_plain(node, in.tensor, training_, update_running_);
        acts[static_cast<size_t>(v)] = {crop({y, in.region}, r), r};
      } else if (r.empty()) {
        acts[static_cast<size_t>(v)] = {at::empty({1, node.channels, 0, 0}, options), r};
      } else if (node.is_barrier()) {
        const TileTensor& in = acts[static_cast<size_t>(node.inputs[0])];
        const at::Tensor x = crop(in, r);
        at::Tensor y = state ? state->forward(x) : batch_norm_eval(node, x);
        if (hooks && state != nullptr && !state->sums_done() && y.requires_grad()) {
          y.register_hook(
              [state, x = x.detach()](const at::Tensor& grad) { state->add_output_grad(x, grad); });
        }
        acts[static_cast<size_t>(v)] = {std::move(y), r};
        if (barrier_acts != nullptr) (*barrier_acts)[v] = acts[static_cast<size_t>(v)];
      } else {
        // A pointwise op may overwrite its input when it is the only reader of a tensor the
        // producer freshly allocated (never a view of a checkpoint, the image, or an alias).
        const Node& producer = graph_.node(node.inputs[0]);
        const bool fresh = allocates_output(producer);
        const bool overwrite = fresh && producer.id != first &&
                               graph_.consumers()[static_cast<size_t>(producer.id)].size() == 1;
        acts[static_cast<size_t>(v)] = {forward_node(node, r, acts, overwrite), r};
      }
      // A barrier's input, also where the barrier's own output is not needed: the tile's share
      // of it may still hold positions (the correction's).
      if (node.is_barrier() && barrier_acts != nullptr) {
        (*barrier_acts)[node.inputs[0]] = acts[static_cast<size_t>(node.inputs[0])];
      }
      for (NodeId p : node.inputs) {
        if (--uses[static_cast<size_t>(p)] == 0) acts[static_cast<size_t>(p)] = {};
      }
    }
    return acts[static_cast<size_t>(output)].tensor;
  }

  // One row of a shared-rows segment (core/exec/shared_rows.h) from its input's held rows.
  at::Tensor run_shared_row(const Segment& s, const SharedRow& row, TileTensor input,
                            const std::vector<at::Tensor>& inherited, std::vector<at::Tensor>* kept,
                            const std::vector<at::Tensor>* handed = nullptr) {
    return core::run_shared_row(graph_, plan_.shapes, s.input, s.output, row,
                                in_tile_format(std::move(input)), inherited, kept, handed);
  }

  // Segment `s`'s kept rows live in the tile store (SharedRows::kept_tier).
  bool shared_stored(const Segment& s) const {
    return s.is<SharedRows>() && training_ && store_ != nullptr &&
           s.shared_tier() != Tier::kResident;
  }
  // The barriers of segment `s` that need whole-image statistics in this step
  // (core/exec/barrier.h). None in a one-tile segment: its tile is the whole activation, so its
  // barriers run whole.
  std::vector<NodeId> barriers(const Segment& s) const {
    std::vector<NodeId> out;
    if (s.is<WholeBarriers>()) return out;
    for (NodeId v = s.input + 1; v <= s.output; ++v) {
      if (needs_statistics(graph_.node(v), training_)) out.push_back(v);
    }
    return out;
  }

  // The share of barrier `b`'s input that output tile `tile` of `s` owns.
  Region share(const Segment& s, NodeId b, const Region& tile) const {
    return barrier_share(tile, shape(s.output), shape(graph_.node(b).inputs[0]));
  }

  // The forward's statistic passes: for each barrier in order, its input recomputed over the
  // shares of the forward tiles (a partition of it) and added to its statistic; the earlier
  // barriers run with theirs. Batch norm's running statistics are updated once, here.
  void statistic_passes(int index) {
    const Segment& s = plan_.segments[static_cast<size_t>(index)];
    for (NodeId b : barriers(s)) {
      const Node& node = graph_.node(b);
      const NodeId in = node.inputs[0];
      auto state = std::make_unique<BarrierState>(node, tensor_options_);
      std::vector<std::pair<Region, std::vector<Region>>> tiles;
      for (int64_t t = 0; t < s.forward.tiles(); ++t) {
        const Region r = share(s, b, s.forward.tile(t));
        if (r.empty()) continue;
        tiles.emplace_back(r, segment_needs(graph_, plan_.shapes, s.input, in, r));
        if (const auto& stored = stored_[static_cast<size_t>(s.input)]) {
          store_->schedule(stored->reads(tiles.back().second[static_cast<size_t>(s.input)]));
        }
      }
      for (const auto& [r, need] : tiles) {
        const Region& in_region = need[static_cast<size_t>(s.input)];
        state->add_input(run_tile(s.input, in, need, read_input(s, in_region), nullptr));
      }
      state->finish_statistics(/*update_running=*/training_);
      barrier_states_[static_cast<size_t>(b)] = std::move(state);
    }
  }

  // The root a backward tile starts from: the output gradient's tile as the seed of `y` (or of
  // the streaming reduction's surrogate), with neither held by the caller (Seeded).
  at::Tensor output_root(const Segment& s, const Region& tile, at::Tensor& y,
                         const at::Tensor& grad_out, StoredActivation* stored_grad_out) {
    const Shape& out_shape = shape(s.output);
    const bool is_max = s.reduction >= 0 && graph_.node(s.reduction).kind == OpKind::kGlobalMaxPool;
    at::Tensor surrogate, seed;
    if (s.reduction >= 0 && attention_) {
      // A scalar whose gradient is the tile's part of the whole map's (core/exec/attention.h).
      surrogate = attention_->surrogate(y, grad_out);
      seed = at::ones({}, surrogate.options());
    } else if (s.reduction < 0) {
      surrogate = y;
      seed = stored_grad_out != nullptr ? stored_grad_out->read(tile)
                                        : crop({grad_out, whole(out_shape)}, tile);
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
    return Seeded::apply(surrogate, seed.to(surrogate.scalar_type()));
  }

  // Adds to `root` the corrections of the barriers whose sums are done, each over the tile's
  // share of its input.
  // `only`, when given: those barriers alone (a sub-segment's, whose inputs it recomputes).
  at::Tensor add_corrections(const Segment& s, const Region& tile, at::Tensor root,
                             const std::map<NodeId, TileTensor>& acts,
                             const std::vector<NodeId>* only = nullptr) {
    for (NodeId b : only != nullptr ? *only : barriers(s)) {
      const BarrierState& state = *barrier_states_[static_cast<size_t>(b)];
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

  // The backward's sums passes: a barrier's correction needs the gradient at its output summed
  // over the image, which includes the corrections of the barriers after it. So the barriers go
  // in rounds, latest first; each round recomputes the segment's tiles and takes the gradient
  // at its barriers' outputs (nothing else: the parameters' gradients come in the main pass).
  void sums_passes(int index, const at::Tensor& grad_out) {
    const Segment& s = plan_.segments[static_cast<size_t>(index)];
    StoredActivation* stored_in = stored_[static_cast<size_t>(s.input)].get();
    StoredActivation* stored_grad_out = stored_grads_[static_cast<size_t>(s.output)].get();
    const auto rounds = barrier_rounds(graph_, s.input, s.output);
    // Every round's reads scheduled now, so the store reads the next round's first blocks while
    // this one's last tiles run.
    if (store_ != nullptr) {
      std::vector<TileStore::BlockId> reads;
      for (int64_t t = s.backward.tiles() - 1; t >= 0; --t) {
        const Region tile = s.backward.tile(t);
        if (stored_in != nullptr) {
          const auto ids = stored_in->reads(needs(s, tile)[static_cast<size_t>(s.input)]);
          reads.insert(reads.end(), ids.begin(), ids.end());
        }
        if (stored_grad_out != nullptr) {
          const auto ids = stored_grad_out->reads(tile);
          reads.insert(reads.end(), ids.begin(), ids.end());
        }
      }
      for (size_t k = 0; k < rounds.size() && !reads.empty(); ++k) store_->schedule(reads);
    }
    for (const std::vector<NodeId>& round : rounds) {
      for (int64_t t = s.backward.tiles() - 1; t >= 0; --t) {
        const Region tile = s.backward.tile(t);
        const std::vector<Region> need = needs(s, tile);
        const Region& in_region = need[static_cast<size_t>(s.input)];
        at::AutoGradMode grad_mode(true);
        std::map<NodeId, TileTensor> acts;
        // The input requires a gradient so that every barrier output does (a squeeze-and-
        // excitation on the segment's input has no parameter in its tile form); only the
        // barriers' output gradients are computed.
        at::Tensor x = read_input(s, in_region).tensor.detach().requires_grad_(true);
        at::Tensor y = run_tile(s.input, s.output, need, {std::move(x), in_region}, &acts);
        at::Tensor root = output_root(s, tile, y, grad_out, stored_grad_out);
        root = add_corrections(s, tile, root, acts);
        std::vector<NodeId> wanted;
        std::vector<at::Tensor> outputs;
        for (NodeId b : round) {
          const TileTensor& out = acts[b];
          if (out.tensor.defined() && out.tensor.requires_grad() && !out.region.empty()) {
            wanted.push_back(b);
            outputs.push_back(out.tensor);
          }
        }
        if (!root.defined() || !root.requires_grad() || outputs.empty()) continue;
        const auto grads = torch::autograd::grad({root}, outputs, {}, /*retain_graph=*/false,
                                                 /*create_graph=*/false, /*allow_unused=*/true);
        for (size_t i = 0; i < wanted.size(); ++i) {
          if (!grads[i].defined()) continue;
          const Node& node = graph_.node(wanted[i]);
          const Region& r = acts[wanted[i]].region;
          barrier_states_[static_cast<size_t>(wanted[i])]->add_output_grad(
              crop(acts[node.inputs[0]], r).detach(), grads[i]);
        }
      }
      for (NodeId b : round) barrier_states_[static_cast<size_t>(b)]->finish_sums();
    }
  }

  void emit(int segment, const Partition& part, int64_t index, TileEvent::Pass pass, bool done) {
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
    options_.observer->on_tile(e);
    const MemoryReading reading = done ? memory_reading(tensor_options_.device()) : MemoryReading{};
    if (reading.live >= 0) {
      MemorySample m;
      m.live = reading.live;
      m.peak = reading.peak;
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
  }

  at::Tensor zeros(const Shape& s) const {
    return at::zeros({1, s.channels, s.height, s.width}, tensor_options_);
  }

  // Adds `g`, region `r` of an activation shaped `s`, into its whole gradient `whole_grad`,
  // allocated at the first addition; a first addition that covers it all is taken as it is (a
  // one-tile segment's gradients move rather than being added to zeros; resnet50 1024² batch
  // norm: peak 1,014 → 930 MiB, time within noise, bench/NOTES.md session 20).
  void add_into(at::Tensor& whole_grad, const Shape& s, const Region& r, const at::Tensor& g) {
    if (!whole_grad.defined()) {
      if (r == whole(s) && g.is_non_overlapping_and_dense() &&
          g.scalar_type() == tensor_options_.dtype().toScalarType()) {
        whole_grad = g;
        return;
      }
      whole_grad = zeros(s);
    }
    crop({whole_grad, whole(s)}, r).add_(g);
  }

  // ---- Barriers as sub-segments (SubSegments) ----

  bool inner_mode(const Segment& s) const { return s.is<SubSegments>() && !barriers(s).empty(); }

  // Segment `s`'s inner checkpoints live in the tile store (SubSegments::tier).
  bool inner_offloaded(const Segment& s) const {
    return store_ != nullptr && s.inner_tier() != Tier::kResident;
  }

  // The barriers of `s` that read node `v`.
  std::vector<NodeId> readers(const Segment& s, NodeId v) const {
    std::vector<NodeId> out;
    for (NodeId b : barriers(s)) {
      if (graph_.node(b).inputs[0] == v) out.push_back(b);
    }
    return out;
  }

  // The segment's input and its inner checkpoints (in order): the sub-segments' leaves.
  const std::vector<NodeId>& leaves(const Segment& s) const {
    return leaves_[static_cast<size_t>(s.input)];
  }
  // The segment's inner checkpoints (core/plan/plan.h).
  std::vector<NodeId> inner_nodes(const Segment& s) const {
    const auto& l = leaves(s);
    return {l.begin() + 1, l.end()};
  }

  // What sub-segment `target` holds over `r` (its share of output tile `tile`), the dropped inner
  // checkpoints it recomputes over their shares at least (their barriers' corrections).
  std::vector<Region> sub_needs(const Segment& s, NodeId target, const Region& r,
                                const Region& tile) const {
    return sub_segment_needs(graph_, plan_.shapes, s.input, leaves(s), target, r, s.dropped_inner(),
                             tile, shape(s.output));
  }

  // The barriers sub-segment `target` of `s` recomputes the input of (SubSegments::dropped).
  const std::vector<NodeId>& interior(const Segment& s, NodeId target) const {
    static const std::vector<NodeId> none;
    const auto& by = interior_[static_cast<size_t>(s.input)];
    const auto it = by.find(target);
    return it == by.end() ? none : it->second;
  }

  // The store's reads a sub-segment's tile over `need` makes, in the order it makes them:
  // the segment's input (read_input), then the inner checkpoints before `target` (leaf_tiles).
  std::vector<TileStore::BlockId> tile_reads(const Segment& s, NodeId target,
                                             const std::vector<Region>& need) const {
    std::vector<TileStore::BlockId> ids;
    auto append = [&](const StoredActivation& stored, const Region& r) {
      const auto more = stored.reads(r);
      ids.insert(ids.end(), more.begin(), more.end());
    };
    if (const auto& stored = stored_[static_cast<size_t>(s.input)]) {
      append(*stored, need[static_cast<size_t>(s.input)]);
    }
    for (NodeId l : inner_nodes(s)) {
      if (l >= target || need[static_cast<size_t>(l)].empty()) continue;
      const auto it = inner_.find(l);
      if (it != inner_.end() && it->second.stored_value) {
        append(*it->second.stored_value, need[static_cast<size_t>(l)]);
      }
    }
    return ids;
  }

  // Region `r` of inner checkpoint `l`: a view of a resident one, a copy of an offloaded one
  // (in its pass's format, as run_tile's input tile).
  at::Tensor read_leaf(NodeId l, const Region& r, bool grad) {
    const Inner& in = inner_.at(l);
    if (!in.stored_value) return crop({in.value, whole(shape(l))}, r);
    return in.stored_value->read(r, read_format(grad));
  }

  // The inner checkpoints' tiles a sub-segment reads (those before `target`), requiring a
  // gradient when `grad`. Without: only their regions, read as run_tile reaches them (a
  // sub-segment late in a ResNet stage recomputes the residual chain from every earlier
  // block's last inner checkpoint, and reading them all first held them all at once: 0.6 GiB
  // over the budget at resnet50 4096²).
  std::map<NodeId, TileTensor> leaf_tiles(const Segment& s, const std::vector<Region>& need,
                                          NodeId target, bool grad) {
    std::map<NodeId, TileTensor> out;
    for (NodeId l : inner_nodes(s)) {
      if (l >= target || need[static_cast<size_t>(l)].empty()) continue;
      const Region& r = need[static_cast<size_t>(l)];
      out[l] = {grad ? read_leaf(l, r, true).detach().requires_grad_(true) : at::Tensor(), r};
    }
    return out;
  }

  // The forward's sub-segments: each inner checkpoint computed over the shares of the forward
  // tiles from the leaves before it and kept (whole, or in the store's blocks); with
  // `with_statistics`, each barrier's statistic added there (the step's forward), else the
  // checkpoints rebuilt for the backward.
  void inner_forward(int index, bool with_statistics) {
    const Segment& s = plan_.segments[static_cast<size_t>(index)];
    at::NoGradGuard no_grad;
    auto start = [&](NodeId v) {
      if (!with_statistics) return;
      for (NodeId b : readers(s, v)) {
        barrier_states_[static_cast<size_t>(b)] =
            std::make_unique<BarrierState>(graph_.node(b), tensor_options_);
      }
    };
    auto add = [&](NodeId v, const at::Tensor& x) {
      if (!with_statistics) return;
      for (NodeId b : readers(s, v)) barrier_states_[static_cast<size_t>(b)]->add_input(x);
    };
    auto finish = [&](NodeId v) {
      if (!with_statistics) return;
      for (NodeId b : readers(s, v)) {
        barrier_states_[static_cast<size_t>(b)]->finish_statistics(training_);
      }
    };
    const StoredActivation* stored_in = stored_[static_cast<size_t>(s.input)].get();
    // Barriers on the segment's input read it over the shares.
    const bool input_pass = with_statistics && !readers(s, s.input).empty();
    std::vector<Region> shares;
    std::vector<TileStore::BlockId> reads;
    for (int64_t t = 0; input_pass && t < s.forward.tiles(); ++t) {
      const Region r = barrier_share(s.forward.tile(t), shape(s.output), shape(s.input));
      if (r.empty()) continue;
      shares.push_back(r);
      if (stored_in != nullptr) {
        const auto ids = stored_in->reads(r);
        reads.insert(reads.end(), ids.begin(), ids.end());
      }
    }
    // The kept inner checkpoints and, in order among them, the dropped ones: a dropped one is
    // computed over its shares for its barriers' statistics only (the forward has none to
    // rebuild), and recomputed by the sub-segment that reads it. Each pass over its tiles.
    const std::vector<NodeId> inner = inner_nodes(s);
    std::vector<NodeId> order = inner;
    if (with_statistics) {
      order.insert(order.end(), s.dropped_inner().begin(), s.dropped_inner().end());
      std::sort(order.begin(), order.end());
    }
    struct Pass {
      NodeId v;
      bool dropped;
      std::vector<std::pair<Region, std::vector<Region>>> tiles;
    };
    std::vector<Pass> passes;
    size_t k = 0;  // kept ones so far (their blocks' index)
    for (const NodeId v : order) {
      const bool dropped = std::find(inner.begin(), inner.end(), v) == inner.end();
      if (dropped && readers(s, v).empty()) continue;  // a fork: no statistic to take
      if (!dropped) {
        // An offloaded one's blocks exist (reserved) from now: the passes' reads of them can be
        // scheduled before they are written.
        Inner& in = inner_[v];
        in = Inner{};
        if (inner_offloaded(s)) {
          in.stored_value = std::make_unique<StoredActivation>(*store_, shape(v),
                                                               s.as<SubSegments>()->blocks.at(k),
                                                               s.inner_tier(), tensor_options_);
        }
        ++k;
      }
      Pass& p = passes.emplace_back(Pass{v, dropped, {}});
      for (int64_t t = 0; t < s.forward.tiles(); ++t) {
        const Region r = barrier_share(s.forward.tile(t), shape(s.output), shape(v));
        if (r.empty()) continue;
        p.tiles.emplace_back(r, sub_needs(s, v, r, s.forward.tile(t)));
        const auto ids = tile_reads(s, v, p.tiles.back().second);
        reads.insert(reads.end(), ids.begin(), ids.end());
      }
    }
    // The step's forward then runs the output's tiles over the leaves (forward_segment).
    for (int64_t t = 0; with_statistics && t < s.forward.tiles(); ++t) {
      const Region tile = s.forward.tile(t);
      const auto ids = tile_reads(s, s.output, sub_needs(s, s.output, tile, tile));
      reads.insert(reads.end(), ids.begin(), ids.end());
    }
    // Every pass's reads scheduled at once, in order: the store reads the next pass's first
    // blocks while this one's last tiles run (an empty schedule at each pass's start cost
    // resnet50 4096² ~5 s of waiting a step, bench/NOTES.md, session 36).
    if (!reads.empty()) store_->schedule(reads);
    if (input_pass) {
      start(s.input);
      for (const Region& r : shares) add(s.input, read_input(s, r).tensor);
      finish(s.input);
    }
    for (const Pass& p : passes) {
      const NodeId v = p.v;
      const PassLog log(*this, index, "forward to " + graph_.node(v).name);
      start(v);
      if (p.dropped) {
        for (const auto& [r, need] : p.tiles) {
          const TileTensor x_in = read_input(s, need[static_cast<size_t>(s.input)]);
          const auto given = leaf_tiles(s, need, v, false);
          add(v, run_tile(s.input, v, need, x_in, nullptr, &given, false));
        }
        finish(v);
        continue;
      }
      Inner& in = inner_.at(v);
      const Shape& vs = shape(v);
      if (!in.stored_value) {
        // In the forward's format (as run_tile's input tiles); rebuilt for the backward's
        // recompute in its format (kept ones stay in the forward's).
        in.value = at::empty({1, vs.channels, vs.height, vs.width},
                             tensor_options_.memory_format(read_format(!with_statistics)));
      }
      for (const auto& [r, need] : p.tiles) {
        const TileTensor x_in = read_input(s, need[static_cast<size_t>(s.input)]);
        const auto given = leaf_tiles(s, need, v, false);
        const at::Tensor x = run_tile(s.input, v, need, x_in, nullptr, &given, false);
        if (in.stored_value) {
          in.stored_value->write(r, x);
        } else {
          copy_tile(crop({in.value, whole(vs)}, r), x);
        }
        add(v, x);
      }
      finish(v);
    }
  }

  // The root a sub-segment's backward tile starts from: the output's (output_root), or the
  // gradient at inner checkpoint `target`'s share `r` (`grad_at`, its barriers' corrections
  // included) as the seed of `y`. Consumes `y`.
  template <typename GradAt>
  at::Tensor sub_segment_root(const Segment& s, NodeId target, bool output, const Region& tile,
                              const Region& r, at::Tensor& y, const at::Tensor& grad_out,
                              StoredActivation* stored_grad_out, GradAt& grad_at) {
    if (output) return output_root(s, tile, y, grad_out, stored_grad_out);
    at::Tensor root;
    if (y.requires_grad()) {
      root = Seeded::apply(y, grad_at(target, r, y.detach().to(tensor_options_.dtype())));
    }
    y.reset();
    return root;
  }

  // The backward of a segment run as sub-segments: the output's tiles (gradients into the
  // inner checkpoints, the segment's input and the parameters; the barriers' sums through
  // hooks), then each inner checkpoint latest first: its barriers' corrections added to its
  // gradient, and its sub-segment's tiles. Each op is recomputed once. Resident inner
  // checkpoints take their corrections whole; offloaded ones accumulate their gradients in the
  // store's blocks and add the corrections to each share as their sub-segment reads it.
  // Returns the input's gradient, accumulated whole; an offloaded input's goes to the store
  // block by block, each after the last addition of each pass into it, and nothing is
  // returned.
  at::Tensor inner_backward(int index, const at::Tensor& grad_out) {
    const Segment& s = plan_.segments[static_cast<size_t>(index)];
    const Shape& in_shape = shape(s.input);
    const bool want_input_grad = wants_input_grad(s);
    at::Tensor grad_in;  // from the first addition (add_into)
    StoredActivation* stored_grad_out = stored_grads_[static_cast<size_t>(s.output)].get();
    if (!s.keeps_inner()) inner_forward(index, /*with_statistics=*/false);
    const std::vector<NodeId> inner = inner_nodes(s);
    if (inner_offloaded(s)) {
      for (size_t k = 0; k < inner.size(); ++k) {
        inner_.at(inner[k]).stored_grad = std::make_unique<StoredActivation>(
            *store_, shape(inner[k]), s.as<SubSegments>()->grad_blocks.at(k), s.inner_tier(),
            tensor_options_);
      }
    }
    // An offloaded input's gradient goes to the store block by block, each after the last
    // addition of each pass that adds into it (Segment::input_grad_blocks).
    StoredActivation* stored_grad_in = nullptr;
    if (want_input_grad && stored_[static_cast<size_t>(s.input)]) {
      const Segment& producer = plan_.segments[static_cast<size_t>(index) - 1];
      auto& g = stored_grads_[static_cast<size_t>(s.input)];
      g = std::make_unique<StoredActivation>(*store_, in_shape, s.input_grad_blocks, producer.tier,
                                             tensor_options_);
      stored_grad_in = g.get();
    }
    auto add_input_grad = [&](const Region& r, const at::Tensor& g) {
      if (stored_grad_in != nullptr) {
        stored_grad_in->accumulate(r, g);
      } else {
        add_into(grad_in, in_shape, r, g);
      }
    };
    // A resident inner checkpoint's gradient exists from the first tile that adds into it
    // until its sub-segment has run (the planner's inner_backward_bytes counts the same).
    auto add_grad = [&](NodeId l, const Region& r, const at::Tensor& g) {
      Inner& in = inner_.at(l);
      if (in.stored_grad) {
        in.stored_grad->accumulate(r, g);
      } else {
        add_into(in.grad, shape(l), r, g);
      }
    };
    // The gradient at inner checkpoint `v`'s share `r`, its barriers' corrections included;
    // `x`: v's value there, as the sub-segment recomputed it (not read back from the store:
    // one read of every offloaded inner checkpoint less).
    auto grad_at = [&](NodeId v, const Region& r, const at::Tensor& x) -> at::Tensor {
      Inner& in = inner_.at(v);
      if (!in.stored_grad) {
        if (!in.grad.defined()) in.grad = zeros(shape(v));
        return crop({in.grad, whole(shape(v))}, r);
      }
      at::Tensor g = in.stored_grad->read(r);
      for (NodeId b : readers(s, v)) {
        g.add_(barrier_states_[static_cast<size_t>(b)]->correction_gradient(x));
      }
      return g;
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
      std::vector<TileStore::BlockId> reads, pass_reads;
      std::map<StoredActivation*, std::vector<Region>> adds;
    };
    // `before`: the sub-pass that runs first, not yet run (its additions store the blocks they
    // touch, which this one then reads back).
    auto sub_pass = [&](NodeId target, bool output, const SubPass* before) {
      SubPass p{target, output, {}, {}, {}, {}};
      auto& tiles = p.tiles;
      auto& reads = p.reads;
      auto& pass_reads = p.pass_reads;
      auto& adds = p.adds;
      std::map<const StoredActivation*, std::vector<char>> listed, stored;
      if (before != nullptr) {
        for (const auto& [g, regions] : before->adds) stored[g] = g->stored_after(regions);
      }
      auto reopens = [&](const StoredActivation* g, const Region& r) {
        const auto it = stored.find(g);
        const auto ids = g->reopen_reads(r, listed[g], it == stored.end() ? nullptr : &it->second);
        pass_reads.insert(pass_reads.end(), ids.begin(), ids.end());
      };
      for (int64_t t = s.backward.tiles() - 1; t >= 0; --t) {
        const Region tile = s.backward.tile(t);
        const Region r = output ? tile : barrier_share(tile, shape(s.output), shape(target));
        if (r.empty()) continue;
        tiles.emplace_back(t, r, sub_needs(s, target, r, tile));
        if (store_ == nullptr) continue;
        const std::vector<Region>& need = std::get<2>(tiles.back());
        auto ids = tile_reads(s, target, need);
        if (const StoredActivation* g =
                output ? stored_grad_out : inner_.at(target).stored_grad.get()) {
          const auto more = g->reads(r);
          ids.insert(ids.end(), more.begin(), more.end());
        }
        reads.insert(reads.end(), ids.begin(), ids.end());
        pass_reads.insert(pass_reads.end(), ids.begin(), ids.end());
        // The pass adds into the input's gradient, then into the leaves' (leaf_tiles' order).
        if (stored_grad_in != nullptr && !need[static_cast<size_t>(s.input)].empty()) {
          adds[stored_grad_in].push_back(need[static_cast<size_t>(s.input)]);
          reopens(stored_grad_in, need[static_cast<size_t>(s.input)]);
        }
        for (NodeId l : inner) {
          if (l >= target || need[static_cast<size_t>(l)].empty()) continue;
          if (StoredActivation* g = inner_.at(l).stored_grad.get()) {
            adds[g].push_back(need[static_cast<size_t>(l)]);
            reopens(g, need[static_cast<size_t>(l)]);
          }
        }
      }
      return p;
    };
    // Its reads, in the order it makes them: each round's, then the pass's.
    auto schedule = [&](const SubPass& p) {
      const size_t rounds = interior(s, p.target).size();
      for (size_t k = 0; k < rounds && !p.reads.empty(); ++k) store_->schedule(p.reads);
      if (!p.pass_reads.empty()) store_->schedule(p.pass_reads);
    };
    auto run = [&](const SubPass& p) {
      const NodeId target = p.target;
      const bool output = p.output;
      const auto& tiles = p.tiles;
      const auto& adds = p.adds;
      const PassLog log(*this, index, "backward to " + graph_.node(target).name);
      // Rounds of sums for the barriers this sub-segment recomputes the inputs of (dropped inner
      // checkpoints), latest first: each recomputes the tiles and takes the gradient back to
      // its barrier's output, the later ones' corrections added (their sums are done).
      const std::vector<NodeId>& mine = interior(s, target);
      for (auto b = mine.rbegin(); b != mine.rend(); ++b) {
        BarrierState& state = *barrier_states_[static_cast<size_t>(*b)];
        for (const auto& [t, r, need] : tiles) {
          const Region tile = s.backward.tile(t);
          const Region& in_region = need[static_cast<size_t>(s.input)];
          // The input requires a gradient so that the barrier's output does (as sums_passes).
          at::Tensor x = read_input(s, in_region).tensor.detach().requires_grad_(true);
          const auto given = leaf_tiles(s, need, target, true);
          at::AutoGradMode grad_mode(true);
          std::map<NodeId, TileTensor> acts;
          at::Tensor y = run_tile(s.input, target, need, {x, in_region}, &acts, &given, false);
          at::Tensor root =
              sub_segment_root(s, target, output, tile, r, y, grad_out, stored_grad_out, grad_at);
          root = add_corrections(s, tile, root, acts, &mine);
          // Only the barrier's output and input are held on (the rest is autograd's to free).
          const TileTensor out = acts[*b];
          const at::Tensor x_b = out.tensor.defined() && !out.region.empty()
                                     ? crop(acts[graph_.node(*b).inputs[0]], out.region).detach()
                                     : at::Tensor();
          acts.clear();
          if (!root.defined() || !root.requires_grad() || !out.tensor.defined() ||
              !out.tensor.requires_grad() || out.region.empty()) {
            continue;
          }
          const auto g = torch::autograd::grad({root}, {out.tensor}, {}, /*retain_graph=*/false,
                                               /*create_graph=*/false, /*allow_unused=*/true);
          if (g[0].defined()) state.add_output_grad(x_b, g[0]);
        }
        state.finish_sums();
      }
      for (const auto& [g, regions] : adds) g->expect_additions(regions);
      for (const auto& [t, r, need] : tiles) {
        const Region tile = s.backward.tile(t);
        if (output) emit(index, s.backward, t, TileEvent::kBackward, false);
        const Region& in_region = need[static_cast<size_t>(s.input)];
        at::Tensor x = read_input(s, in_region).tensor.detach();
        if (want_input_grad) x.requires_grad_(true);
        const auto given = leaf_tiles(s, need, target, true);
        {
          at::AutoGradMode grad_mode(true);
          std::map<NodeId, TileTensor> acts;
          at::Tensor y = run_tile(s.input, target, need, {x, in_region},
                                  mine.empty() ? nullptr : &acts, &given, true);
          at::Tensor root =
              sub_segment_root(s, target, output, tile, r, y, grad_out, stored_grad_out, grad_at);
          if (!mine.empty()) root = add_corrections(s, tile, root, acts, &mine);
          acts.clear();  // the corrections hold what they need; a barrier's output is not
          if (root.defined() && root.requires_grad()) root.backward();
        }
        if (want_input_grad && x.grad().defined() && !in_region.empty()) {
          add_input_grad(in_region, x.grad());
        }
        for (const auto& [l, leaf] : given) {
          if (leaf.tensor.grad().defined()) add_grad(l, leaf.region, leaf.tensor.grad());
        }
        if (output) {
          ++backward_tiles;
          emit(index, s.backward, t, TileEvent::kBackward, true);
        }
      }
    };
    // The output's sub-segment, then each inner checkpoint's, latest first. Each one's reads
    // are scheduled before the one before it runs, so the store reads its first blocks while
    // that one's last tiles run (and keeps a block read again within its window): an empty
    // schedule at each sub-segment's start cost resnet50 4096² ~5 s of waiting a step
    // (bench/NOTES.md, session 36).
    SubPass next = sub_pass(s.output, true, nullptr);
    if (store_ != nullptr) schedule(next);
    auto run_next = [&](size_t k) {
      const SubPass current = std::move(next);
      if (k < inner.size()) {
        next = sub_pass(inner[inner.size() - 1 - k], false, &current);
        if (store_ != nullptr) schedule(next);
      }
      run(current);
    };
    run_next(0);
    for (auto it = inner.rbegin(); it != inner.rend(); ++it) {
      const NodeId v = *it;
      Inner& in = inner_.at(v);
      for (NodeId b : readers(s, v)) barrier_states_[static_cast<size_t>(b)]->finish_sums();
      if (in.stored_grad) {
        in.stored_grad->finish_additions();
      } else {
        if (!in.grad.defined()) in.grad = zeros(shape(v));
        for (NodeId b : readers(s, v)) {
          const BarrierState& state = *barrier_states_[static_cast<size_t>(b)];
          // In slices of rows: the correction's gradient is elementwise, and a whole one would
          // be one more activation-sized tensor at this pass's fullest.
          const int64_t rows = std::max<int64_t>(1, (shape(v).height + 15) / 16);
          const auto grads = in.grad.split(rows, 2);
          const auto values = in.value.split(rows, 2);
          for (size_t k = 0; k < grads.size(); ++k) {
            grads[k].add_(state.correction_gradient(values[k]));
          }
        }
        // Its sub-segment reads the inner checkpoints before it, not this one.
        in.value.reset();
      }
      run_next(static_cast<size_t>(it - inner.rbegin()) + 1);
      inner_.erase(v);
    }
    // Barriers on the segment's input: their corrections go straight to its gradient, over
    // the shares (one pass for all of them).
    const std::vector<NodeId> on_input = readers(s, s.input);
    for (NodeId b : on_input) barrier_states_[static_cast<size_t>(b)]->finish_sums();
    if (want_input_grad && !on_input.empty()) {
      std::vector<Region> shares;
      for (int64_t t = 0; t < s.backward.tiles(); ++t) {
        const Region r = barrier_share(s.backward.tile(t), shape(s.output), in_shape);
        if (!r.empty()) shares.push_back(r);
      }
      if (stored_grad_in != nullptr) {
        stored_grad_in->expect_additions(shares);
        std::vector<TileStore::BlockId> reads;
        for (const Region& r : shares) {
          const auto ids = stored_[static_cast<size_t>(s.input)]->reads(r);
          reads.insert(reads.end(), ids.begin(), ids.end());
        }
        store_->schedule(reads);
      }
      for (const Region& r : shares) {
        const at::Tensor x = read_input(s, r).tensor;
        at::Tensor g = barrier_states_[static_cast<size_t>(on_input[0])]->correction_gradient(x);
        for (size_t k = 1; k < on_input.size(); ++k) {
          g.add_(barrier_states_[static_cast<size_t>(on_input[k])]->correction_gradient(x));
        }
        add_input_grad(r, g);
      }
    }
    if (stored_grad_in != nullptr) {
      stored_grad_in->finish_additions();
      return {};
    }
    if (want_input_grad && !grad_in.defined()) grad_in = zeros(in_shape);
    return grad_in;
  }

  void forward_segment(int index) {
    const Segment& s = plan_.segments[static_cast<size_t>(index)];
    const Shape& out_shape = shape(s.output);
    const Node& reduction = graph_.node(s.reduction >= 0 ? s.reduction : 0);
    const bool is_max = s.reduction >= 0 && reduction.kind == OpKind::kGlobalMaxPool;
    const bool is_attention = s.reduction >= 0 && reduction.kind == OpKind::kAttentionPool;
    at::Tensor out, best_value, best_index;
    const at::TensorOptions& options = tensor_options_;
    StoredActivation* stored_out = nullptr;
    // A one-tile segment that keeps its graph: the tile's output is the checkpoint (no copy).
    const bool output_is_tile = training_ && s.keeps_graph() && s.forward.tiles() == 1;
    if (offloaded(index)) {
      stored_[static_cast<size_t>(s.output)] = std::make_unique<StoredActivation>(
          *store_, out_shape, s.blocks, s.tier, options, s.resident_blocks);
      stored_out = stored_[static_cast<size_t>(s.output)].get();
    } else if (s.reduction < 0 && !output_is_tile) {
      out = at::empty({1, out_shape.channels, out_shape.height, out_shape.width}, options);
    } else if (is_attention) {
      attention_ = std::make_unique<AttentionStream>(reduction, options);
    } else if (is_max) {
      best_value =
          at::full({1, out_shape.channels}, -std::numeric_limits<double>::infinity(), options);
      best_index = at::full({1, out_shape.channels}, std::numeric_limits<int64_t>::max(),
                            options.dtype(at::kLong));
    } else {
      out = at::zeros({1, out_shape.channels}, options);
    }
    // The forward of a one-tile segment with barriers updates batch norm's running statistics
    // (once: the backward's recompute leaves them).
    update_running_ = training_ && s.is<WholeBarriers>();
    const bool inner = inner_mode(s);
    if (inner) {
      inner_forward(index, /*with_statistics=*/true);
    } else {
      statistic_passes(index);
    }
    // The tiles' dtype: the step's, or under bf16 autocast that of the segment's last op.
    at::ScalarType tile_dtype = options.dtype().toScalarType();
    std::vector<Region> schedule;
    auto tile_needs = [&](const Region& tile) {
      return inner ? sub_needs(s, s.output, tile, tile) : needs(s, tile);
    };
    if (s.input == 0) {
      for (int64_t t = 0; t < s.forward.tiles(); ++t) {
        schedule.push_back(tile_needs(s.forward.tile(t))[0]);
      }
      source_.will_read(schedule);
    }
    // (A segment with inner checkpoints: inner_forward scheduled its output tiles' reads.)
    const auto& stored_in = stored_[static_cast<size_t>(s.input)];
    if (!inner && stored_in && s.input != 0) {
      for (int64_t t = prescheduled_forward_ == index ? 1 : 0; t < s.forward.tiles(); ++t) {
        store_->schedule(
            stored_in->reads(needs(s, s.forward.tile(t))[static_cast<size_t>(s.input)]));
      }
    }
    // A segment the plan keeps runs every tile with autograd and keeps its graph for the
    // backward (core/plan/plan.h). Otherwise the last segment's last tile does when the backward
    // uses the same tiles: backward starts with it, so it is not recomputed (for a one-tile
    // plan, no recompute at all). Its graph is no larger than that tile's backward.
    const bool same_tiles =
        s.forward.y_edges == s.backward.y_edges && s.forward.x_edges == s.backward.x_edges;
    const bool has_barriers = !barriers(s).empty();
    const bool shared_graphs = training_ && s.is<SharedRows>() && s.keeps_graph();
    const bool last = index + 1 == static_cast<int>(plan_.segments.size());
    const bool keep_last = training_ && last && same_tiles && !has_barriers && !s.is<SharedRows>();
    // Shared rows: what each row keeps for the next, by row and node; kept to the backward.
    auto& shared = shared_kept_[static_cast<size_t>(index)];
    shared.assign(s.is<SharedRows>() ? static_cast<size_t>(s.forward.tiles()) : 0, {});
    shared_ids_[static_cast<size_t>(index)].clear();
    auto& kept = kept_[static_cast<size_t>(index)];
    kept.assign(static_cast<size_t>(s.forward.tiles()), {});
    for (int64_t t = 0; t < s.forward.tiles(); ++t) {
      if (t + 1 == s.forward.tiles() && stored_out != nullptr) {
        preschedule(index + 1, /*backward=*/false);
      }
      emit(index, s.forward, t, TileEvent::kForward, false);
      const Region tile = s.forward.tile(t);
      const std::vector<Region> need = inner ? sub_needs(s, s.output, tile, tile) : needs(s, tile);
      const Region& in_region = need[static_cast<size_t>(s.input)];
      at::Tensor y;
      if (shared_graphs) {
        // Rows chained through their kept rows (views, with autograd): the segment's graph,
        // row by row, for one backward over all of them (shared_kept_backward).
        at::AutoGradMode grad_mode(true);
        const SharedRow& row = shared_row_of(s, tile.y);
        static const std::vector<at::Tensor> none;
        const auto before = t > 0 ? &shared[static_cast<size_t>(t) - 1] : &none;
        KeptTile& k = kept[static_cast<size_t>(t)];
        k.input = read_input(s, in_region).tensor.detach();
        if (wants_input_grad(s)) k.input.requires_grad_(true);
        k.output =
            run_shared_row(s, row, {k.input, in_region}, *before, &shared[static_cast<size_t>(t)]);
        y = k.output.detach();
        if (t > 0) shared[static_cast<size_t>(t) - 1].clear();  // the graph holds them
      } else if (s.is<SharedRows>() && training_ && last && !shared_stored(s) &&
                 t + 1 == s.forward.tiles()) {
        // The last row of the last segment keeps its graph: the backward starts with it. Its
        // inherited rows are leaves, as in the backward's recompute.
        at::AutoGradMode grad_mode(true);
        const SharedRow& row = shared_row_of(s, tile.y);
        last_leaves_.clear();
        if (t > 0) {
          for (const at::Tensor& k : shared[static_cast<size_t>(t) - 1]) {
            last_leaves_.push_back(k.defined() ? k.detach().requires_grad_(true) : at::Tensor());
          }
        }
        KeptTile& k = kept[static_cast<size_t>(t)];
        k.input = read_input(s, in_region).tensor.detach();
        if (wants_input_grad(s)) k.input.requires_grad_(true);
        k.output = run_shared_row(s, row, {k.input, in_region}, last_leaves_, nullptr);
        y = k.output.detach();
      } else if (s.is<SharedRows>()) {
        const SharedRow& row = shared_row_of(s, tile.y);
        static const std::vector<at::Tensor> none;
        const auto before = t > 0 ? &shared[static_cast<size_t>(t) - 1] : &none;
        y = run_shared_row(s, row, read_input(s, in_region), *before,
                           &shared[static_cast<size_t>(t)]);
        if (training_ && shared_stored(s) && t + 1 < s.forward.tiles()) {
          // Each node's kept rows a block (any shape and dtype), -1 where it keeps none.
          std::vector<TileStore::BlockId> ids;
          for (const at::Tensor& k : shared[static_cast<size_t>(t)]) {
            ids.push_back(k.defined() ? store_->put(k, s.shared_tier()) : -1);
          }
          shared_ids_[static_cast<size_t>(index)].push_back(std::move(ids));
        }
        // Inference has no backward to keep them for; stored ones are in the store.
        if ((!training_ || shared_stored(s)) && t > 0) shared[static_cast<size_t>(t) - 1].clear();
      } else if (inner) {
        const TileTensor x = read_input(s, in_region);
        const auto given = leaf_tiles(s, need, s.output, false);
        y = run_tile(s.input, s.output, need, x, nullptr, &given, false);
      } else if ((training_ && s.keeps_graph()) || (keep_last && t + 1 == s.forward.tiles())) {
        at::AutoGradMode grad_mode(true);
        KeptTile& k = kept[static_cast<size_t>(t)];
        k.input = read_input(s, in_region).tensor.detach();
        if (wants_input_grad(s)) k.input.requires_grad_(true);
        k.output = run_tile(s, need, {k.input, in_region});
        y = k.output.detach();
      } else {
        y = run_tile(s, need, read_input(s, in_region));
      }
      tile_dtype = y.scalar_type();
      if (stored_out != nullptr) {
        stored_out->write(tile, y);
      } else if (s.reduction < 0 && output_is_tile) {
        out = y;
      } else if (s.reduction < 0) {
        copy_tile(crop({out, whole(out_shape)}, tile), y);
      } else if (is_attention) {
        attention_->add(y);
      } else if (!is_max) {
        out += y.sum({2, 3});
      } else {
        // Streaming global max: the first maximum in row-major order of the whole activation,
        // as plain LibTorch. Within a tile row-major order agrees with the global one.
        const auto [value, local] = y.flatten(2).max(2);
        const int64_t w = tile.x.size();
        const at::Tensor global = (at::div(local, w, "floor") + tile.y.begin) * out_shape.width +
                                  at::remainder(local, w) + tile.x.begin;
        const at::Tensor better =
            (value > best_value).logical_or((value == best_value).logical_and(global < best_index));
        best_value = at::where(better, value, best_value);
        best_index = at::where(better, global, best_index);
      }
      ++forward_tiles;
      emit(index, s.forward, t, TileEvent::kForward, true);
    }
    update_running_ = false;
    if (shared_stored(s)) {
      for (auto& kept : shared) kept.clear();  // in the store
    }
    if (!(training_ && s.keeps_inner())) {
      for (NodeId v : inner_nodes(s)) inner_.erase(v);
    }
    if (stored_out != nullptr) {
      // Kept in the store.
    } else if (s.reduction < 0) {
      checkpoints_[static_cast<size_t>(s.output)] = out;
    } else if (is_attention) {
      reduced_ = attention_->pooled(tile_dtype);
    } else if (is_max) {
      reduced_ = best_value.to(tile_dtype);  // exact: the maxima are tile values
      reduced_index_ = best_index;
    } else {
      // Summed in the step's dtype; rounded to the tiles' as plain's mean of them is (bf16).
      reduced_ = (out / static_cast<double>(out_shape.height * out_shape.width)).to(tile_dtype);
    }
  }

  at::Tensor backward_segment(int index, const at::Tensor& grad_out) {
    const Segment& s = plan_.segments[static_cast<size_t>(index)];
    // Before anything below allocates the input's gradient: sub-segments allocate their own.
    if (inner_mode(s)) return inner_backward(index, grad_out);
    if (s.is<SharedRows>() && s.keeps_graph()) return shared_kept_backward(index, grad_out);
    const Shape& in_shape = shape(s.input);
    const bool want_input_grad = wants_input_grad(s);
    at::Tensor grad_in;
    StoredActivation* stored_in = stored_[static_cast<size_t>(s.input)].get();
    StoredActivation* stored_grad_out = stored_grads_[static_cast<size_t>(s.output)].get();
    StoredActivation* stored_grad_in = nullptr;
    if (want_input_grad && stored_in != nullptr) {
      // The input's gradient goes to the store block by block, each after its last addition;
      // the blocks follow this segment's backward tiles (core/plan/plan.h).
      const Segment& producer = plan_.segments[static_cast<size_t>(index) - 1];
      stored_grads_[static_cast<size_t>(s.input)] = std::make_unique<StoredActivation>(
          *store_, in_shape, s.input_grad_blocks, producer.tier, tensor_options_);
      stored_grad_in = stored_grads_[static_cast<size_t>(s.input)].get();
      std::vector<Region> additions;
      for (int64_t t = s.backward.tiles() - 1; t >= 0; --t) {
        additions.push_back(needs(s, s.backward.tile(t))[static_cast<size_t>(s.input)]);
      }
      stored_grad_in->expect_additions(additions);
    }
    const bool has_barriers = !barriers(s).empty();
    if (has_barriers) sums_passes(index, grad_out);
    // The store's reads in the order the tiles below make them: the input tile (unless the
    // tile kept its graph from the forward, or the previous segment already scheduled it), then
    // the output gradient's tile.
    auto& kept = kept_[static_cast<size_t>(index)];
    auto is_kept = [&](int64_t t) {
      return t < static_cast<int64_t>(kept.size()) && kept[static_cast<size_t>(t)].output.defined();
    };
    if (store_ != nullptr) {
      for (int64_t t = s.backward.tiles() - 1; t >= 0; --t) {
        const Region tile = s.backward.tile(t);
        const bool prescheduled =
            prescheduled_backward_ == index && t == s.backward.tiles() - 1 && !has_barriers;
        if (stored_in != nullptr && !is_kept(t) && !prescheduled) {
          store_->schedule(stored_in->reads(needs(s, tile)[static_cast<size_t>(s.input)]));
        }
        if (shared_stored(s) && t > 0) {
          std::vector<TileStore::BlockId> ids;
          for (TileStore::BlockId id :
               shared_ids_[static_cast<size_t>(index)].at(static_cast<size_t>(t) - 1)) {
            if (id >= 0) ids.push_back(id);
          }
          store_->schedule(ids);
        }
        if (stored_grad_out != nullptr) store_->schedule(stored_grad_out->reads(tile));
      }
    }
    // Shared rows, bottom to top: the gradient each row hands back to the rows it inherited,
    // by node; the previous row adds it to its kept rows.
    auto& shared = shared_kept_[static_cast<size_t>(index)];
    std::vector<at::Tensor> handed_back;
    // Tiles in reverse order: kept tiles (forward_segment) give their graphs back.
    for (int64_t t = s.backward.tiles() - 1; t >= 0; --t) {
      if (t == 0 && store_ != nullptr) preschedule(index - 1, /*backward=*/true);
      emit(index, s.backward, t, TileEvent::kBackward, false);
      const Region tile = s.backward.tile(t);
      const std::vector<Region> need = needs(s, tile);
      const Region& in_region = need[static_cast<size_t>(s.input)];
      at::Tensor x, y;
      if (is_kept(t)) {
        KeptTile& k = kept[static_cast<size_t>(t)];
        x = std::move(k.input);
        y = std::move(k.output);
        k = {};
      } else {
        x = read_input(s, in_region).tensor.detach();
        if (want_input_grad) x.requires_grad_(true);
      }
      {
        at::AutoGradMode grad_mode(true);
        std::map<NodeId, TileTensor> acts;
        std::vector<at::Tensor> inherited, kept_views;
        if (s.is<SharedRows>() && y.defined()) {
          // The forward's last row, graph kept: it keeps no rows for a next one.
          inherited = std::move(last_leaves_);
          last_leaves_.clear();
        } else if (s.is<SharedRows>()) {
          // The rows the previous row kept (the forward's copies), as leaves whose gradient
          // goes back to it.
          if (t > 0 && shared_stored(s)) {
            auto& kept = shared.at(static_cast<size_t>(t) - 1);
            const auto& ids =
                shared_ids_[static_cast<size_t>(index)].at(static_cast<size_t>(t) - 1);
            kept.assign(ids.size(), at::Tensor());
            for (size_t v = 0; v < ids.size(); ++v) {
              if (ids[v] < 0) continue;
              kept[v] = store_->get(ids[v]);
              store_->erase(ids[v]);
            }
          }
          if (t > 0) {
            for (const at::Tensor& k : shared.at(static_cast<size_t>(t) - 1)) {
              inherited.push_back(k.defined() ? k.detach().requires_grad_(true) : at::Tensor());
            }
          }
          const SharedRow& row = shared_row_of(s, tile.y);
          y = run_shared_row(s, row, {x, in_region}, inherited, &kept_views, &handed_back);
        } else if (!y.defined()) {
          y = run_tile(s.input, s.output, need, {x, in_region}, has_barriers ? &acts : nullptr);
        }
        at::Tensor root = output_root(s, tile, y, grad_out, stored_grad_out);
        if (has_barriers) root = add_corrections(s, tile, root, acts);
        acts.clear();
        // The next row's gradient of the rows this one kept for it.
        for (size_t v = 0; v < handed_back.size() && v < kept_views.size(); ++v) {
          const at::Tensor& g = handed_back[v];
          if (!g.defined() || !kept_views[v].defined() || !kept_views[v].requires_grad()) continue;
          const at::Tensor seed = Seeded::apply(kept_views[v], g);
          root = root.defined() ? root + seed : seed;
        }
        kept_views.clear();
        handed_back.clear();
        if (root.defined() && root.requires_grad()) root.backward();
        for (const at::Tensor& leaf : inherited) {
          handed_back.push_back(leaf.defined() ? leaf.grad() : at::Tensor());
        }
        if (s.is<SharedRows>() && t > 0) shared[static_cast<size_t>(t) - 1].clear();
      }
      if (want_input_grad && x.grad().defined() && !in_region.empty()) {
        if (stored_grad_in != nullptr) {
          stored_grad_in->accumulate(in_region, x.grad());
        } else {
          add_into(grad_in, in_shape, in_region, x.grad());
        }
      }
      ++backward_tiles;
      emit(index, s.backward, t, TileEvent::kBackward, true);
    }
    if (stored_grad_in != nullptr) stored_grad_in->finish_additions();
    if (want_input_grad && stored_grad_in == nullptr && !grad_in.defined()) {
      grad_in = zeros(in_shape);
    }
    return grad_in;
  }

  // The backward of shared rows that kept their graphs (forward_segment): the rows' graphs are
  // chained through their kept rows, so one backward runs over all of them, from every row's
  // output gradient at once (each row's kept rows get their gradient from the row below
  // within it). Only resident checkpoints (the planner keeps no graph by the store).
  at::Tensor shared_kept_backward(int index, const at::Tensor& grad_out) {
    const Segment& s = plan_.segments[static_cast<size_t>(index)];
    const Shape& in_shape = shape(s.input);
    auto& kept = kept_[static_cast<size_t>(index)];
    auto& shared = shared_kept_[static_cast<size_t>(index)];
    at::Tensor root;
    for (int64_t t = s.backward.tiles() - 1; t >= 0; --t) {
      emit(index, s.backward, t, TileEvent::kBackward, false);
      at::Tensor y = std::move(kept.at(static_cast<size_t>(t)).output);
      at::Tensor r = output_root(s, s.backward.tile(t), y, grad_out, nullptr);
      if (r.defined() && r.requires_grad()) root = root.defined() ? root + r : r;
    }
    shared.clear();
    if (root.defined()) {
      at::AutoGradMode grad_mode(true);
      root.backward();
    }
    at::Tensor grad_in;
    for (int64_t t = s.backward.tiles() - 1; t >= 0; --t) {
      KeptTile& k = kept.at(static_cast<size_t>(t));
      const Region in_region = needs(s, s.backward.tile(t))[static_cast<size_t>(s.input)];
      if (wants_input_grad(s) && k.input.defined() && k.input.grad().defined() &&
          !in_region.empty()) {
        add_into(grad_in, in_shape, in_region, k.input.grad());
      }
      k = {};
      ++backward_tiles;
      emit(index, s.backward, t, TileEvent::kBackward, true);
    }
    if (wants_input_grad(s) && !grad_in.defined()) grad_in = zeros(in_shape);
    return grad_in;
  }

  // Cross-segment prefetch: while a segment runs its last tile, the store already reads what
  // the next segment's first tile reads from an offloaded checkpoint (those the last tile is
  // still to write included: the store keeps them when they come), so the next segment does
  // not start by waiting. That segment then leaves those reads out of
  // its own schedule, which keeps the schedule in the order the reads happen.
  void preschedule(int next, bool backward) {
    if (next < 0 || next >= static_cast<int>(plan_.segments.size())) return;
    const Segment& n = plan_.segments[static_cast<size_t>(next)];
    const auto& stored = stored_[static_cast<size_t>(n.input)];
    // A segment with barriers starts with other reads (its statistic or sums passes).
    if (!stored || !barriers(n).empty()) return;
    const Partition& part = backward ? n.backward : n.forward;
    const int64_t first = backward ? part.tiles() - 1 : 0;
    if (backward && n.keeps_graph()) return;
    store_->schedule(stored->reads(needs(n, part.tile(first))[static_cast<size_t>(n.input)]));
    (backward ? prescheduled_backward_ : prescheduled_forward_) = next;
  }

  int prescheduled_forward_ = -1, prescheduled_backward_ = -1;
  bool training_;
  bool update_running_ = false;  // barriers run whole update batch norm's running statistics
  Graph& graph_;
  const Plan& plan_;
  TileSource& source_;
  const Segment* halo_segment_ = nullptr;  // Fault::kHalo's segment and window
  std::optional<Region> halo_region_;
  const StepOptions& options_;
  at::TensorOptions tensor_options_;     // the dtype and device the step computes in
  TileFormats formats_;                  // the tiles' memory formats in each pass
  std::unique_ptr<TileStore> store_;     // when the plan offloads; outlives what it stores
  std::vector<at::Tensor> checkpoints_;  // whole activations, by node
  // Offloaded checkpoints and their gradients, by node.
  std::vector<std::unique_ptr<StoredActivation>> stored_, stored_grads_;
  // Barriers' statistics and gradient sums over this step, by node (core/exec/barrier.h).
  std::vector<std::unique_ptr<BarrierState>> barrier_states_;
  // Inner checkpoints of segments running as sub-segments and their gradients, by node: whole
  // tensors, or blocks in the tile store (SubSegments::tier).
  struct Inner {
    at::Tensor value, grad;
    std::unique_ptr<StoredActivation> stored_value, stored_grad;
  };
  std::map<NodeId, Inner> inner_;
  at::Tensor reduced_, reduced_index_;          // streaming reduction result (and argmax for max)
  std::unique_ptr<AttentionStream> attention_;  // a streaming attention pool's sums
  // Forward tiles that keep their autograd graph for the backward, by segment and tile.
  struct KeptTile {
    at::Tensor input, output;
  };
  std::vector<std::vector<KeptTile>> kept_;
  // Shared rows (SharedRows): what each forward row kept for the next, by segment,
  // row and node, until the segment's backward has used them.
  std::vector<std::vector<std::vector<at::Tensor>>> shared_kept_;
  // Their blocks in the tile store (SharedRows::kept_tier), by segment, row and node.
  std::vector<std::vector<std::vector<TileStore::BlockId>>> shared_ids_;
  // Their rows' geometry, by segment and rows (shared_row_of).
  mutable std::vector<std::map<std::pair<int64_t, int64_t>, SharedRow>> shared_rows_;
  std::vector<at::Tensor> last_leaves_;      // the inherited rows of a kept last shared row
  std::vector<std::vector<NodeId>> leaves_;  // by segment input: leaves()
  // By segment input: the barriers whose inputs (dropped inner checkpoints) each sub-segment
  // recomputes, by the node it computes (the output or a kept inner checkpoint), in order.
  std::vector<std::map<NodeId, std::vector<NodeId>>> interior_;
};

// Runs the nodes after `first` on whole activations with `value` as node `first`'s output (the
// plain reference from the image, or the head from the last checkpoint), freeing each
// activation after its last consumer as an ordinary PyTorch forward does. Returns the output.
// `training`: batch norm uses its batch statistics (and updates the running ones).
at::Tensor run_from(Graph& graph, NodeId first, const at::Tensor& value, bool training) {
  std::vector<at::Tensor> values(static_cast<size_t>(graph.size()));
  std::vector<size_t> uses(static_cast<size_t>(graph.size()), 0);
  for (NodeId v = first; v < graph.size(); ++v) {
    uses[static_cast<size_t>(v)] = graph.consumers()[static_cast<size_t>(v)].size();
  }
  values[static_cast<size_t>(first)] = value;
  for (NodeId v = first + 1; v < graph.size(); ++v) {
    const Node& node = graph.node(v);
    std::vector<at::Tensor> ins;
    for (NodeId p : node.inputs) {
      if (p < first) {
        throw Error(node.name + ": the head reads " + graph.node(p).name +
                    ", which lies before the last checkpoint");
      }
      ins.push_back(values[static_cast<size_t>(p)]);
    }
    values[static_cast<size_t>(v)] = forward_plain(node, ins, training);
    for (NodeId p : node.inputs) {
      if (--uses[static_cast<size_t>(p)] == 0) values[static_cast<size_t>(p)] = at::Tensor();
    }
  }
  return values.back();
}

// One element of `t` (any strides) set to NaN.
void set_nan(at::Tensor t) {
  at::NoGradGuard no_grad;
  while (t.dim() > 0) t = t.select(0, 0);
  t.fill_(std::numeric_limits<double>::quiet_NaN());
}

// Fault::kNanGrad and kNanStat, after a tiled step's backward.
void inject_nan(Graph& graph, Fault fault) {
  if (fault == Fault::kNanGrad) {
    for (auto& p : graph.module().parameters()) {
      if (p.grad().defined() && p.grad().numel() > 0) return set_nan(p.grad());
    }
    throw Error("cannot inject nan-grad: the network has no parameter gradient");
  }
  if (fault == Fault::kNanStat) {
    for (auto& b : graph.module().named_buffers()) {
      if (b.key().find("running_") != std::string::npos && b.value().is_floating_point() &&
          b.value().numel() > 0) {
        return set_nan(b.value());
      }
    }
    throw Error(
        "cannot inject nan-stat: the network has no running statistics (batch norm in "
        "training mode has them: --norm batch)");
  }
}

at::Tensor read_whole(TileSource& source, const at::TensorOptions& options) {
  return to_compute(source.read({{0, source.height()}, {0, source.width()}}), options);
}

void check_plan(const Graph& graph, const Plan& plan, const TileSource& source) {
  if (plan.input.channels != source.channels() || plan.input.height != source.height() ||
      plan.input.width != source.width()) {
    throw Error("the plan was made for a " + to_string(plan.input) + " input, the image is " +
                std::to_string(source.channels()) + "×" + std::to_string(source.height()) + "×" +
                std::to_string(source.width()));
  }
  if (static_cast<int>(plan.shapes.size()) != graph.size()) {
    throw Error("the plan was made for another network (" + std::to_string(plan.shapes.size()) +
                " nodes, this one has " + std::to_string(graph.size()) + ")");
  }
}

}  // namespace

StepResult train_step(Graph& graph, const Plan& plan, TileSource& source, const at::Tensor& target,
                      const LossFn& loss_fn, const StepOptions& options) {
  check_plan(graph, plan, source);
  StepResult result;
  result.predicted = plan.predicted;
  const at::TensorOptions compute = compute_options(graph, source);
  const c10::Device device = compute.device();
  const MemoryReading at_start = memory_reading(device);
  reset_memory_peak(device);
  const PrecisionScope precision(device, options.precision);
  const DropoutScope dropout(options.dropout_seed);
  const auto t0 = Clock::now();

  if (plan.strategy == Strategy::kNone || plan.segments.empty()) {
    at::Tensor image = read_whole(source, compute);
    if (options.input_gradient) image = image.detach().requires_grad_(true);
    const at::Tensor logits = run_from(graph, 0, image, /*training=*/true);
    const at::Tensor loss = loss_fn(logits, target);
    result.forward_ms = ms_since(t0);
    const auto t1 = Clock::now();
    loss.backward();
    result.backward_ms = ms_since(t1);
    result.loss = loss.detach();
    result.logits = logits.detach();
    if (options.input_gradient) result.input_grad = image.grad();
  } else {
    TiledStep step(graph, plan, source, options, /*training=*/true);
    // Every parameter's gradient defined before the first tile's backward: AccumulateGrad would
    // otherwise adopt that tile's incoming gradient as .grad, and for a one-pixel tile a frozen
    // batch norm's bias gradient is a view of a buffer autograd later changes in place (found
    // by `tessel gradcheck --model resnet18 --tile 1`: 0.94 relative error). Plain autograd
    // defines a gradient for every parameter the step uses, so no value changes.
    for (auto& p : graph.module().parameters()) {
      if (p.requires_grad() && !p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    }
    const at::Tensor head_in = step.forward().detach().requires_grad_(true);
    result.offload_forward_wait_ms = step.store_stats().wait_ms;
    const at::Tensor logits = run_from(graph, plan.tail_input, head_in, /*training=*/true);
    const at::Tensor loss = loss_fn(logits, target);
    result.forward_ms = ms_since(t0);
    const auto t1 = Clock::now();
    loss.backward();
    at::Tensor grad = head_in.grad();
    if (!grad.defined()) grad = at::zeros_like(head_in);
    result.input_grad = step.backward(grad);
    if (!options.input_gradient) result.input_grad = at::Tensor();
    inject_nan(graph, options.inject);
    result.backward_ms = ms_since(t1);
    result.loss = loss.detach();
    result.logits = logits.detach();
    result.forward_tiles = step.forward_tiles;
    result.backward_tiles = step.backward_tiles;
    result.offload = step.store_stats();
  }
  const MemoryReading at_end = memory_reading(device);
  if (at_end.peak >= 0) result.measured_peak_bytes = at_end.peak - at_start.live;
  if (at_end.peak_reserved >= 0) {
    result.measured_peak_reserved_bytes = at_end.peak_reserved - at_start.reserved;
  }
  const MemoryBreakdown& p = plan.predicted;
  spdlog::debug(
      "step ({}): loss {:.6g}, {:.0f} ms forward + {:.0f} ms backward, {}/{} tiles; peak "
      "predicted {} (checkpoints + tile + head), measured {}",
      to_string(plan.strategy), result.loss.item<double>(), result.forward_ms, result.backward_ms,
      result.forward_tiles, result.backward_tiles,
      format_bytes(p.checkpoints + p.working_set + p.tail),
      result.measured_peak_bytes < 0 ? "n/a (no tracker)"
                                     : format_bytes(result.measured_peak_bytes));
  return result;
}

at::Tensor infer(Graph& graph, const Plan& plan, TileSource& source, const StepOptions& options) {
  check_plan(graph, plan, source);
  at::NoGradGuard no_grad;
  const at::TensorOptions compute = compute_options(graph, source);
  const PrecisionScope precision(compute.device(), options.precision);
  if (plan.strategy == Strategy::kNone || plan.segments.empty()) {
    return run_from(graph, 0, read_whole(source, compute), /*training=*/false);
  }
  TiledStep step(graph, plan, source, options, /*training=*/false);
  return run_from(graph, plan.tail_input, step.forward(), /*training=*/false);
}

}  // namespace tessel::core
