// LR-CNN's two-phase sharing (Strategy::kRowsShared): rows that inherit their neighbour's
// boundary rows instead of recomputing them. The regions compute every position once, and a
// step equals plain autograd (the first law) on random networks, the zoo's models, with
// checkpoints in the store and streaming reductions.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <utility>

#include "core/error.h"
#include "core/exec/gradcheck.h"
#include "core/plan/geometry.h"
#include "core/plan/planner.h"
#include "models/zoo.h"
#include "tests/core/first_law.h"

namespace tessel::core {
namespace {

using test::fixed_tiles;
using test::kTolerance;
using test::random_image;

// The segments of `plan` that run shared rows with more than one row: a check over a plan
// without them checks nothing.
int shared_segments(const Plan& plan) {
  int n = 0;
  for (const Segment& s : plan.segments) n += s.is<SharedRows>() && s.forward.rows() > 1;
  return n;
}

// Every node's computed rows over the rows of a partition: disjoint, in order, together the
// rows the whole output needs; each row holds what it inherited (the previous row's kept rows)
// then what it computed; what it keeps lies in what it holds.
TEST(SharedRows, RowsComputeEveryPositionOnce) {
  int checked = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const Graph g = models::random_network(seed, 17, 2);
    std::mt19937_64 rng(seed);
    const Shape in{2, 17 + static_cast<int64_t>(rng() % 40), 17 + static_cast<int64_t>(rng() % 40)};
    const std::vector<Shape> shapes = g.shapes(in);
    std::vector<NodeId> candidates = checkpoint_candidates(g);
    const NodeId input =
        candidates.empty() || rng() % 2 ? 0 : candidates[rng() % candidates.size()];
    NodeId output = input;
    for (NodeId v = input + 1; v < g.size() && g.node(v).spatial(); ++v) output = v;
    if (output == input) continue;
    const Shape& out = shapes[static_cast<size_t>(output)];
    const int64_t rows = 1 + static_cast<int64_t>(rng() % std::min<int64_t>(out.height, 7));
    const Partition p = Partition::even(out.height, out.width, rows, 1);
    const SharedRow whole = shared_row(g, shapes, input, output, {0, out.height});
    std::vector<int64_t> next(static_cast<size_t>(output) + 1, 0);  // each node's next row
    std::vector<Region> kept(static_cast<size_t>(output) + 1);
    for (int64_t r = 0; r < p.rows(); ++r) {
      const SharedRow row = shared_row(g, shapes, input, output, p.tile(r).y);
      for (NodeId v = input + 1; v <= output; ++v) {
        const auto i = static_cast<size_t>(v);
        const Region& c = row.computed[i];
        const Region& h = row.held[i];
        if (!c.empty()) {
          EXPECT_EQ(c.y.begin, next[i]) << "seed " << seed << " node " << v << " row " << r;
          next[i] = c.y.end;
          EXPECT_EQ(c.x, whole.computed[i].x);
          EXPECT_EQ(h.y.end, c.y.end);
        }
        // The inherited rows are exactly the previous row's kept rows.
        if (!h.empty()) {
          const Window inherited{h.y.begin, c.empty() ? h.y.end : c.y.begin};
          if (!inherited.empty()) {
            EXPECT_EQ(inherited, kept[i].y) << "seed " << seed << " node " << v << " row " << r;
          }
        }
        if (!row.kept[i].empty()) {
          EXPECT_EQ(intersect(row.kept[i], h), row.kept[i]) << "seed " << seed << " node " << v;
        }
        kept[i] = row.kept[i];
      }
      ++checked;
    }
    for (NodeId v = input + 1; v <= output; ++v) {
      EXPECT_EQ(next[static_cast<size_t>(v)], whole.computed[static_cast<size_t>(v)].y.end)
          << "seed " << seed << " node " << v;
    }
  }
  EXPECT_GT(checked, 100);
}

struct Case {
  Graph graph;
  Shape input;
  PlanOptions options;
};

// A random network in float64 with random weights, a size that rarely divides the rows, 1–6
// shared rows, random checkpoints, a streaming reduction three times in four.
Case random_case(uint64_t seed) {
  std::mt19937_64 rng(seed * 6007);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Case c{models::random_network(seed, 17, 2), {}, {}};
  c.graph.module().to(test_device(), at::kDouble);
  randomise(c.graph, seed);
  c.input = {2, pick(17, 45), pick(17, 45)};
  c.options = fixed_tiles(Strategy::kRowsShared, pick(2, 6), 1);
  c.options.streaming_reduction = pick(0, 3) != 0;
  c.options.input_gradient = pick(0, 1) == 1 || !test::has_parameters(c.graph);
  std::vector<NodeId> ckpts;
  for (NodeId v : checkpoint_candidates(c.graph)) {
    if (pick(0, 2) == 0) ckpts.push_back(v);
  }
  c.options.overrides.checkpoints = ckpts;
  return c;
}

Plan plan_for(Case& c, int64_t budget = 0) {
  try {
    return make_plan(c.graph, c.input, budget, c.options);
  } catch (const tessel::Error&) {
    c.options.overrides.checkpoints.reset();  // a checkpoint after the last tiled layer
    return make_plan(c.graph, c.input, budget, c.options);
  }
}

// One step of `plan` against plain autograd on a random image drawn from `image_seed`; fails
// naming the seed, the input and the plan. Returns the comparison.
Comparison expect_plain(Case& c, const Plan& plan, uint64_t seed, uint64_t image_seed) {
  EXPECT_TRUE(tiles(plan)) << "the check must tile\n" << to_string(plan, c.graph);
  StepOptions so;
  so.input_gradient = c.options.input_gradient;
  const auto r = compare_with_plain(
      c.graph, plan, random_image(2, c.input.height, c.input.width, image_seed), seed, so);
  EXPECT_LT(r.worst(), kTolerance) << "seed " << seed << " input " << to_string(c.input) << "\n"
                                   << to_string(plan, c.graph) << r.to_string();
  return r;
}

TEST(SharedRows, RandomNetworksMatchPlainAutograd) {
  int shared = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    Case c = random_case(seed);
    const Plan plan = plan_for(c);
    shared += shared_segments(plan);
    expect_plain(c, plan, seed, seed);
  }
  EXPECT_GT(shared, 60) << "too few plans ran shared rows";
}

// The checkpoints between segments in the store (2PS-H with offload): on disk and in host
// memory, each segment's input read and its gradient added by the rows' own regions; and the
// rows each row keeps for the next in the store too (written in the forward, read back in the
// backward, one block per row and node).
TEST(SharedRows, OffloadedCheckpointsMatchPlainAutograd) {
  int shared = 0, stored = 0;
  for (uint64_t seed = 1; seed <= 16; ++seed) {
    Case c = random_case(seed + 100);
    c.options.offload = seed % 2 ? PlanOptions::Offload::kDisk : PlanOptions::Offload::kHost;
    // The kept rows in the store too (SharedRows::kept_tier), in one case in four in host memory.
    if (seed % 4 != 0) c.options.overrides.inner_tier = seed % 4 == 1 ? Tier::kHost : Tier::kDisk;
    // Small blocks: many per row, the rows' regions cut across them.
    c.options.overrides.window_bytes = 4096 * static_cast<int64_t>(1 + seed % 4);
    c.options.overrides.block_bytes = 512 * static_cast<int64_t>(1 + seed % 3);
    const Plan plan = plan_for(c);
    shared += shared_segments(plan);
    const Comparison r = expect_plain(c, plan, seed, seed + 100);
    if (plan.offloads() && c.options.offload == PlanOptions::Offload::kDisk) {
      EXPECT_GT(r.offload_bytes, 0) << to_string(plan, c.graph);
    }
    for (const Segment& s : plan.segments) {
      if (c.options.overrides.inner_tier && s.is<SharedRows>() && s.shared_bytes() > 0) {
        EXPECT_EQ(s.shared_tier(), *c.options.overrides.inner_tier);
        ++stored;
      }
    }
  }
  EXPECT_GT(shared, 16);
  EXPECT_GE(stored, 8) << "too few plans kept their rows in the store";
}

// Shared rows that keep their graphs (where the budget leaves room): the rows' graphs chained
// through their kept rows, one backward over all of them. Exact whether a plan's segments keep
// them or not.
TEST(SharedRows, SegmentsThatKeepTheirGraphsMatchPlainAutograd) {
  int kept = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    Case c = random_case(seed + 300);
    c.options.overrides.keep_graphs = true;
    const Plan plan = plan_for(c, int64_t{1} << 40);
    for (const Segment& s : plan.segments)
      kept += s.is<SharedRows>() && s.keeps_graph() && s.forward.rows() > 1;
    expect_plain(c, plan, seed, seed + 300);
  }
  EXPECT_GT(kept, 20) << "too few shared segments kept their graphs";
}

// The zoo's networks (residual joins, strided convs, pools, frozen batch norm) at sizes that
// divide nothing, in float64.
TEST(SharedRows, ZooModelsMatchPlainAutograd) {
  for (const char* name : {"vgg-mini", "resnet18", "tiny"}) {
    models::ModelOptions mo;
    mo.in_channels = 3;
    mo.classes = 3;
    Graph g = models::build_model(name, mo);
    g.module().to(test_device(), at::kDouble);
    randomise(g, 7);
    const Shape in{3, 77, 69};
    PlanOptions o = fixed_tiles(Strategy::kRowsShared, 4, 1);
    o.input_gradient = true;
    const Plan plan = make_plan(g, in, 0, o);
    ASSERT_GT(shared_segments(plan), 0) << name << "\n" << to_string(plan, g);
    StepOptions so;
    so.input_gradient = true;
    const auto r = compare_with_plain(g, plan, random_image(3, in.height, in.width, 7), 7, so);
    EXPECT_LT(r.worst(), kTolerance) << name << "\n" << to_string(plan, g) << r.to_string();
  }
}

// A residual join whose inputs a row holds in two pieces (the rows that follow from earlier
// rows, and its own): its first rows read copies of the seams (core/exec/shared_row.cpp RowsTap,
// whose backward adds their gradient into the rest's), the others each input where it lies,
// misaligned by a row between the two inputs. At 2 to 14 rows a step.
TEST(SharedRows, JoinsOfRowsThatFollowFromEarlierRowsMatchPlainAutograd) {
  Graph g(2);
  const NodeId p = g.relu(g.conv(g.input(), ConvSpec(2, 3, 3).padding(1)));
  const NodeId q = g.relu(g.conv(p, ConvSpec(3, 3, 3).padding(1)));
  const NodeId joined = g.add(p, q);
  models::ModelOptions mo;
  mo.classes = 3;
  models::add_head(g, g.conv(joined, ConvSpec(3, 2, 3).padding(1)), mo);
  g.module().to(test_device(), at::kDouble);
  randomise(g, 11);
  for (int64_t rows : {2, 3, 5, 7, 9, 12, 14}) {
    const Shape in{2, 29, 23};
    PlanOptions o = fixed_tiles(Strategy::kRowsShared, rows, 1);
    o.input_gradient = true;
    const Plan plan = make_plan(g, in, 0, o);
    ASSERT_GT(shared_segments(plan), 0) << to_string(plan, g);
    StepOptions so;
    so.input_gradient = true;
    const auto r = compare_with_plain(g, plan, random_image(2, in.height, in.width, 11), 11, so);
    EXPECT_LT(r.worst(), kTolerance) << rows << " rows\n" << to_string(plan, g) << r.to_string();
  }
}

// Each position is computed once: the plan's forward FLOPs are plain's (OverL's rows are not).
TEST(SharedRows, ForwardFlopsArePlains) {
  models::ModelOptions mo;
  mo.in_channels = 3;
  const Graph g = models::build_model("vgg-mini", mo);
  const Shape in{3, 2048, 2048};
  PlanOptions o;
  o.overrides.tiles_y = 16;
  o.strategy = Strategy::kRowsShared;
  const Plan shared = make_plan(g, in, 0, o);
  o.strategy = Strategy::kRows;
  const Plan overl = make_plan(g, in, 0, o);
  EXPECT_LE(shared.tiled_flops, shared.plain_flops * 101 / 100);
  EXPECT_GE(shared.tiled_flops, shared.plain_flops * 99 / 100);
  EXPECT_GT(overl.tiled_flops, shared.tiled_flops * 101 / 100) << to_string(overl, g);
}

// The checkpoint search prices the graphs a plan keeps: shared rows at vgg-mini 2048² in 1 GiB
// split where later segments keep their graphs (as grid and rows do), where priced without them
// they ran one 31-op segment that kept none and recomputed all of it (6.84 s a step on 2 cores
// against grid's 6.01, bench/NOTES.md).
TEST(SharedRows, TheSearchPricesTheGraphsTheyKeep) {
  const Graph g = models::build_model("vgg-mini");
  PlanOptions o;
  o.strategy = Strategy::kRowsShared;
  const Plan plan = make_plan(g, {3, 2048, 2048}, int64_t{1} << 30, o);
  int kept = 0;
  for (const Segment& s : plan.segments) kept += s.keeps_graph();
  EXPECT_GT(kept, 0) << to_string(plan, g);
  // A step that recomputes every segment pays four forwards; kept graphs pay less.
  EXPECT_LT(plan.cost.compute, 4.0 * static_cast<double>(plan.plain_flops)) << to_string(plan, g);
  EXPECT_GT(plan.cost.copies, 0) << "shared rows' concatenations are priced";
}

// Auto takes the cheapest of the three strategies at the planner's prices: with its copies free,
// 2PS (which recomputes no halo) is the cheapest and auto takes it; at the default price of a
// copied byte, whichever strategy auto takes costs no more than each one alone.
TEST(SharedRows, AutoChoosesAmongGridRowsAndSharedRows) {
  const Graph g = models::build_model("vgg-mini");
  const Shape in{3, 1024, 2048};
  const int64_t budget = int64_t{160} << 20;
  for (const double copied : {0.0, PlanOptions{}.prices.per_byte_copied}) {
    PlanOptions o;
    o.prices.per_byte_copied = copied;
    const Plan chosen = make_plan(g, in, budget, o);
    double cheapest = std::numeric_limits<double>::infinity();
    Strategy best = Strategy::kAuto;
    for (Strategy s : {Strategy::kGrid, Strategy::kRows, Strategy::kRowsShared}) {
      o.strategy = s;
      const Plan p = make_plan(g, in, budget, o);
      if (p.cost.total() < cheapest) std::tie(cheapest, best) = std::pair{p.cost.total(), s};
    }
    EXPECT_LE(chosen.cost.total(), cheapest * (1 + 1e-9)) << to_string(chosen, g);
    if (copied == 0) {
      EXPECT_EQ(best, Strategy::kRowsShared);
      EXPECT_EQ(chosen.strategy, Strategy::kRowsShared) << to_string(chosen, g);
    }
  }
}

}  // namespace
}  // namespace tessel::core
