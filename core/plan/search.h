// The planner's search (engine-internal): checkpoint sets, strategies and the store's windows,
// resident then offloading; the local search around the best set; DELTA's offload-or-recompute
// decisions on the chosen plan.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/plan/segment_build.h"

namespace tessel::core::planning {

// Checkpoint sets to try: the caller's, else all candidates under a size threshold, for every
// threshold.
std::vector<std::vector<NodeId>> checkpoint_sets(const Analysis& a,
                                                 const std::vector<NodeId>& candidates);

// The store's windows to try. A larger one reads further ahead into the passes whose transfers
// outlast their compute (pools, forward passes) and leaves less room for tiles, which the cost
// sees; the waits it saves it does not (a model of them from FLOPs mispredicted them: the early
// convs are memory-bound, ~10× slower than their FLOPs say). Measured on vgg-mini 4096² in
// 1 GiB on a cold disk (bench/NOTES.md, session 14): a window of 1/16 of the budget 27.5 s a
// step, 53% of the transfers hidden; 1/8 24.4 s, 68%; 1/4 21.3–23.9 s, 82–84%, for a plan whose
// cost was 1.5% above 1/16's. So the largest of 1/4, 1/8 and 1/16 whose plan costs at most 5%
// more than the cheapest (kLargerWindowWorth); small budgets, where a large window forces much
// finer tiles, keep a small one.
inline constexpr double kLargerWindowWorth = 1.05;

std::vector<int64_t> store_windows(const PlanOptions& options, int64_t target);

// The tile store's settings for a search at `window`; `offloading`: a plan that offloads
// checkpoints may offload inner checkpoints too.
Offloading offloading_with(const PlanOptions& options, int64_t window, bool offloading);

// One plan request's search over strategies, checkpoint sets and the store's windows: what every
// candidate plan shares (the request's analysis, the caller's options, the checkpoint candidates
// the local search moves) and the plan that needs the least budget so far (the error's figure
// when none fits).
class Search {
 public:
  // `candidates`: the checkpoint candidates (checkpoint_candidates before the last tiled node),
  // which the local search may add, drop or move unless the caller gives the checkpoints.
  Search(const Analysis& a, const PlanOptions& options, std::vector<NodeId> candidates);

  // One search (resident or offloading) at each of `windows`, with the caller's `options` (not
  // a.options, whose prices the offloading search sets): its cheapest plan at the largest
  // window within kLargerWindowWorth of the cheapest, with that window's store settings. An
  // offloading plan that is only cheaper (`bounded`) must fit the scratch directory: the step
  // would refuse to start where a resident plan runs (VGG-16 on a 200000² slide in 8 GiB:
  // 2.6 TiB).
  std::pair<Candidate, Offloading> search_windows(const std::vector<Strategy>& strategies,
                                                  const std::vector<std::vector<NodeId>>& sets,
                                                  bool offloading, bool bounded,
                                                  const std::vector<int64_t>& windows,
                                                  const OffloadPrices& prices);

  const Candidate& smallest() const { return smallest_; }
  const std::vector<NodeId>& candidates() const { return candidates_; }

 private:
  // The cheapest plan over strategies and checkpoint sets, every checkpoint resident or (when
  // `offloading`) the cheapest mix of tiers; smallest_ keeps the plan that needs the least budget.
  // Outside the offloading search, each
  // strategy's best set is then refined by the local search (refine).
  // `bounded` (an offloading search beside a resident plan that fits): every set with all its
  // checkpoints offloaded, but only the cheapest of them per strategy brings checkpoints back
  // (bring_back_resident builds one plan per checkpoint: for every set, strategy and window it made
  // planning VGG-16 on a 200000² slide take over 400 s).
  Candidate search(const std::vector<Strategy>& strategies,
                   const std::vector<std::vector<NodeId>>& sets, bool offloading, bool bounded,
                   const Offloading& off);
  // Threshold sets ("every candidate below a size") split a chain of large activations only by
  // keeping every smaller one too: resnet50 with batch norm at 2048² in 2 GiB ran layer1 and
  // layer2_0 as one 44-op segment in 12 rounds of recompute, because layer1's 256 MiB block
  // outputs came only with all 17 smaller ones (1.8 GiB). A local search from the best of them:
  // add, drop or move one checkpoint (to the candidate before or after it) while the plan gets
  // cheaper; every checkpoint keeps the tier the set had. Each round builds about three plans per
  // candidate.
  Candidate refine(Candidate best, const Offloading& off);

  const Analysis& a_;
  const PlanOptions& options_;  // the caller's (a_.options carry the measured prices)
  std::vector<NodeId> candidates_;
  Candidate smallest_;
};

// From `c`, its checkpoints offloaded, brings back the largest ones that still fit and make the
// plan no dearer (the room a checkpoint takes can cost finer tiles elsewhere).
Candidate bring_back_resident(const Analysis& a, Candidate c, const Offloading& off);

// DELTA: each checkpoint the chosen plan offloads stays in the tier only if moving it costs
// no more than dropping it, so that the next segment recomputes it from the previous one.
// Dropping one changes the others' halos: decide again after each drop. Returns the decisions,
// the drops first.
std::vector<OffloadDecision> offload_or_recompute(const Analysis& a, Candidate& best,
                                                  const Offloading& off,
                                                  const OffloadPrices& prices);

}  // namespace tessel::core::planning
