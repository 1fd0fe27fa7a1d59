// Shared rows (SharedRows, plan/plan.h: LR-CNN's 2PS) in the planner: where the kept rows go,
// the row counts where they fit, skewed rows, and what the scheme adds to a segment's price.
// Chosen for Strategy::kRowsShared's segments without barriers (SegmentBuild's constructor).
// The executor's side is exec/schemes/shared_rows.cpp.
#include <algorithm>

#include "core/plan/cost_model.h"
#include "core/plan/geometry.h"
#include "core/plan/segment_build.h"

namespace tessel::core::planning {

double joined_bytes(const Analysis& a, const Segment& s) {
  return 3.0 * static_cast<double>(worst_tile(a, s, s.forward).shared_kept_bytes) +
         static_cast<double>(a.bytes(s.output));
}

PlanCost scheme_cost(const Analysis& a, const Segment& s, const SharedRows& rows) {
  // What the rows keep, moved to the store and back where it is not resident; and the
  // concatenations that join inherited and computed rows, in the forward and in the backward's
  // recompute.
  PlanCost c;
  if (rows.kept_tier != Tier::kResident) {
    c.moved = a.options.prices.per_byte_moved * 2.0 * static_cast<double>(rows.kept_bytes);
  }
  c.copies = 2.0 * a.options.prices.per_byte_copied * joined_bytes(a, s);
  return c;
}

// Kept rows where the budget has no room for them (or the options force it): in the store, as
// offloaded inner checkpoints are (written behind the forward, read ahead in the backward,
// within the store's window).
void SegmentBuild::store_kept_rows() {
  s.as<SharedRows>()->kept_tier = off.inner_tier;
  const int64_t more_fwd = off.in_use(in_off || out_off, true, kUnfit) - store_fwd;
  const int64_t more_bwd = off.in_use(true, true, kUnfit) - store_bwd;
  store_fwd += more_fwd;
  store_bwd += more_bwd;
  fwd_fixed += more_fwd;
  bwd_fixed += more_bwd;
}

// The row count where resident kept rows fit with the rows' working set, past `lo` (the
// fewest rows whose working set fits `avail`); -1 where none does.
int64_t SegmentBuild::shared_rows_count(int64_t lo, bool backward, int64_t avail) const {
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

int64_t SegmentBuild::shared_rows_finest() const {
  // Resident shared rows keep more with more rows: the finest partition is not the
  // smallest. The least over row counts in powers of two (asked only where it does not fit,
  // for the message that says what would; only where the store cannot take the kept rows,
  // as in choose: in every failing build of auto's resident search it made planning
  // VGG-16 on a 200000² slide 25% slower).
  int64_t finest_here = kUnfit;
  for (int64_t n = 1;; n = std::min(2 * n, max_count(strategy, out))) {
    const Partition p = partition_for(strategy, out, n);
    const auto tc = worst_tile(a, s, p);
    finest_here =
        std::min(finest_here, std::max(fwd_fixed + tc.forward_bytes,
                                       bwd_fixed + open_bytes(p, false) + tc.backward_bytes) +
                                  tc.shared_kept_bytes);
    if (n == max_count(strategy, out)) break;
  }
  return finest_here;
}

void SegmentBuild::balance_shared_rows() {
  // Skewed rows (balanced_rows), where they hold no more than even ones.
  Partition b = s.backward;
  b.y_edges = balanced_rows(a, s.input, s.output, s.backward.rows(), /*shared=*/true);
  const auto even = worst_tile(a, s, s.backward), skewed = worst_tile(a, s, b);
  if (b.rows() == s.backward.rows() && std::max(skewed.forward_bytes, skewed.backward_bytes) <=
                                           std::max(even.forward_bytes, even.backward_bytes)) {
    s.forward = s.backward = b;
  }
}

}  // namespace tessel::core::planning
