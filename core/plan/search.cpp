#include "core/plan/search.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "core/plan/offload_sizing.h"

namespace tessel::core::planning {

Search::Search(const Analysis& a, const PlanOptions& options, std::vector<NodeId> candidates)
    : a_(a), options_(options), candidates_(std::move(candidates)) {}

Candidate Search::refine(Candidate best, const Offloading& off) {
  const Analysis& a = a_;
  const std::vector<NodeId>& candidates = candidates_;
  Candidate& smallest = smallest_;
  const Tier tier = best.tiers.empty() ? Tier::kResident : best.tiers.front();
  auto try_set = [&](std::vector<NodeId> set, Candidate& next) {
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
    if (set == best.set) return;
    Candidate c = build(a, best.strategy, set, std::vector<Tier>(set.size() + 1, tier), off);
    if (c.needed < smallest.needed) smallest = c;
    if (c.cost < next.cost) next = std::move(c);
  };
  constexpr int kMaxRounds = 64;
  for (int round = 0; round < kMaxRounds; ++round) {
    Candidate next;
    for (size_t k = 0; k < candidates.size(); ++k) {
      const NodeId v = candidates[k];
      std::vector<NodeId> set = best.set;
      const auto at = std::find(set.begin(), set.end(), v);
      if (at == set.end()) {
        set.push_back(v);
        try_set(set, next);
        continue;
      }
      const size_t i = static_cast<size_t>(at - set.begin());
      set.erase(set.begin() + static_cast<ptrdiff_t>(i));
      try_set(set, next);
      for (const size_t j : {k - 1, k + 1}) {
        if (j >= candidates.size()) continue;  // k - 1 wraps for k = 0
        std::vector<NodeId> moved = best.set;
        moved[i] = candidates[j];
        try_set(moved, next);
      }
    }
    // Only a clear gain: the cost is a model, and chasing its rounding noise moves plans.
    if (!(next.cost < best.cost * (1.0 - 1e-6))) break;
    best = std::move(next);
  }
  return best;
}

Candidate bring_back_resident(const Analysis& a, Candidate c, const Offloading& off) {
  if (c.cost == kNever) return c;
  const std::vector<NodeId> set = c.set;
  std::vector<Tier> tiers = c.tiers;
  std::vector<size_t> order(set.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return a.bytes(set[x]) > a.bytes(set[y]); });
  for (size_t i : order) {
    const Tier was = tiers[i];
    if (was == Tier::kResident) continue;
    tiers[i] = Tier::kResident;
    Candidate r = build(a, c.strategy, set, tiers, off);
    if (r.cost <= c.cost) {
      c = std::move(r);
    } else {
      tiers[i] = was;
    }
  }
  return c;
}

Candidate Search::search(const std::vector<Strategy>& strategies,
                         const std::vector<std::vector<NodeId>>& sets, bool offloading,
                         bool bounded, const Offloading& off) {
  const Analysis& a = a_;
  const PlanOptions& options = options_;
  using Offload = PlanOptions::Offload;
  Candidate best;
  for (Strategy s : strategies) {
    Candidate best_here;  // with this strategy
    for (const auto& set : sets) {
      std::vector<Tier> tiers(set.size() + 1, Tier::kResident);
      if (options.offload == Offload::kHost || options.offload == Offload::kDisk) {
        std::fill(tiers.begin(), tiers.end(),
                  options.offload == Offload::kHost ? Tier::kHost : Tier::kDisk);
      }
      Candidate c;
      if (!offloading) {
        c = build(a, s, set, tiers, off);
      } else if (!set.empty()) {
        std::fill(tiers.begin(), tiers.end(), options.auto_tier);
        c = build(a, s, set, tiers, off);
        if (!bounded) c = bring_back_resident(a, std::move(c), off);
      } else {
        continue;
      }
      if (c.cost < best_here.cost) best_here = c;
      if (c.needed < smallest_.needed) smallest_ = c;
    }
    if (offloading && bounded) {
      best_here = bring_back_resident(a, std::move(best_here), off);
    }
    if (!offloading && !options_.overrides.checkpoints && !candidates_.empty() &&
        best_here.cost != kNever) {
      best_here = refine(std::move(best_here), off);
    }
    if (best_here.cost < best.cost) best = std::move(best_here);
  }
  return best;
}

std::vector<std::vector<NodeId>> checkpoint_sets(const Analysis& a,
                                                 const std::vector<NodeId>& candidates) {
  const Graph& graph = a.graph;
  std::vector<std::vector<NodeId>> sets;
  if (a.options.overrides.checkpoints) {
    for (NodeId v : *a.options.overrides.checkpoints) {
      if (std::find(candidates.begin(), candidates.end(), v) == candidates.end()) {
        throw Error("node " + std::to_string(v) + " (" +
                    (v >= 0 && v < graph.size() ? graph.node(v).name : std::string("?")) +
                    ") cannot be a checkpoint: it must be a tiled layer that no residual edge "
                    "skips over, before the last tiled layer");
      }
    }
    std::vector<NodeId> sorted = *a.options.overrides.checkpoints;
    std::sort(sorted.begin(), sorted.end());
    sets.push_back(sorted);
    return sets;
  }
  std::set<int64_t> thresholds{0};
  for (NodeId v : candidates) thresholds.insert(a.bytes(v));
  for (int64_t t : thresholds) {
    std::vector<NodeId> set;
    for (NodeId v : candidates) {
      if (a.bytes(v) <= t) set.push_back(v);
    }
    sets.push_back(set);
  }
  return sets;
}

std::vector<int64_t> store_windows(const PlanOptions& options, int64_t target) {
  if (options.overrides.window_bytes > 0) return {options.overrides.window_bytes};
  if (target <= 0) return {int64_t{64} << 20};
  std::vector<int64_t> windows;
  for (int64_t share : {4, 8, 16}) windows.push_back(std::max<int64_t>(target / share, 4096));
  return windows;
}

Offloading offloading_with(const PlanOptions& options, int64_t window, bool offloading) {
  Offloading o;
  o.inner_tier =
      options.overrides.inner_tier.value_or(offloading ? options.auto_tier : Tier::kResident);
  o.force_inner =
      options.overrides.inner_tier.has_value() && *options.overrides.inner_tier != Tier::kResident;
  o.window_bytes = window;
  o.block_bytes = options.overrides.block_bytes > 0 ? options.overrides.block_bytes
                                                    : default_block_bytes(window);
  o.partly_resident = options.offload == PlanOptions::Offload::kAuto;
  return o;
}

std::pair<Candidate, Offloading> Search::search_windows(
    const std::vector<Strategy>& strategies, const std::vector<std::vector<NodeId>>& sets,
    bool offloading, bool bounded, const std::vector<int64_t>& windows,
    const OffloadPrices& prices) {
  const Analysis& a = a_;
  const PlanOptions& options = options_;
  std::vector<Candidate> by_window(windows.size());
  for (size_t w = 0; w < windows.size(); ++w) {
    const Offloading o = offloading_with(options, windows[w], offloading);
    by_window[w] = search(strategies, sets, offloading, bounded, o);
  }
  for (Candidate& c : by_window) {
    if (!bounded || c.cost == kNever || prices.disk_free_bytes < 0) continue;
    Plan p = c.plan;
    p.shapes = a.shapes;
    p.element_bytes = a.eb;
    const int64_t on_disk = stored_bytes(a.graph, p, Tier::kDisk);
    if (on_disk > prices.disk_free_bytes) {
      spdlog::debug("plan: an offloading plan needs {} on disk, {} free: not taken",
                    format_bytes(on_disk), format_bytes(prices.disk_free_bytes));
      c.cost = kNever;
    }
  }
  double cheapest = kNever;
  for (size_t w = 0; w < windows.size(); ++w) {
    const Candidate& c = by_window[w];
    cheapest = std::min(cheapest, c.cost);
    if (c.cost != kNever) {
      spdlog::debug("plan: {} search, window {}: {:.4g} s a step at the prices, {} segments",
                    offloading ? "offloading" : "resident", format_bytes(windows[w]),
                    c.cost * prices.seconds_per_flop, c.plan.segments.size());
    }
  }
  for (size_t w = 0; w < windows.size(); ++w) {
    if (cheapest != kNever && by_window[w].cost <= kLargerWindowWorth * cheapest) {
      return {std::move(by_window[w]), offloading_with(options, windows[w], offloading)};
    }
  }
  return {Candidate{}, offloading_with(options, windows.back(), offloading)};
}

std::vector<OffloadDecision> offload_or_recompute(const Analysis& a, Candidate& best,
                                                  const Offloading& off,
                                                  const OffloadPrices& prices) {
  std::vector<OffloadDecision> decisions, drops;
  count_moved_bytes(a, best.plan);
  for (bool dropped = best.plan.offloads() && a.options.offload == PlanOptions::Offload::kAuto &&
                      !a.options.overrides.checkpoints;
       dropped;) {
    dropped = false;
    decisions.clear();
    for (size_t i = 0; i < best.set.size() && !dropped; ++i) {
      if (i >= best.plan.segments.size() || best.plan.segments[i].tier == Tier::kResident) {
        continue;
      }
      std::vector<NodeId> set = best.set;
      std::vector<Tier> tiers = best.tiers;
      set.erase(set.begin() + static_cast<ptrdiff_t>(i));
      tiers.erase(tiers.begin() + static_cast<ptrdiff_t>(i));
      Candidate without = build(a, best.strategy, set, tiers, off);
      const int64_t extra = without.flops == kNever
                                ? -1
                                : static_cast<int64_t>(std::max(0.0, without.flops - best.flops));
      decisions.push_back(
          decide_offload(best.set[i], best.plan.segments[i].moved_bytes, extra, prices));
      if (!decisions.back().offload) {
        drops.push_back(decisions.back());
        best = std::move(without);
        count_moved_bytes(a, best.plan);
        dropped = true;
      }
    }
  }
  drops.insert(drops.end(), decisions.begin(), decisions.end());
  return drops;
}

}  // namespace tessel::core::planning
