#include "core/plan/segment_build.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/plan/cost_model.h"
#include "core/plan/geometry.h"

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

// One segment of build(), from checkpoint bounds[i] to bounds[i + 1]: the bytes each of its
// passes holds besides its tiles, the partitions that fit what the budget leaves, where its
// barriers' inner checkpoints and its shared rows' kept rows go, and what it adds to the plan.
// `plan` holds the segments before it; `held` is the earlier checkpoints alive while it runs.
class SegmentBuild {
 public:
  SegmentBuild(const Analysis& a, const Offloading& off, Strategy strategy, const Plan& plan,
               size_t i, const std::vector<NodeId>& bounds, const std::vector<Tier>& tiers,
               int64_t held)
      : a(a), off(off), strategy(strategy), budget(a.target), plan(plan), i(i), held(held) {
    s.input = bounds[i];
    s.output = bounds[i + 1];
    const bool last_segment = i + 2 == bounds.size();
    if (last_segment) s.reduction = a.reduction;
    // 2PS runs segments without barriers; those with run as OverL rows.
    if (strategy == Strategy::kRowsShared && !has_barrier(a.graph, s)) s.scheme = SharedRows{};
    out = a.shapes[static_cast<size_t>(s.output)];
    out_bytes = s.reduction >= 0 ? 0 : a.bytes(s.output);
    const int64_t in_grad = (s.input != 0 || a.options.input_gradient) ? a.bytes(s.input) : 0;
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
    // Barriers' inner checkpoints: held whole in the forward, and in the backward as
    // inner_backward_bytes says; the input's gradient is accumulated whole (an offloaded
    // input's goes to the store at the end, so it holds no open blocks while tiles add into it).
    barriers = has_barrier(a.graph, s);
    inner = inner_checkpoints(a.graph, s.input, s.output);
    for (NodeId v : inner) inner_bytes += a.bytes(v);
    const MemoryBreakdown& f = a.fixed;
    const int64_t base = f.parameters + f.gradients + f.optimizer + f.tail;
    fwd_fixed = base + held + out_fwd + store_fwd;
    bwd_fixed = base + held + out_bwd + in_bwd + store_bwd;
  }

  // Chooses the forward's and backward's tile counts, placing the barriers (whole, as
  // sub-segments over inner checkpoints, or recomputed in rounds) and the shared rows' kept
  // rows (resident, else in the store); -1 in `nf` or `nb` where no partition fits.
  void choose_counts() {
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

  bool fits_budget() const { return nf >= 0 && nb >= 0; }

  // The smallest a pass of this segment can hold: at the finest partition.
  int64_t finest_bytes() const;

  // Sets the partitions the counts chose (fixed ones where the options fix them), rows
  // balanced where that holds no more.
  void set_partitions();

  // Adds the segment's cost to `cost`; returns its forward's and backward's bytes at their
  // peaks (as build's passes) and fills the segment's FLOPs and the store's blocks.
  std::pair<MemoryBreakdown, MemoryBreakdown> account(PlanCost& cost);

  Segment s;
  int64_t out_bytes = 0;  // the output checkpoint's (0 for a reduction's)
  bool out_off = false;   // the output is offloaded
  StoreShare fwd_share, bwd_share;

 private:
  // What resident or offloaded inner checkpoints add to the forward and the backward.
  std::pair<int64_t, int64_t> inner_extra(Tier t) const {
    if (t == Tier::kResident) return std::pair{inner_bytes, inner_backward_bytes(a, s)};
    return std::pair{off.in_use(true, true, cap + inner_bytes) - store_fwd,
                     off.in_use(true, true, cap + 2 * inner_bytes) - store_bwd};
  }
  int64_t open_bytes(const Partition& p, bool exact) const;
  // Shared rows also hold what every row keeps for the next (more with more rows: the search
  // finds the fewest rows whose working set fits, then checks them with it).
  bool fits(int64_t n, bool backward, int64_t avail, bool with_kept = false) const {
    const Partition p = partition_for(strategy, out, n);
    const auto tc = worst_tile(a, s, p);
    const int64_t kept = with_kept ? tc.shared_kept_bytes : 0;
    if (!backward) return tc.forward_bytes + kept <= avail;
    return tc.backward_bytes + open_bytes(p, false) + kept <= avail;
  }
  int64_t choose(bool backward) const;
  void drop_inner();
  Partition fixed_partition() const {
    if (a.options.tiles_y) {
      return Partition::even(
          out.height, out.width, *a.options.tiles_y,
          row_strategy(strategy) ? 1 : a.options.tiles_x.value_or(*a.options.tiles_y));
    }
    const int64_t t = std::max<int64_t>(1, *a.options.tile_size);
    return Partition::even(out.height, out.width, (out.height + t - 1) / t,
                           row_strategy(strategy) ? 1 : (out.width + t - 1) / t);
  }
  // Shared rows' kept rows where the budget has no room for them (or the options force it):
  // in the store, as offloaded inner checkpoints are (written behind the forward, read ahead
  // in the backward, within the store's window).
  void store_kept_rows() {
    s.as<SharedRows>()->kept_tier = off.inner_tier;
    const int64_t more_fwd = off.in_use(in_off || out_off, true, kUnfit) - store_fwd;
    const int64_t more_bwd = off.in_use(true, true, kUnfit) - store_bwd;
    store_fwd += more_fwd;
    store_bwd += more_bwd;
    fwd_fixed += more_fwd;
    bwd_fixed += more_bwd;
  }
  void place_barriers();

  const Analysis& a;
  const Offloading& off;
  const Strategy strategy;
  const int64_t budget;
  const Plan& plan;  // the segments before this one
  const size_t i;
  const int64_t held;
  Shape out;
  Tier in_tier = Tier::kResident;  // where the input checkpoint lives
  bool in_off = false;             // the input is on disk (the host tier is RAM: counted)
  int64_t cap = 0, out_fwd = 0, out_bwd = 0, in_bwd = 0, store_fwd = 0, store_bwd = 0;
  bool barriers = false;
  std::vector<NodeId> inner;
  int64_t inner_bytes = 0;
  // What each pass holds outside its tiles, and of that what inner checkpoints add.
  int64_t fwd_fixed = 0, bwd_fixed = 0, inner_fwd = 0, inner_bwd = 0;
  int64_t nf = -1, nb = -1;  // tile counts; 0: the options fix the partition
};

// Bytes open while partition `p`'s backward tiles run, one sub-segment at a time (see
// grad_strip_bytes): the blocks of the offloaded gradients it adds into (the input's, the
// inner checkpoints'), and for an offloaded inner checkpoint's sub-segment three shares of
// it: the gradient, the correction, and the value (the tile's own output, copied under bf16
// autocast). Counting two (no copy) made the search pick partitions whose exact open bytes
// then did not fit (resnet50 4096² in 2 GiB found no offloading plan and recomputed in
// rounds): the search does not refine those. The chosen partition's (`exact`) from the
// blocks the executor will use; the search's from the rows and columns around the middle.
int64_t SegmentBuild::open_bytes(const Partition& p, bool exact) const {
  if (!s.is<SubSegments>()) return in_off ? Offloading::open_bytes(a, s, p, exact) : 0;
  const bool inner_off = s.inner_tier() != Tier::kResident;
  if (!in_off && !inner_off) return 0;
  Segment t = s;
  t.backward = p;
  int64_t open = 0;  // the most open while one sub-segment runs
  if (!exact) {
    // Keyed by what is counted: -1 the input, -2 the inner checkpoints, -3 both.
    const auto key = Analysis::grad_key(t, in_off && inner_off ? -3 : in_off ? -1 : -2);
    auto hit = a.grad_strips.find(key);
    if (hit == a.grad_strips.end()) {
      hit = a.grad_strips.emplace(key, Offloading::grad_strip_bytes(a, t, p, in_off, inner_off))
                .first;
    }
    open = hit->second;
  } else {
    std::vector<NodeId> counted = inner_off ? inner : std::vector<NodeId>{};
    if (in_off) counted.insert(counted.begin(), s.input);
    std::map<NodeId, int64_t> by_reader;  // each sub-segment's sum over the leaves it adds to
    for (NodeId v : counted) {
      const Shape& vs = a.shapes[static_cast<size_t>(v)];
      const auto& adds = a.additions_by_pass(t, v);
      const Partition* reader = v == s.input ? &plan.segments[i - 1].backward : nullptr;
      const std::vector<int64_t> peaks = Offloading::open_bytes(
          off.inner_grad_blocks(a, t, v, adds.passes, reader), adds.passes, vs.channels * a.eb);
      for (size_t k = 0; k < peaks.size(); ++k) by_reader[adds.readers[k]] += peaks[k];
    }
    for (const auto& [reader, bytes] : by_reader) open = std::max(open, bytes);
  }
  if (!inner_off) return open;
  int64_t share = 0;
  for (NodeId v : inner) {
    const Shape& vs = a.shapes[static_cast<size_t>(v)];
    const Partition shares = share_partition(p, out, vs);
    auto widest = [](const std::vector<int64_t>& e) {
      int64_t w = 0;
      for (size_t j = 0; j + 1 < e.size(); ++j) w = std::max(w, e[j + 1] - e[j]);
      return w;
    };
    share = std::max(share, widest(shares.y_edges) * widest(shares.x_edges) * vs.channels * a.eb);
  }
  return open + 3 * share;
}

// The fewest tiles whose pass fits what the budget leaves (0: the options fix the partition;
// 1 without a budget; -1: none fits).
int64_t SegmentBuild::choose(bool backward) const {
  const int64_t fixed_bytes = backward ? bwd_fixed : fwd_fixed;
  if (a.options.tiles_y || a.options.tile_size) return 0;  // fixed partition below
  if (budget <= 0) return 1;
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
    // Unless offloading is ruled out, the store takes the kept rows (the offloading
    // search, or choose_counts). Where it is: more rows hold less each but keep more in all,
    // so the fewest rows where both fit, if any (doubling from `lo`, then halving back to the
    // fewest). Not for `auto`: VGG-16 4096² in 2 GiB measured 360.0 s a step so (52 rows,
    // resident) against 347.8 with its kept rows on disk (37 rows; bench/NOTES.md, session
    // 31), within this machine's noise, and a resident plan found here would skip the
    // offloading search.
    if (a.options.offload != PlanOptions::Offload::kNever) return -1;
    const int64_t most = max_count(strategy, out);
    int64_t below = lo, n = lo;
    do {
      below = n;
      n = std::min(2 * n, most);
    } while (!fits(n, backward, avail, true) && n < most);
    if (!fits(n, backward, avail, true)) return -1;
    while (below + 1 < n) {
      const int64_t mid = below + (n - below) / 2;
      if (fits(mid, backward, avail, true))
        n = mid;
      else
        below = mid;
    }
    return n;
  }
  return lo;
}

// Barriers: whole where the segment fits as one tile both ways (they run as LibTorch runs
// them), else as sub-segments where the inner checkpoints fit (resident, else in the store
// where the plan offloads), else recomputed in rounds.
void SegmentBuild::place_barriers() {
  const bool one_tile = nf == 0 ? fixed_partition().tiles() == 1 : nf == 1 && nb == 1;
  if (!barriers) return;
  if (a.options.whole_barriers && one_tile) {
    s.scheme = WholeBarriers{};
    return;
  }
  s.scheme = RecomputeRounds{};
  if (!a.options.inner_checkpoints) return;
  std::vector<Tier> tiers_to_try;
  if (!off.force_inner) tiers_to_try.push_back(Tier::kResident);
  if (off.inner_tier != Tier::kResident) tiers_to_try.push_back(off.inner_tier);
  for (Tier t : tiers_to_try) {
    SubSegments sub;
    sub.tier = t;
    s.scheme = std::move(sub);
    std::tie(inner_fwd, inner_bwd) = inner_extra(t);
    fwd_fixed += inner_fwd;
    bwd_fixed += inner_bwd;
    const int64_t inner_nf = choose(false), inner_nb = choose(true);
    if (inner_nf >= 0 && inner_nb >= 0) {
      nf = inner_nf;
      nb = inner_nb;
      // Offloaded ones stay in the store from the forward to the backward.
      s.as<SubSegments>()->keep_inner = t != Tier::kResident;
      return;
    }
    // No room for them: the next tier, or recompute the barriers' inputs.
    s.scheme = RecomputeRounds{};
    fwd_fixed -= inner_fwd;
    bwd_fixed -= inner_bwd;
    inner_fwd = inner_bwd = 0;
  }
}

// DELTA per inner checkpoint (PlanOptions::drop_inner): an offloaded inner checkpoint is dropped
// where recomputing it costs less than moving it (written, read by the forward and the backward,
// its gradient written and read: five passes, as finish_candidate prices it). A barrier's input
// is recomputed in the one sub-segment that reads it (its statistic pass, a round of sums for
// each of its barriers), a fork in each sub-segment that reads it (dropped_cost). In order,
// each against the set dropped before it. resnet50 train-mode BN at 4096² in 2 GiB moved 116 GiB
// a step through inner checkpoints on disk with every one kept.
void SegmentBuild::drop_inner() {
  using Drop = PlanOptions::DropInner;
  const Drop mode = a.options.drop_inner;
  SubSegments* sub = s.as<SubSegments>();
  if (sub == nullptr || mode == Drop::kNever) return;
  if (mode == Drop::kPriced && sub->tier == Tier::kResident) return;
  const double per_byte = 5.0 * a.options.flops_per_byte_moved;
  const bool offloaded = s.inner_tier() != Tier::kResident;
  double extra = 0;
  // In order. (Forks first, then barrier inputs, was priced worse at 4096², at a CPU's prices
  // and at a GPU's: 158 against 147 s, 5.2 against 4.6 s; bench/NOTES.md session 34.)
  for (NodeId v : inner) {
    sub->dropped.push_back(v);
    const double more = dropped_cost(a, s, offloaded).total();
    const bool worth = mode == Drop::kAlways
                           ? more < kNever
                           : more - extra < per_byte * static_cast<double>(a.bytes(v));
    if (worth) {
      extra = more;
    } else {
      sub->dropped.pop_back();
    }
  }
  if (sub->dropped.empty()) return;
  // Fewer inner checkpoints held: the fixed bytes and the counts again.
  fwd_fixed -= inner_fwd;
  bwd_fixed -= inner_bwd;
  inner = kept_inner(a.graph, s);
  inner_bytes = 0;
  for (NodeId v : inner) inner_bytes += a.bytes(v);
  std::tie(inner_fwd, inner_bwd) = inner_extra(sub->tier);
  fwd_fixed += inner_fwd;
  bwd_fixed += inner_bwd;
  const int64_t f = choose(false), b = choose(true);
  if (f >= 0 && b >= 0) std::tie(nf, nb) = std::pair{f, b};
}

int64_t SegmentBuild::finest_bytes() const {
  const Partition finest_partition = partition_for(strategy, out, max_count(strategy, out));
  const auto finest = a.tile_cost(s.input, s.output, middle_tile(finest_partition));
  const int64_t finest_open = open_bytes(finest_partition, false);
  int64_t finest_here =
      std::max(fwd_fixed + finest.forward_bytes, bwd_fixed + finest_open + finest.backward_bytes);
  if (s.is<SharedRows>() && s.shared_tier() == Tier::kResident && !fits_budget() &&
      a.options.offload == PlanOptions::Offload::kNever) {
    // Resident shared rows keep more with more rows: the finest partition is not the
    // smallest. The least over row counts in powers of two (asked only where it does not fit,
    // for the message that says what would; only where the store cannot take the kept rows,
    // as in choose: in every failing build of auto's resident search it made planning
    // VGG-16 on a 200000² slide 25% slower).
    finest_here = kUnfit;
    for (int64_t n = 1;; n = std::min(2 * n, max_count(strategy, out))) {
      const Partition p = partition_for(strategy, out, n);
      const auto tc = worst_tile(a, s, p);
      finest_here =
          std::min(finest_here, std::max(fwd_fixed + tc.forward_bytes,
                                         bwd_fixed + open_bytes(p, false) + tc.backward_bytes) +
                                    tc.shared_kept_bytes);
      if (n == max_count(strategy, out)) break;
    }
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
    // Skewed rows (balanced_rows), where they hold no more than even ones.
    Partition b = s.backward;
    b.y_edges = balanced_rows(a, s.input, s.output, s.backward.rows(), /*shared=*/true);
    const auto even = worst_tile(a, s, s.backward), skewed = worst_tile(a, s, b);
    if (b.rows() == s.backward.rows() && std::max(skewed.forward_bytes, skewed.backward_bytes) <=
                                             std::max(even.forward_bytes, even.backward_bytes)) {
      s.forward = s.backward = b;
    }
  } else if (row_strategy(strategy) && !s.is<SharedRows>()) {
    // Balanced rows, unless balancing by input rows makes the heaviest row heavier or
    // changes the row count (when every row needs the whole input, fewer rows read as
    // little; a count the caller or the budget search chose is kept).
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
}

std::pair<MemoryBreakdown, MemoryBreakdown> SegmentBuild::account(PlanCost& cost) {
  const auto fc = worst_tile(a, s, s.forward);
  const auto bc = worst_tile(a, s, s.backward);
  s.forward_working_bytes = fc.forward_bytes;
  s.backward_working_bytes = bc.backward_bytes;
  s.halo_flops = fc.flops * s.forward.tiles();
  cost.compute += static_cast<double>(fc.flops) * static_cast<double>(s.forward.tiles()) +
                  3.0 * static_cast<double>(bc.flops) * static_cast<double>(s.backward.tiles());
  cost.tiles +=
      a.options.flops_per_tile * static_cast<double>(s.forward.tiles() + s.backward.tiles());
  cost += barrier_cost(a, s);
  if (auto* rows = s.as<SharedRows>()) {
    // What the rows keep, from this forward to this backward; and the concatenations that
    // join inherited and computed rows, in the forward and in the backward's recompute.
    rows->kept_bytes = fc.shared_kept_bytes;
    if (rows->kept_tier != Tier::kResident) {
      cost.moved += a.options.flops_per_byte_moved * 2.0 * static_cast<double>(rows->kept_bytes);
    }
    cost.copies += 2.0 * a.options.flops_per_byte_copied * joined_bytes(a, s);
  }
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
  if (s.inner_tier() != Tier::kResident) {
    for (NodeId v : inner) {
      Partition blocks = off.inner_blocks(a, s, v);
      Partition grad_blocks = off.inner_grad_blocks(a, s, v, a.additions(s, v));
      SubSegments& sub = *s.as<SubSegments>();
      sub.blocks.push_back(std::move(blocks));
      sub.grad_blocks.push_back(std::move(grad_blocks));
    }
  }
  return {fwd_at, bwd_at};
}

}  // namespace

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
      cost.moved += a.options.flops_per_byte_moved * 5.0 *
                    static_cast<double>(a.bytes(s.output) - s.resident_bytes);
    }
  }
  // Offloaded inner checkpoints: each written once and read about twice (the forward's later
  // sub-segments, the backward's), its gradient written and read once.
  for (const Segment& s : plan.segments) {
    if (s.inner_tier() == Tier::kResident) continue;
    for (NodeId v : kept_inner(a.graph, s)) {
      cost.moved += a.options.flops_per_byte_moved * 5.0 * static_cast<double>(a.bytes(v));
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
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    SegmentBuild b(a, off, strategy, plan, i, bounds, tiers, held);
    b.choose_counts();
    finest_peak = std::max(finest_peak, b.finest_bytes());
    if (!b.fits_budget()) unfit = true;
    b.set_partitions();
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
  if (a.options.keep_graphs && budget > 0 && peak <= budget && !unfit) {
    cost -= keep_graphs(a, plan, passes, budget);
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

}  // namespace tessel::core::planning
