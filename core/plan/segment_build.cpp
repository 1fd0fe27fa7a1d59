#include "core/plan/segment_build.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/plan/cost_model.h"
#include "core/plan/geometry.h"
#include "core/plan/glass.h"
#include "core/plan/split.h"

namespace tessel::core::planning {

std::pair<int64_t, MemoryBreakdown> highest(const std::vector<MemoryBreakdown>& passes) {
  std::pair<int64_t, MemoryBreakdown> top{0, {}};
  for (const MemoryBreakdown& p : passes) {
    if (p.total() > top.first) top = {p.total(), p};
  }
  return top;
}

namespace {

// Where segment i's output checkpoint lives among `n_bounds` - 1 segments: `tiers[i]`, the last
// segment's always resident.
Tier tier_at(const std::vector<Tier>& tiers, size_t n_bounds, size_t i) {
  return i < tiers.size() && i + 2 < n_bounds ? tiers[i] : Tier::kResident;
}

}  // namespace

SegmentBuild::SegmentBuild(const Analysis& a, const Offloading& off, Strategy strategy,
                           const SoFar& so_far, size_t i)
    : a(a),
      off(off),
      strategy(strategy),
      budget(a.target),
      plan(so_far.plan),
      i(i),
      held(so_far.held) {
  const std::vector<NodeId>& bounds = so_far.bounds;
  s.input = bounds[i];
  s.output = bounds[i + 1];
  const bool last_segment = i + 2 == bounds.size();
  if (last_segment) s.reduction = a.reduction;
  // 2PS runs segments without barriers; those with run as OverL rows.
  if (strategy == Strategy::kRowsShared && !has_barrier(a.graph, s)) s.scheme = SharedRows{};
  out = a.shapes[static_cast<size_t>(s.output)];
  // Split over ranks, a rank's part of it (Analysis::held_bytes; the next segment reads it).
  out_bytes = s.reduction >= 0 ? 0 : a.held_bytes(s.output, last_segment ? -1 : bounds[i + 2]);
  count_store(bounds, so_far.tiers);
  // Barriers' inner checkpoints: held whole in the forward, and in the backward as
  // inner_backward_bytes says (split over ranks, hold_split counts a rank's parts of them in the
  // finished plan); the input's gradient is accumulated in one tensor (an offloaded input's goes
  // to the store at the end, so it holds no open blocks while tiles add into it).
  barriers = has_barrier(a.graph, s);
  inner = inner_checkpoints(a.graph, s.input, s.output);
  for (NodeId v : inner) inner_bytes += a.bytes(v);
  const MemoryBreakdown& f = a.fixed;
  const int64_t base = f.parameters + f.gradients + f.optimizer + f.tail;
  fwd_fixed = base + held + out_fwd + store_fwd;
  bwd_fixed = base + held + out_bwd + in_bwd + store_bwd;
}

// Where the segment's checkpoints live, and the bytes its passes hold for them and for the
// store.
void SegmentBuild::count_store(const std::vector<NodeId>& bounds, const std::vector<Tier>& tiers) {
  const int64_t in_grad = s.input != 0               ? a.held_bytes(s.input, s.output)
                          : a.options.input_gradient ? a.bytes(s.input)
                                                     : 0;
  // Only the resident tier counts against the budget; on a CPU build the host tier is RAM.
  auto counted = [&](size_t j) { return tier_at(tiers, bounds.size(), j) != Tier::kDisk; };
  s.tier = tier_at(tiers, bounds.size(), i);
  if (i > 0) in_tier = tier_at(tiers, bounds.size(), i - 1);
  out_off = !counted(i);
  in_off = i > 0 && !counted(i - 1);
  // Forward: earlier checkpoints + this output; backward: the same + the output's gradient
  // and the input's gradient. An offloaded checkpoint holds only the store's share in use:
  // this pass's reads and writes and those that reach into it (the next pass's first reads
  // start in this one's last tile, the previous pass's writes drain in this one). Forward i
  // reads its input, writes its output; backward i reads both (the output's gradient) and
  // writes the input's gradient, and backward i - 1 reads segment i - 1's input.
  const bool before_in_off = i > 1 && !counted(i - 2);
  cap = (in_off ? a.bytes(s.input) : 0) + (out_off ? a.bytes(s.output) : 0) +
        (before_in_off ? a.bytes(bounds[i - 1]) : 0);
  out_fwd = out_off ? 0 : out_bytes;
  out_bwd = out_off ? 0 : 2 * out_bytes;
  // An offloaded input's gradient also holds the blocks open while tiles add into it: that
  // depends on the backward partition, so it is added per partition (open_bytes).
  in_bwd = in_off ? 0 : in_grad;
  // The store's share of each pass (keep_partly_resident takes resident blocks out of it).
  std::vector<size_t> around;  // the segments whose offloaded outputs bound it
  if (in_off) around.push_back(i - 1);
  if (out_off) around.push_back(i);
  if (before_in_off) around.push_back(i - 2);
  const bool reads = in_off || out_off, writes = in_off || out_off;
  const int64_t written = off.in_use(false, writes, kUnfit);
  fwd_share = {off.in_use(reads, writes, kUnfit), written, cap, around};
  bwd_share = {off.in_use(reads || before_in_off, writes, kUnfit), written, cap, around};
  store_fwd = fwd_share.held();
  store_bwd = bwd_share.held();
}

void SegmentBuild::choose_counts() {
  if (s.is<SharedRows>() && off.force_inner) store_kept_rows();
  nf = choose(false);
  nb = choose(true);
  if (s.is<SharedRows>() && (nf < 0 || nb < 0) && s.shared_tier() == Tier::kResident &&
      off.inner_tier != Tier::kResident) {
    store_kept_rows();
    nf = choose(false);
    nb = choose(true);
  }
  place_barriers();
  drop_inner();
}

bool SegmentBuild::fits(int64_t n, bool backward, int64_t avail, bool with_kept) const {
  const Partition p = partition_for(strategy, out, n);
  const auto tc = worst_tile(a, s, p);
  const int64_t kept = with_kept ? tc.shared_kept_bytes : 0;
  if (!backward) return tc.forward_bytes + kept <= avail;
  return tc.backward_bytes + open_bytes(p, false) + kept <= avail;
}

Partition SegmentBuild::fixed_partition() const {
  if (a.options.overrides.tiles_y) {
    return Partition::even(out.height, out.width, *a.options.overrides.tiles_y,
                           row_strategy(strategy) ? 1
                                                  : a.options.overrides.tiles_x.value_or(
                                                        *a.options.overrides.tiles_y));
  }
  const int64_t t = std::max<int64_t>(1, *a.options.overrides.tile_size);
  return Partition::even(out.height, out.width, (out.height + t - 1) / t,
                         row_strategy(strategy) ? 1 : (out.width + t - 1) / t);
}

// Bytes open while partition `p`'s backward tiles run, one sub-segment at a time (see
// grad_strip_bytes): the blocks of the offloaded gradients it adds into (the input's, the
// inner checkpoints'), and for an offloaded inner checkpoint's sub-segment three shares of
// it: the gradient, the correction, and the value (the tile's own output, copied under bf16
// autocast). Counting two (no copy) made the search pick partitions whose exact open bytes
// then did not fit (resnet50 4096² in 2 GiB found no offloading plan and recomputed in
// rounds): the search does not refine those. The chosen partition's (`exact`) from the
// blocks the executor will use; the search's from the rows and columns around the middle.
int64_t SegmentBuild::open_bytes(const Partition& p, bool exact) const {
  if (s.is<SubSegments>()) return sub_segments_open_bytes(p, exact);
  return in_off ? Offloading::open_bytes(a, s, p, exact) : 0;
}

// The fewest tiles whose pass fits what the budget leaves (0: the options fix the partition;
// 1 without a budget; -1: none fits).
int64_t SegmentBuild::choose(bool backward) const {
  const int64_t fixed_bytes = backward ? bwd_fixed : fwd_fixed;
  if (a.options.overrides.tiles_y || a.options.overrides.tile_size)
    return 0;  // fixed partition below
  if (budget <= 0) return ranks_count(1);
  const int64_t avail = budget - fixed_bytes;
  if (avail <= 0) return -1;
  int64_t hi = max_count(strategy, out);
  if (!fits(hi, backward, avail)) return -1;
  int64_t lo = 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid, backward, avail))
      hi = mid;
    else
      lo = mid + 1;
  }
  if (s.is<SharedRows>() && s.shared_tier() == Tier::kResident &&
      !fits(lo, backward, avail, true)) {
    return shared_rows_count(lo, backward, avail);
  }
  return ranks_count(lo);
}

// A split step's count (PlanOptions::ranks): at least `n`, a tile per rank, and a multiple of
// the ranks in tiles, so that no rank waits at the segment's sums for another's extra tile
// (vgg-mini 4096², 2 ranks: 3×3 forward tiles ran 5 on one rank and 4 on the other), where
// the output has as many.
int64_t SegmentBuild::ranks_count(int64_t n) const {
  const int ranks = a.options.ranks;
  if (ranks <= 1) return n;
  const int64_t most = max_count(strategy, out);
  n = std::min(std::max(n, fewest_count_for_ranks(strategy, ranks)), most);
  for (int64_t m = n; m <= most && m <= 2 * n; ++m) {
    const int64_t tiles = row_strategy(strategy) ? m : m * m;
    if (tiles % ranks == 0) return m;
  }
  return n;
}

// Barriers: whole where the segment fits as one tile both ways (they run as LibTorch runs
// them), else as sub-segments where the inner checkpoints fit (resident, else in the store
// where the plan offloads), else recomputed in rounds.
void SegmentBuild::place_barriers() {
  const bool one_tile = nf == 0 ? fixed_partition().tiles() == 1 : nf == 1 && nb == 1;
  if (!barriers) return;
  if (a.options.overrides.whole_barriers && one_tile) {
    s.scheme = WholeBarriers{};
    return;
  }
  s.scheme = RecomputeRounds{};  // unless sub-segments fit
  if (a.options.overrides.inner_checkpoints) try_sub_segments();
}

int64_t SegmentBuild::finest_bytes() const {
  const Partition finest_partition = partition_for(strategy, out, max_count(strategy, out));
  const auto finest = a.tile_cost(s.input, s.output, middle_tile(finest_partition));
  const int64_t finest_open = open_bytes(finest_partition, false);
  const int64_t finest_here =
      std::max(fwd_fixed + finest.forward_bytes, bwd_fixed + finest_open + finest.backward_bytes);
  if (s.is<SharedRows>() && s.shared_tier() == Tier::kResident && !fits_budget() &&
      a.options.offload == PlanOptions::Offload::kNever) {
    return shared_rows_finest();
  }
  return finest_here;
}

void SegmentBuild::set_partitions() {
  if (nf == 0) {
    s.forward = s.backward = fixed_partition();
  } else if (nf > 0 && nb > 0 && s.is<SharedRows>()) {
    // The backward reuses what the forward's rows kept: one partition for both.
    s.forward = s.backward = partition_for(strategy, out, std::max(nf, nb));
  } else if (nf > 0 && nb > 0) {
    s.forward = partition_for(strategy, out, nf);
    s.backward = partition_for(strategy, out, nb);
  } else {
    s.forward = s.backward = Partition::whole(out.height, out.width);
  }
  if (s.is<SharedRows>() && nf != 0) {
    balance_shared_rows();
  } else if (row_strategy(strategy) && !s.is<SharedRows>()) {
    balance_rows();
  }
}

namespace {

// A tile's overhead beyond its FLOPs grows with the ops it runs: PlanOptions::Prices::per_tile
// is taken as the price of kOpsPerTilePrice ops. The finer grids glass asked for measured about
// 2.8 ms a tile beyond their FLOPs for vgg-mini's 16-op segments and 10 ms for resnet50's, on 2
// EPYC cores, where per_tile alone (2 ms whatever the ops) priced them at 1.2× dense against
// 1.76× measured (bench/NOTES.md, session 42). Only refine_for_glass prices so, so plans without
// a background are as before.
constexpr double kOpsPerTilePrice = 10;

// The FLOPs a pass over `part` computes: each tile's computed boxes' (`computed`, by tile:
// SegmentGlass), else every tile at the partition's worst.
double pass_flops(const Analysis& a, const Segment& s, const Partition& part,
                  const std::vector<int64_t>& computed) {
  if (computed.empty()) {
    return static_cast<double>(worst_tile(a, s, part).flops) * static_cast<double>(part.tiles());
  }
  double sum = 0;
  for (int64_t f : computed) sum += static_cast<double>(f);
  return sum;
}

// Segment `s`'s glass over `uniform` in a training step (segment_glass), once per segment,
// scheme, partitions and mask (Analysis::glass_memo).
const SegmentGlass& memo_glass(const Analysis& a, const Segment& s, const CellMask& uniform) {
  const Analysis::GlassKey key = Analysis::glass_key(s, uniform);
  auto hit = a.glass_memo.find(key);
  if (hit == a.glass_memo.end()) {
    hit = a.glass_memo
              .emplace(key, segment_glass(a.graph, a.shapes, s, uniform, /*training=*/true,
                                          a.options.input_gradient))
              .first;
  }
  return hit->second;
}

// What running `s` over partitions `f` and `b` costs where its glass tiles over `uniform` are not
// run and their glass elsewhere is filled: the tiles' computed FLOPs and overhead per tile run.
double glass_priced(const Analysis& a, Segment s, const Partition& f, const Partition& b,
                    const CellMask& uniform) {
  s.forward = f;
  s.backward = b;
  const SegmentGlass& g = memo_glass(a, s, uniform);
  const auto run_f = static_cast<double>(f.tiles() - g.forward_count());
  const auto run_b = static_cast<double>(b.tiles() - g.backward_count());
  const double per_tile = a.options.prices.per_tile *
                          std::max(1.0, static_cast<double>(s.output - s.input) / kOpsPerTilePrice);
  return pass_flops(a, s, f, g.forward_flops) + 3.0 * pass_flops(a, s, b, g.backward_flops) +
         per_tile * (run_f + run_b);
}

// The output's uniform positions of `s` over `uniform`, its input's (SegmentGlass::output).
CellMask glass_output(const Analysis& a, const Segment& s, const CellMask& uniform) {
  return memo_glass(a, s, uniform).output;
}

// Finer grids refine_for_glass tries: the backward's tiles split by each factor, while the tiles
// stay at least kFinest output positions a side and a segment holds at most kMostTiles.
constexpr int64_t kGlassFactors[] = {2, 3, 4, 6, 8, 12, 16};
constexpr int64_t kFinest = 4;
constexpr int64_t kMostTiles = 2048;

}  // namespace

void SegmentBuild::refine_for_glass(const CellMask& uniform) {
  // Not sub-segments: their tiles cost far more than their price says, and a finer grid their
  // glass priced cheaper ran slower than the dense plan (resnet50 train-mode BN 1024² in 1 GiB
  // at 10% tissue: 5.2 s against 4.2 s; bench/NOTES.md, session 52). Not whole barriers: one
  // tile.
  if (nf <= 0 || nb <= 0 || strategy != Strategy::kGrid || uniform.none() || s.is<SubSegments>() ||
      s.is<WholeBarriers>() || !glass_obstacle(a.graph, s, /*training=*/true).empty() ||
      !glass_dense(a.graph, s, /*training=*/true).empty()) {
    return;
  }
  double best = glass_priced(a, s, s.forward, s.backward, uniform);
  std::optional<Partition> chosen;
  for (int64_t k : kGlassFactors) {
    const int64_t rows = s.backward.rows() * k, cols = s.backward.cols() * k;
    if (rows * kFinest > out.height || cols * kFinest > out.width || rows * cols > kMostTiles) {
      break;
    }
    const Partition p = Partition::even(out.height, out.width, rows, cols);
    const double price = glass_priced(a, s, p, p, uniform);
    if (price < best) {
      best = price;
      chosen = p;
    }
  }
  if (chosen) s.forward = s.backward = *chosen;
}

// Balanced rows, unless balancing by input rows makes the heaviest row heavier or changes the
// row count (when every row needs the whole input, fewer rows read as little; a count the
// caller or the budget search chose is kept).
void SegmentBuild::balance_rows() {
  Partition f = s.forward, b = s.backward;
  f.y_edges = balanced_rows(a, s.input, s.output, s.forward.rows());
  b.y_edges = balanced_rows(a, s.input, s.output, s.backward.rows());
  if (f.rows() == s.forward.rows() &&
      worst_tile(a, s, f).forward_bytes <= worst_tile(a, s, s.forward).forward_bytes) {
    s.forward = f;
  }
  if (b.rows() == s.backward.rows() &&
      worst_tile(a, s, b).backward_bytes <= worst_tile(a, s, s.backward).backward_bytes) {
    s.backward = b;
  }
}

std::pair<MemoryBreakdown, MemoryBreakdown> SegmentBuild::account(PlanCost& cost) {
  const auto fc = worst_tile(a, s, s.forward);
  const auto bc = worst_tile(a, s, s.backward);
  s.forward_working_bytes = fc.forward_bytes;
  s.backward_working_bytes = bc.backward_bytes;
  s.halo_flops = fc.flops * s.forward.tiles();
  const auto forward_tiles = static_cast<double>(s.forward.tiles());
  const auto backward_tiles = static_cast<double>(s.backward.tiles());
  cost.compute += static_cast<double>(fc.flops) * forward_tiles +
                  3.0 * static_cast<double>(bc.flops) * backward_tiles;
  cost.tiles += a.options.prices.per_tile * (forward_tiles + backward_tiles);
  // What the rows keep, from this forward to this backward.
  if (auto* rows = s.as<SharedRows>()) rows->kept_bytes = fc.shared_kept_bytes;
  const PlanCost extra = scheme_cost(a, s);
  cost += extra;
  s.forward_price = (static_cast<double>(fc.flops) + a.options.prices.per_tile) * forward_tiles;
  s.backward_price =
      (3.0 * static_cast<double>(bc.flops) + a.options.prices.per_tile) * backward_tiles +
      extra.total();
  const int64_t in_open = open_bytes(s.backward, true);
  if (i > 0 && in_tier != Tier::kResident && s.is<SubSegments>()) {
    s.input_grad_blocks = off.inner_grad_blocks(a, s, s.input, a.additions(s, s.input),
                                                &plan.segments[i - 1].backward);
  } else if (i > 0 && in_tier != Tier::kResident) {
    s.input_grad_blocks = off.grad_blocks(a, s, s.backward, plan.segments[i - 1].backward);
  }
  MemoryBreakdown fwd_at = a.fixed, bwd_at = a.fixed;
  const int64_t shared_held = s.shared_tier() == Tier::kResident ? s.shared_bytes() : 0;
  fwd_at.checkpoints = held + out_fwd + store_fwd + inner_fwd + shared_held;
  fwd_at.working_set = fc.forward_bytes;
  bwd_at.checkpoints = held + out_bwd + in_bwd + store_bwd + in_open + inner_bwd + shared_held;
  bwd_at.working_set = bc.backward_bytes;
  if (s.tier != Tier::kResident) s.blocks = off.blocks(a, s.output, s.forward);
  if (s.inner_tier() != Tier::kResident) sub_segments_blocks();
  return {fwd_at, bwd_at};
}

// The plan's cost beyond its segments' (offloaded checkpoints at the halo-exact count), its
// window, tail and prediction, and what the smallest budget of this segmentation is made of.
void finish_candidate(const Analysis& a, Candidate& c, PlanCost cost, const Offloading& off,
                      const MemoryBreakdown& at_peak, bool never) {
  Plan& plan = c.plan;
  c.flops = never ? kNever : cost.total();
  // The search prices an offloaded checkpoint at five passes over it (see moved_bytes); the
  // chosen plan gets the halo-exact count.
  for (size_t i = 0; i + 1 < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    if (s.tier != Tier::kResident) {
      cost.moved += a.options.prices.per_byte_moved * 5.0 *
                    static_cast<double>(a.bytes(s.output) - s.resident_bytes);
    }
  }
  // Offloaded inner checkpoints: each written once and read about twice (the forward's later
  // sub-segments, the backward's), its gradient written and read once.
  for (const Segment& s : plan.segments) {
    if (s.inner_tier() == Tier::kResident) continue;
    for (NodeId v : kept_inner(a.graph, s)) {
      cost.moved += a.options.prices.per_byte_moved * 5.0 * static_cast<double>(a.bytes(v));
    }
  }
  plan.window_bytes = plan.offloads() ? off.window_bytes : 0;
  plan.write_behind_bytes = plan.offloads() ? off.write_behind_bytes() : 0;
  plan.tail_input = a.reduction >= 0 ? a.reduction : a.last;
  plan.predicted = at_peak;
  c.cost = never ? kNever : cost.total();
  plan.cost = cost;
  // What dominates the smallest budget this segmentation could reach.
  const MemoryBreakdown& fixed = a.fixed;
  const int64_t model_state = fixed.parameters + fixed.gradients + fixed.optimizer;
  c.dominant = model_state * 2 >= c.needed
                   ? "parameters, gradients and optimizer state (" + format_bytes(model_state) + ")"
                   : "checkpoints and the working set of the smallest tile (" +
                         format_bytes(c.needed - model_state) + ")";
}

namespace {

// The bytes of `s`'s output that its forward glass tiles write (`forward`: SegmentGlass's).
int64_t glass_bytes(const Analysis& a, const Segment& s, const std::vector<uint8_t>& forward) {
  int64_t area = 0;
  for (size_t t = 0; t < forward.size(); ++t) {
    if (forward[t] != 0) area += s.forward.tile(static_cast<int64_t>(t)).area();
  }
  return area * a.graph.node(s.output).channels * a.eb;
}

// Checkpoints keep their glass as one vector a block (core/exec/glass.h): a resident one holds
// it by forward tile where sparse_checkpoint says (SparseCheckpoint), an offloaded one in its
// blocks (StoredActivation). The bytes so kept take no memory in the passes the checkpoint lives
// through (its segment's forward to the next one's backward; an offloaded one's resident blocks
// only, in the passes keep_partly_resident counts them), and offloaded ones are never moved (the
// search's five passes over them, as finish_candidate prices). Returns the moves' price; fills
// the summary.
double sparse_checkpoints(const Analysis& a, Plan& plan, const std::vector<SegmentGlass>& glass,
                          std::vector<MemoryBreakdown>& passes) {
  double moved = 0;
  for (size_t i = 0; i + 1 < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    if (s.reduction >= 0) continue;
    plan.glass.checkpoint_bytes += a.bytes(s.output);
    int64_t freed = 0;  // resident bytes
    if (s.tier == Tier::kResident) {
      // A split step exchanges its checkpoints whole-shaped (core/exec/step.cpp).
      if (a.options.ranks > 1 || !sparse_checkpoint(plan, i, glass)) continue;
      freed = glass_bytes(a, s, glass[i].forward);
      plan.glass.uniform_checkpoint_bytes += freed;
    } else {
      const std::vector<uint8_t> uniform = glass[i].uniform_blocks(s.forward, s.blocks);
      const int64_t held = uniform_bytes(a, s, uniform);
      const int64_t per_pixel = a.graph.node(s.output).channels * a.eb;
      for (int64_t b = 0; b < s.resident_blocks && !uniform.empty(); ++b) {
        if (uniform[static_cast<size_t>(b)] != 0) freed += s.blocks.tile(b).area() * per_pixel;
      }
      plan.glass.uniform_checkpoint_bytes += held + freed;
      moved += a.options.prices.per_byte_moved * 5.0 * static_cast<double>(held);
    }
    for (size_t p = 2 * i; p < passes.size() && freed > 0; ++p) {
      if (s.tier == Tier::kResident || p != 2 * i + 1) passes[p].checkpoints -= freed;
    }
  }
  return moved;
}

// The most a tile of `part` that is not glass (`glass`) and fills its glass holds in the forward,
// and in the backward, with what its boxes hold beside what it holds dense (boxed_copies); 0
// where no tile fills.
struct BoxedTiles {
  int64_t forward = 0, backward = 0;
};
BoxedTiles boxed_tiles(const Analysis& a, const Segment& s, const SegmentGlass& g,
                       const Partition& part, const std::vector<uint8_t>& glass) {
  BoxedTiles most;
  for (int64_t t = 0; t < part.tiles(); ++t) {
    if (glass[static_cast<size_t>(t)] != 0) continue;
    const Region tile = part.tile(t);
    const BoxedTile b = boxed_tile(a, s, g.input, tile);
    const auto tc = a.compute_cost(s.input, s.output, tile, b.need, nullptr, &b.copies);
    most.forward = std::max(most.forward, tc.forward_bytes);
    most.backward = std::max(most.backward, tc.backward_bytes);
  }
  return most;
}

// Tiles that fill their glass hold what their boxes hold beside what they hold dense: each pass's
// working set is at least its worst tile's with it. Kept graphs count it where they count their
// tiles' graphs (sparse_graphs); shared rows, sub-segments and recompute rounds are left as they
// are.
void boxed_working(const Analysis& a, const Plan& plan, const std::vector<SegmentGlass>& glass,
                   std::vector<MemoryBreakdown>& passes) {
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    const SegmentGlass& g = glass[i];
    if (g.input.none() || !g.dense.empty() || s.is<KeptGraph>() || s.is<SharedRows>() ||
        s.is<SubSegments>() || s.is<RecomputeRounds>()) {
      continue;
    }
    MemoryBreakdown& fwd = passes[2 * i];
    MemoryBreakdown& bwd = passes[2 * i + 1];
    fwd.working_set = std::max(fwd.working_set, boxed_tiles(a, s, g, s.forward, g.forward).forward);
    bwd.working_set =
        std::max(bwd.working_set, boxed_tiles(a, s, g, s.backward, g.backward).backward);
  }
}

// What the plan's glass (core/plan/glass.h) does not cost, over the request's background: the
// glass tiles' FLOPs in both passes and their price per tile, the other tiles' FLOPs outside
// their computed boxes, the checkpoints' glass not moved (sparse_checkpoints, which also takes
// their resident glass out of `passes`); the plan's summary of them, and for ranks the shares
// of each pass by work (share_by_work). Classified
// anew on the finished candidate: keep_graphs may have given a segment the forward's tiles for
// its backward since build's loop classified them.
PlanCost glass_savings(const Analysis& a, Plan& plan, std::vector<MemoryBreakdown>& passes) {
  const CellMask& image = *a.options.background;
  plan.shapes = a.shapes;  // as the finished plan's (make_plan)
  const std::vector<SegmentGlass> glass = plan_segments_glass(a, plan);
  plan.glass = summarize(plan, image, glass);
  // A split step's shares of each pass by its tiles' work over the background: by count, the
  // rank whose band held the tissue made the others wait (vgg-mini 4096² at 10% tissue on 2
  // ranks: 0.5–0.7 s a step; bench/NOTES.md session 66).
  for (size_t i = 0; i < plan.segments.size() && a.options.ranks > 1; ++i) {
    share_by_work(plan.segments[i], glass[i], a.options.ranks);
  }
  PlanCost saved;
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    const SegmentGlass& g = glass[i];
    if (!g.forward_flops.empty()) {
      saved.compute +=
          static_cast<double>(g.forward_dense_flops) - pass_flops(a, s, s.forward, g.forward_flops);
    }
    if (!g.backward_flops.empty()) {
      saved.compute += 3.0 * (static_cast<double>(g.backward_dense_flops) -
                              pass_flops(a, s, s.backward, g.backward_flops));
    }
    saved.tiles +=
        a.options.prices.per_tile * static_cast<double>(g.forward_count() + g.backward_count());
  }
  saved.moved += sparse_checkpoints(a, plan, glass, passes);
  sparse_graphs(a, plan, glass, passes);
  boxed_working(a, plan, glass, passes);
  return saved;
}

// The request's background (PlanOptions::background), or none; one of another size than the
// image is the caller's mistake.
CellMask request_background(const Analysis& a) {
  if (!a.options.background) return {};
  const CellMask& b = *a.options.background;
  const Shape& image = a.shapes.front();
  if (b.height() != image.height || b.width() != image.width) {
    throw Error("internal: a background over " + std::to_string(b.height()) + "×" +
                std::to_string(b.width()) + " for a " + to_string(image) + " image");
  }
  return b;
}

}  // namespace

Candidate build(const Analysis& a, Strategy strategy, const std::vector<NodeId>& checkpoints,
                const std::vector<Tier>& tiers, const Offloading& off) {
  const MemoryBreakdown& fixed = a.fixed;
  const int64_t budget = a.target;
  Candidate c;
  Plan& plan = c.plan;
  plan.strategy = strategy;
  std::vector<NodeId> bounds{0};
  for (NodeId v : checkpoints) bounds.push_back(v);
  bounds.push_back(a.last);
  const int64_t base = fixed.parameters + fixed.gradients + fixed.optimizer + fixed.tail;
  int64_t held = 0;  // checkpoints alive while this segment runs (forward)
  int64_t peak = base, finest_peak = base;
  MemoryBreakdown at_peak = fixed;
  PlanCost cost;
  bool unfit = false;  // some segment found no partition
  // What each pass holds at its peak: segment i's forward at 2i, its backward at 2i + 1.
  std::vector<MemoryBreakdown> passes(2 * (bounds.size() - 1));
  std::vector<StoreShare> shares(passes.size());  // the store's part of each (as passes)
  // The input's uniform positions for each segment in turn (the background, then what each
  // segment's glass tiles cover).
  CellMask uniform = request_background(a);
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    SegmentBuild b(a, off, strategy, {plan, bounds, tiers, held}, i);
    b.choose_counts();
    finest_peak = std::max(finest_peak, b.finest_bytes());
    if (!b.fits_budget()) unfit = true;
    b.set_partitions();
    if (!uniform.none()) {
      b.refine_for_glass(uniform);
      uniform = glass_output(a, b.s, uniform);
    }
    const auto [fwd_at, bwd_at] = b.account(cost);
    Segment& s = b.s;
    plan.tiled_flops += s.halo_flops;
    passes[2 * i] = fwd_at;
    passes[2 * i + 1] = bwd_at;
    if (s.shared_tier() == Tier::kResident &&
        (!s.is<SubSegments>() || s.inner_tier() == Tier::kResident)) {
      // Kept rows or inner checkpoints in the store add to it unbounded: left as they are.
      shares[2 * i] = b.fwd_share;
      shares[2 * i + 1] = b.bwd_share;
    }
    const int64_t fwd_peak = fwd_at.total(), bwd_peak = bwd_at.total();
    if (std::max(fwd_peak, bwd_peak) > peak) {
      peak = std::max(fwd_peak, bwd_peak);
      at_peak = bwd_peak >= fwd_peak ? bwd_at : fwd_at;
    }
    if (!b.out_off) held += b.out_bytes;
    // Resident kept rows: until this segment's backward, after every later pass.
    held += s.shared_tier() == Tier::kResident ? s.shared_bytes() : 0;
    plan.checkpoints.push_back(s.output);
    plan.segments.push_back(std::move(s));
  }
  if (a.reduction >= 0) plan.checkpoints.pop_back();
  if (off.partly_resident && budget > 0 && peak <= budget) {
    keep_partly_resident(a, plan, passes, shares, budget);
    std::tie(peak, at_peak) = highest(passes);
  }
  // Kept graphs are part of the plan the search prices: a segmentation whose later segments
  // keep their graphs recomputes less (vgg-mini 2048² in 1 GiB: grid and rows keep two of
  // three segments' graphs; shared rows, priced without them, took one segment that keeps none).
  if (a.options.overrides.keep_graphs && budget > 0 && peak <= budget && !unfit) {
    cost -= keep_graphs(a, plan, passes, budget);
    std::tie(peak, at_peak) = highest(passes);
  }
  if (a.options.background) {
    cost -= glass_savings(a, plan, passes);
    std::tie(peak, at_peak) = highest(passes);
  }
  c.passes = std::move(passes);
  c.strategy = strategy;
  c.set = checkpoints;
  c.tiers = tiers;
  c.needed = finest_peak;
  finish_candidate(a, c, cost, off, at_peak, unfit || (budget > 0 && peak > budget));
  return c;
}

std::vector<SegmentGlass> plan_segments_glass(const Analysis& a, const Plan& plan) {
  // plan_glass's, each segment's from the memo (most were priced while the candidate was built).
  std::vector<SegmentGlass> glass;
  glass.reserve(plan.segments.size());
  for (const Segment& s : plan.segments) {
    glass.push_back(memo_glass(a, s, glass.empty() ? *a.options.background : glass.back().output));
  }
  return glass;
}

BoxedTile boxed_tile(const Analysis& a, const Segment& s, const CellMask& uniform,
                     const Region& tile) {
  const bool whole = s.is<WholeBarriers>();
  BoxedTile b;
  b.need = segment_needs(a.graph, a.shapes, s.input, s.output, tile);
  const std::vector<Boxes> box = computed_boxes(a.graph, a.shapes, s.input, s.output, b.need,
                                                TileUniform{uniform, nullptr, whole});
  b.held = held_regions(a.graph, a.shapes, {s.input, s.output}, b.need, box, whole);
  b.copies =
      boxed_copies(a.graph, a.shapes, {s.input, s.output}, held_boxes(box, b.held), b.held, a.eb);
  return b;
}

}  // namespace tessel::core::planning
