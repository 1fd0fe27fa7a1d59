// One tiled step, inside the executor (engine-internal; callers use core/exec/executor.h).
// `Step` holds what lives across segments (checkpoints, the tile store, barriers' statistics,
// the streaming head's sums) and runs the segments in order, forward then backward; each
// segment runs as its scheme says, through a `SchemeRun` (one file per scheme in
// exec/schemes/), made once per step for each segment and living until its backward is done.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "core/exec/attention.h"
#include "core/exec/barrier.h"
#include "core/exec/executor.h"
#include "core/exec/tile_ops.h"
#include "core/graph/graph.h"
#include "core/graph/node_vec.h"
#include "core/plan/glass.h"
#include "core/plan/plan.h"
#include "core/plan/split.h"
#include "core/store/stored_activation.h"
#include "core/store/tile_store.h"

namespace tessel::core {

class Step;

// Forward tiles that keep their autograd graph for the backward, by tile: each one's input tile
// (a leaf whose gradient is the segment input's there) and its output.
class KeptTiles {
 public:
  struct Tile {
    at::Tensor input;  // the leaf its gradient reaches; undefined when that is not wanted
    at::Tensor output;
  };
  void reset(int64_t tiles) { tiles_.assign(static_cast<size_t>(tiles), {}); }
  bool has(int64_t t) const {
    return t < static_cast<int64_t>(tiles_.size()) &&
           tiles_[static_cast<size_t>(t)].output.defined();
  }
  Tile& at(int64_t t) { return tiles_.at(static_cast<size_t>(t)); }
  // Tile `t` with autograd, its graph kept: its input tile read by `read` (with autograd on, as
  // the backward's recompute reads it), made a leaf (requiring a gradient when `grad`), and
  // `run` on it. Returns the output, detached. Without `grad` only the graph keeps the input.
  at::Tensor keep(int64_t t, bool grad, const std::function<TileTensor()>& read,
                  const std::function<at::Tensor(const TileTensor&)>& run);
  // Tile `t`'s input and output, let go here (undefined where the tile kept no graph).
  std::pair<at::Tensor, at::Tensor> take(int64_t t);

 private:
  std::vector<Tile> tiles_;
};

// How one segment's scheme runs it: its forward tiles (the step writes each tile's output
// where the segment's output goes) and its backward. Holds what the scheme keeps from the
// forward to the backward (kept graphs, shared rows' kept rows, inner checkpoints).
class SchemeRun {
 public:
  SchemeRun(Step& step, int index);
  virtual ~SchemeRun() = default;
  SchemeRun(const SchemeRun&) = delete;
  SchemeRun& operator=(const SchemeRun&) = delete;

  // What each node of the segment holds for output tile `tile` in the backward (and, unless
  // forward_needs says otherwise, the forward).
  virtual std::vector<Region> needs(const Region& tile) const;
  // Before the forward's tiles: the scheme's own passes (barriers' statistics, inner
  // checkpoints), then the reads of its tiles' inputs scheduled in the order they come.
  virtual void before_forward() {}
  virtual void schedule_forward();
  // Forward tile `t` (region `tile` of the output): its output.
  virtual at::Tensor forward_tile(int64_t t, const Region& tile) = 0;
  virtual void after_forward() {}
  // The segment's backward from its output's gradient (`grad_out`: whole, or in the store):
  // the parameters' gradients, and the input's (whole, or into the store; undefined then).
  virtual at::Tensor backward(const at::Tensor& grad_out) = 0;

 protected:
  virtual std::vector<Region> forward_needs(const Region& tile) const { return needs(tile); }
  void schedule_source();  // the image's tiles the forward reads, when it reads the image
  // The segment's input gradient, when the input lives in the store and its gradient is wanted:
  // blocks in the store, as the producer's tier (else nullptr).
  StoredActivation* stored_input_grad();
  // Adds `g` over `r` to the input's gradient: into the store's blocks, else into `grad_in`.
  void add_input_grad(StoredActivation* stored, at::Tensor& grad_in, const Region& r,
                      const at::Tensor& g);
  // The backward's result for the input: `grad_in`, zeros where nothing reached it, nothing
  // when it went to the store (its additions finished).
  at::Tensor input_grad_result(StoredActivation* stored, at::Tensor grad_in);
  // The input's gradient in the store (stored_input_grad), its blocks expecting one addition
  // per backward tile, in the order the tiles run; nullptr where it is not stored.
  StoredActivation* stored_input_grad_by_tiles();
  // Backward tile `t`'s input tile and output: those `kept` from the forward, else the input
  // read over `in_region` (a leaf requiring a gradient where the input's is wanted) and none.
  std::pair<at::Tensor, at::Tensor> backward_input(KeptTiles& kept, int64_t t,
                                                   const Region& in_region);
  // The backward tiles, last first: `tile(t, need)` runs tile `t` over `need` (needs) and
  // returns its input tile, whose gradient is added to the input's (undefined for a glass tile);
  // the tiles' events and the previous segment's prefetch around them. Returns the input's gradient
  // (input_grad_result).
  using BackwardTile = std::function<at::Tensor(int64_t t, const std::vector<Region>& need)>;
  at::Tensor run_backward_tiles(StoredActivation* stored_grad_in, const BackwardTile& tile);

  Step& step_;
  int index_;
  const Segment& s_;
};

// One SchemeRun per scheme (exec/schemes/*.cpp). A segment without a barrier to take
// statistics of in this step (any, in inference) runs as plain tiles.
std::unique_ptr<SchemeRun> make_scheme_run(Step& step, int index);
std::unique_ptr<SchemeRun> plain_tiles_run(Step& step, int index);
std::unique_ptr<SchemeRun> recompute_rounds_run(Step& step, int index);
std::unique_ptr<SchemeRun> shared_rows_run(Step& step, int index);
std::unique_ptr<SchemeRun> sub_segments_run(Step& step, int index);

// What run_tile is given beside the nodes, their regions and the input tile.
// A tile's glass, by node (core/plan/glass.h): the region it holds (held_regions) and the boxes
// of it it computes (computed_boxes within it); the rest of the region is filled.
struct TileBoxes {
  std::vector<Region> held;
  std::vector<Boxes> computed;
};

// A node's tile kept as the parts its computed boxes hold (by box of TileBoxes::computed), its
// uniform value around them not yet written: the pointwise ops and joins after it run part by
// part, and only the tensor a window reads across boxes is filled (Step::run_parts). Filling
// every node's whole region made a glass tile move the bytes of a dense one: resnet50 (frozen)
// 4096² at 10% tissue computed 25% of its first segment's FLOPs in 55% of its time.
struct GlassParts {
  std::vector<at::Tensor> tensors;
  const Boxes* boxes = nullptr;
  bool defined() const { return boxes != nullptr; }
};

struct TileExtras {
  // Receives every barrier's output and input tiles there (by node), for the backward's sums
  // and corrections.
  std::map<NodeId, TileTensor>* barrier_acts = nullptr;
  // Nodes whose tiles are given (inner checkpoints), not computed; one given without a tensor
  // is read by `read_leaf` when the tile reaches it.
  const std::map<NodeId, TileTensor>* leaves = nullptr;
  std::function<at::Tensor(NodeId, const Region&)> read_leaf;
  // Each barrier's output adds its gradient to the barrier's sums as the backward passes it.
  bool hooks = false;
  // Glass within the tile (core/exec/glass.h): by node, what the tile holds and the boxes of
  // it it computes; the rest holds the node's uniform value from `fill` (1×C×1×1, by node).
  const TileBoxes* boxes = nullptr;
  const std::vector<at::Tensor>* fill = nullptr;
  // A barrier the tile runs whole (WholeBarriers) among boxes: its output's value at a position
  // outside them (1×C×1×1), from which the values past it follow (GlassRun::take_barrier_value).
  std::function<void(NodeId, const at::Tensor&)> barrier_value;
};

// The dtype and device a step computes in (the parameters', else the image's), and a tensor
// moved there.
at::TensorOptions compute_options(Graph& graph, TileSource& source);
at::Tensor to_compute(const at::Tensor& t, const at::TensorOptions& options);
inline Region whole(const Shape& s) { return {{0, s.height}, {0, s.width}}; }

// `seed` as the gradient of `y`, as a scalar root for a backward that holds neither: the seed
// lives in the graph until its backward hands it on, and `y` only where autograd saved it.
at::Tensor seeded(const at::Tensor& y, const at::Tensor& seed);

class Step {
 public:
  // `training`: a backward pass follows (train_step), so tiles may keep their graphs.
  Step(Graph& graph, const Plan& plan, TileSource& source, const StepOptions& options,
       bool training);
  ~Step();
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;

  // Forward of every segment without autograd; returns the head's input (the last checkpoint
  // or the streaming reduction's result).
  at::Tensor forward();
  // Backward of every segment in reverse, from the gradient of the head's input. Returns the
  // gradient of the image when asked for.
  at::Tensor backward(at::Tensor grad);

  int64_t forward_tiles = 0, backward_tiles = 0;
  int64_t glass_forward_tiles = 0, glass_backward_tiles = 0;  // of those, glass (not run)
  int64_t glass_filled = 0;          // nodes of tiles computed over their box, the rest filled
  mutable int64_t summed_bytes = 0;  // given to sums over the ranks (sum_over_ranks)
  TileStoreStats store_stats() const { return store_ ? store_->stats() : TileStoreStats{}; }

  // ---- For the schemes ----
  Graph& graph() const { return graph_; }
  const Plan& plan() const { return plan_; }
  const Segment& segment(int index) const { return plan_.segments[static_cast<size_t>(index)]; }
  int segments() const { return static_cast<int>(plan_.segments.size()); }
  const Shape& shape(NodeId v) const { return plan_.shapes[static_cast<size_t>(v)]; }
  bool training() const { return training_; }
  TileStore* store() const { return store_.get(); }
  TileSource& source() const { return source_; }
  const at::TensorOptions& tensor_options() const { return tensor_options_; }
  std::unique_ptr<StoredActivation>& stored(NodeId v) { return stored_[v]; }
  std::unique_ptr<StoredActivation>& stored_grad(NodeId v) { return stored_grads_[v]; }
  std::unique_ptr<BarrierState>& barrier_state(NodeId v) { return barrier_states_[v]; }
  SchemeRun& run(int index) { return *runs_[static_cast<size_t>(index)]; }
  // Segment `index`'s glass tiles (none where the image declares no background, the step does
  // not skip glass, or the segment's ops or scheme cannot: find_glass).
  const SegmentGlass& glass(int index) const { return glass_[static_cast<size_t>(index)]; }
  // A checkpoint's uniform value (1×C×1×1; the image's background colour), and the sum of its
  // gradient over the positions the next segment's glass tiles read (core/exec/glass.h).
  at::Tensor& uniform(NodeId v) { return uniform_[v]; }
  at::Tensor& glass_grad(NodeId v) { return glass_grads_[v]; }
  void set_update_running(bool on) { update_running_ = on; }

  bool wants_input_grad(const Segment& s) const { return s.input != 0 || options_.input_gradient; }
  // Slide-parallel (StepOptions::ranks): whether this rank runs tile `t` of segment `index`'s
  // pass `pass` (rank_range: its own band of rows where the tiles divide among the ranks, else
  // the ranks' order turned by the segment's index, so one-tile segments fall to each rank in
  // turn; the bands by the tiles' work where the plan shares them so; every tile when the step
  // is alone), and the sum of `tensors` over the ranks (nothing when alone). `split()`: more
  // than one rank shares the step.
  bool split() const;
  Ranks* ranks() const { return split() ? options_.ranks : nullptr; }
  bool runs(int index, Pass pass, int64_t t) const;
  void sum_over_ranks(const std::vector<at::Tensor>& tensors) const;
  // Split over ranks: exchange `gives` (core/plan/split.h) on `held` (a 1×C×h×w tensor over a
  // region of an activation holding every piece this rank gives or takes): this rank's pieces
  // to the others, theirs for this rank copied (a gather) or added (`add`: a sum of gradients)
  // into it. Outside what this rank computed and received, it is not the step's (no tile of
  // this rank reads there).
  void exchange_over_ranks(const TileTensor& held, const Gives& gives, bool add) const;
  // The region of `v` this rank's resident tensors of it (a checkpoint and its gradient) cover:
  // under a split, a resident checkpoint's held_checkpoint (core/plan/split.h: what this rank's
  // tiles write and read of it); the whole activation otherwise.
  const Region& held(NodeId v) const { return held_[v]; }
  // The same over an offloaded checkpoint (`channels` of them): this rank's pieces read from
  // its blocks, the others' received into blocks that hold only them (StoredActivation::receive),
  // all sealed into the store after; and over an offloaded gradient, its blocks stored
  // (finish_additions): the others' pieces added in one more pass of additions.
  void exchange_stored(StoredActivation& stored, int64_t channels, const Gives& gives) const;
  void exchange_stored_gradient(StoredActivation& stored, int64_t channels,
                                const Gives& gives) const;
  // The exchanges' pieces (core/plan/split.h) for this step's ranks.
  Gives gives_checkpoint(int index) const;
  Gives gives_inner(int index, NodeId v) const;
  Gives gives_gradient(int index, NodeId v) const;
  // Split over ranks: the regions of segment `index`'s input gradient this rank reads after the
  // segment's backward: the pieces it gives the others (gives_gradient) and its backward tiles
  // of the segment before (their output gradient).
  std::vector<Region> held_gradient(int index) const;
  // What this rank's backward tiles of segment `index` read of `v` (rank_reads); all of it alone.
  Region backward_reads(int index, NodeId v) const;
  // The barriers of segment `s` that need whole-image statistics in this step
  // (core/exec/barrier.h). None in a one-tile segment: its tile is the whole activation, so its
  // barriers run whole.
  std::vector<NodeId> barriers(const Segment& s) const;
  // The share of barrier `b`'s input that output tile `tile` of `s` owns.
  Region share(const Segment& s, NodeId b, const Region& tile) const;

  // Region `r` of segment `s`'s input: the image's pixels, a stored checkpoint's, or a view of
  // a whole one.
  TileTensor read_input(const Segment& s, const Region& r);
  // The format a tile read from the store, or allocated for one, takes in a pass (with a
  // gradient: the recompute's, contiguous where it takes its input as it comes).
  at::MemoryFormat read_format(bool grad) const;
  // A segment's input tile in the format its pass's convs run in (core/device/device.h).
  TileTensor in_tile_format(TileTensor input) const;
  // Runs nodes (first, output] over `need` from the input tile; frees each activation after
  // its last consumer.
  at::Tensor run_tile(NodeId first, NodeId output, const std::vector<Region>& need,
                      TileTensor input, const TileExtras& extras = {});

  // The root a backward tile starts from: the output gradient's tile as the seed of `y` (or of
  // the streaming reduction's surrogate), with neither held by the caller. Consumes `y`.
  at::Tensor output_root(const Segment& s, const Region& tile, at::Tensor& y,
                         const at::Tensor& grad_out, StoredActivation* stored_grad_out);
  // Adds to `root` the corrections of `barriers` whose sums are done, each over the tile's
  // share of its input.
  at::Tensor add_corrections(const Segment& s, const Region& tile, at::Tensor root,
                             const std::map<NodeId, TileTensor>& acts,
                             const std::vector<NodeId>& barriers) const;
  // Adds `g`, region `r` of node `v`'s activation, into its gradient (over held(v)).
  void add_into(at::Tensor& grad, NodeId v, const Region& r, const at::Tensor& g) const;
  at::Tensor zeros(const Shape& s) const;
  // Zeros over held(v): a gradient of `v` no tile of this rank added to.
  at::Tensor held_zeros(NodeId v) const;

  // A tile's start or end, to the observer (and the memory meter's reading at its end).
  void emit(int segment, const Partition& part, int64_t index, TileEvent::Pass pass, bool done);
  // Cross-segment prefetch: while a segment runs its last tile, the store already reads what
  // segment `next`'s first tile reads from an offloaded checkpoint.
  void preschedule(int next, bool backward);
  bool prescheduled(int index, bool backward) const {
    return (backward ? prescheduled_backward_ : prescheduled_forward_) == index;
  }

  // At debug level, a line per segment and pass: its time, and the store's waits and bytes
  // during it (where an offloading step's time goes).
  class PassLog {
   public:
    PassLog(const Step& step, int segment, std::string pass);
    ~PassLog();
    PassLog(const PassLog&) = delete;
    PassLog& operator=(const PassLog&) = delete;

   private:
    const Step& step_;
    int segment_;
    std::string pass_;
    bool on_;
    TileStoreStats start_;
    std::chrono::steady_clock::time_point t0_;
  };

 private:
  class Output;
  void find_glass();
  void check_split() const;
  void hold();
  void take_uniform(const Segment& s, const Region& tile, const at::Tensor& y);
  at::Tensor passed_glass_root(const Segment& s, const Region& tile, const at::Tensor& y) const;
  void forward_segment(int index);
  TileTensor read_input_exactly(const Segment& s, const Region& r);
  TileTensor short_halo(const Segment& s, TileTensor t);
  bool offloaded(int index) const;
  void write_behind(int64_t bytes);
  TileTensor run_node(NodeId first, NodeId v, const Region& r, const std::vector<TileTensor>& acts,
                      const TileExtras& extras, const at::TensorOptions& options);
  TileTensor run_boxed(NodeId first, NodeId v, const std::vector<TileTensor>& acts,
                       const TileExtras& extras, const at::TensorOptions& options,
                       GlassParts* keep);
  TileTensor compute_node(NodeId first, NodeId v, const Region& r,
                          const std::vector<TileTensor>& acts, const TileExtras& extras,
                          const at::TensorOptions& options);
  TileTensor run_filled(NodeId first, NodeId v, const std::vector<TileTensor>& acts,
                        const TileExtras& extras, const at::TensorOptions& options,
                        GlassParts* keep);
  bool keeps_parts(NodeId v, NodeId output, const TileExtras& extras) const;
  bool run_parts(NodeId v, std::vector<TileTensor>& acts, std::vector<GlassParts>& parts,
                 const TileExtras& extras, bool keep);
  void fill_parts(NodeId v, std::vector<TileTensor>& acts, std::vector<GlassParts>& parts,
                  const TileExtras& extras) const;
  TileTensor run_whole_barrier(NodeId first, NodeId v, const std::vector<TileTensor>& acts,
                               const TileExtras& extras, const at::TensorOptions& options);
  TileTensor run_barrier(const Node& node, const Region& r, const std::vector<TileTensor>& acts,
                         const TileExtras& extras, const at::TensorOptions& options);

  using GivePiece = std::function<at::Tensor(const Region&)>;
  using TakePiece = std::function<void(const Region&, const at::Tensor&)>;
  // The exchange itself, in buffers of `options`: `give(r)` this rank's 1×C×h×w values over a
  // piece it gives, `take` each piece another rank gives it, in `gives`' order.
  void exchange_pieces(int64_t channels, const at::TensorOptions& options, const Gives& gives,
                       const GivePiece& give, const TakePiece& take) const;

  bool training_;
  bool update_running_ = false;  // barriers run whole update batch norm's running statistics
  Graph& graph_;
  const Plan& plan_;
  TileSource& source_;
  const StepOptions& options_;
  const Segment* halo_segment_ = nullptr;  // Fault::kHalo's segment and window
  int64_t memory_baseline_ = 0;            // live bytes when the step began (MemorySample)
  std::optional<Region> halo_region_;
  at::TensorOptions tensor_options_;  // the dtype and device the step computes in
  TileFormats formats_;               // the tiles' memory formats in each pass
  std::unique_ptr<TileStore> store_;  // when the plan offloads; outlives what it stores
  NodeVec<at::Tensor> checkpoints_;   // resident activations, each over held_
  NodeVec<Region> held_;
  NodeVec<std::unique_ptr<StoredActivation>> stored_, stored_grads_;  // offloaded ones
  NodeVec<std::unique_ptr<SparseCheckpoint>> sparse_;  // resident ones with glass (glass.h)
  // Barriers' statistics and gradient sums over this step (core/exec/barrier.h).
  NodeVec<std::unique_ptr<BarrierState>> barrier_states_;
  at::Tensor reduced_, reduced_index_;          // streaming reduction result (and argmax for max)
  std::unique_ptr<AttentionStream> attention_;  // a streaming attention pool's sums
  std::vector<SegmentGlass> glass_;             // by segment
  NodeVec<at::Tensor> uniform_, glass_grads_;   // core/exec/glass.h
  // Of a checkpoint whose segment computes its glass as tissue and hands it on
  // (SegmentGlass::dense): the position its uniform value is read at in the forward, and its
  // gradient's sum over the uniform positions (glass_grads_) given in the backward; empty else.
  NodeVec<Region> passed_at_;
  std::vector<std::unique_ptr<SchemeRun>> runs_;  // by segment
  int prescheduled_forward_ = -1, prescheduled_backward_ = -1;
};

}  // namespace tessel::core
