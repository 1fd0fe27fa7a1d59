// Attention pooling (core/exec/attention.h) streamed over the tiles of the last segment: outputs,
// every parameter's gradient and the image's gradient equal plain autograd over the whole
// feature map in float64, gated and not, with one branch and one per class, for grid and rows at
// sizes that do not divide the tiles, with offloaded checkpoints, kept graphs and a barrier in
// the same segment; and the plain form is Ilse et al.'s formula.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/device/device.h"
#include "core/error.h"
#include "core/exec/attention.h"
#include "core/exec/executor.h"
#include "core/exec/gradcheck.h"
#include "core/plan/planner.h"
#include "core/plan/split.h"
#include "core/tile_source.h"
#include "models/zoo.h"
#include "tests/core/first_law.h"

namespace tessel::core {
namespace {

using test::fixed_tiles;
using test::kTolerance;
using test::random_image;

struct Head {
  bool gated;
  int64_t branches, classes;
  std::string name() const {
    return std::string(gated ? "gated" : "plain") + ", " + std::to_string(branches) +
           " branch(es), " + std::to_string(classes) + " classes";
  }
};

const Head kHeads[] = {{false, 1, 2}, {true, 1, 3}, {true, 3, 3}, {false, 2, 2}};

// A small trunk (dilated and strided convs, a residual join, optionally a train-mode batch norm
// in the last segment's way) and the attention head of the zoo.
Graph attention_network(const Head& head, bool barrier = false) {
  Graph g(2);
  NodeId x = g.relu(g.conv(g.input(), ConvSpec(2, 6, 3).padding(1), "c1"));
  const NodeId y = g.relu(g.conv(x, ConvSpec(6, 6, 3).padding(2).dilation(2), "c2"));
  x = g.add(x, y);
  if (barrier) x = g.batch_norm(x, "bn");
  x = g.relu(g.conv(x, ConvSpec(6, 5, 3).stride(2).padding(1), "c3"));
  models::ModelOptions o;
  o.classes = head.classes;
  o.attention = models::AttentionHead{4, head.gated, head.branches};
  models::add_head(g, x, o);
  g.module().to(test_device(), at::kDouble);
  randomise(g, 17);
  return g;
}

NodeId attention_node(const Graph& g) {
  for (const Node& n : g.nodes()) {
    if (n.kind == OpKind::kAttentionPool) return n.id;
  }
  return -1;
}

TEST(AttentionPool, StreamedOverTilesEqualsPlainAutograd) {
  const int64_t h = 23, w = 19;
  const std::vector<std::tuple<Strategy, int64_t, int64_t>> partitions{{Strategy::kGrid, 3, 2},
                                                                       {Strategy::kGrid, 2, 5},
                                                                       {Strategy::kRows, 4, 1},
                                                                       {Strategy::kGrid, 4, 4},
                                                                       {Strategy::kGrid, 1, 1}};
  for (const Head& head : kHeads) {
    Graph g = attention_network(head);
    for (const auto& [strategy, ty, tx] : partitions) {
      const Plan plan = make_plan(g, {2, h, w}, 0, fixed_tiles(strategy, ty, tx));
      // Streamed: the last segment closes with the pool, its tiles never held together.
      ASSERT_EQ(plan.segments.back().reduction, attention_node(g)) << to_string(plan, g);
      EXPECT_EQ(plan.segments.back().forward.tiles(), ty * tx) << to_string(plan, g);
      // 1×1: the pool over one tile, which must equal plain as LibTorch's own.
      EXPECT_EQ(tiles(plan), ty * tx > 1) << "the check must tile\n" << to_string(plan, g);
      const auto c = compare_with_plain(g, plan, random_image(2, h, w, 3), 4);
      EXPECT_LT(c.worst(), kTolerance)
          << head.name() << " " << to_string(strategy) << " " << ty << "×" << tx << "\n"
          << to_string(plan, g) << c.to_string();
    }
  }
}

// Split over ranks (docs/slide-parallel.md): each rank streams its own tiles into the pool and
// the ranks' running maxima and sums are merged before the pooled features, so every rank's
// gradients are plain's (a train-mode batch norm in the way too), and each rank gives the bytes
// split_bytes predicts.
TEST(AttentionPool, SplitOverRanksEqualsPlainAutograd) {
  int checked = 0;
  for (const Head& head : kHeads) {
    for (const int ranks : {2, 3}) {
      const bool barrier = ranks == 3;
      std::vector<std::unique_ptr<Graph>> graphs;
      std::vector<Graph*> replicas;
      for (int r = 0; r < ranks; ++r) {
        graphs.push_back(std::make_unique<Graph>(attention_network(head, barrier)));
        replicas.push_back(graphs.back().get());
      }
      const Graph& g = *graphs.front();
      const Plan plan = make_plan(g, {2, 23, 19}, 0, fixed_tiles(Strategy::kGrid, 3, 2));
      ASSERT_EQ(plan.segments.back().reduction, attention_node(g)) << to_string(plan, g);
      ASSERT_TRUE(tiles(plan)) << to_string(plan, g);
      const auto split = compare_split_with_plain(replicas, plan, random_image(2, 23, 19, 3), 4);
      for (size_t r = 0; r < split.size(); ++r) {
        EXPECT_LT(split[r].worst(), kTolerance)
            << head.name() << ", rank " << r << " of " << ranks << "\n"
            << to_string(plan, g) << split[r].to_string();
        EXPECT_EQ(split[r].summed_bytes, split_bytes(g, plan, ranks).total()) << head.name();
      }
      if (checked == 0) {
        // The same check fails with one tile's halo a pixel short.
        StepOptions faulty;
        faulty.inject = Fault::kHalo;
        const auto halo =
            compare_split_with_plain(replicas, plan, random_image(2, 23, 19, 3), 4, faulty);
        double worst = 0;
        for (const auto& c : halo) worst = std::max(worst, c.worst());
        EXPECT_GT(worst, 1e-6) << head.name() << "\n" << to_string(plan, g);
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 8);
}

// Not streamed (the last feature map kept whole, the pool in the head) equals plain too.
TEST(AttentionPool, RunInTheHeadEqualsPlainAutograd) {
  const int64_t h = 21, w = 26;
  for (const Head& head : kHeads) {
    Graph g = attention_network(head);
    PlanOptions o = fixed_tiles(Strategy::kGrid, 3, 3);
    o.streaming_reduction = false;
    const Plan plan = make_plan(g, {2, h, w}, 0, o);
    ASSERT_LT(plan.segments.back().reduction, 0) << to_string(plan, g);
    ASSERT_TRUE(tiles(plan)) << "the check must tile\n" << to_string(plan, g);
    const auto c = compare_with_plain(g, plan, random_image(2, h, w, 5), 6);
    EXPECT_LT(c.worst(), kTolerance) << head.name() << "\n" << to_string(plan, g) << c.to_string();
  }
}

// Checkpoints on disk before the streamed segment, and a train-mode batch norm in the segment
// the pool closes (its statistic and gradient-sum passes run the tiles' backward too).
TEST(AttentionPool, MatchesWithOffloadedCheckpointsAndABarrier) {
  const int64_t h = 25, w = 22;
  for (const Head& head : {kHeads[1], kHeads[2]}) {
    Graph g = attention_network(head, /*barrier=*/true);
    for (const bool offload : {false, true}) {
      PlanOptions o = fixed_tiles(Strategy::kGrid, 3, 2);
      o.overrides.checkpoints = checkpoint_candidates(g);
      if (offload) o.offload = PlanOptions::Offload::kDisk;
      const Plan plan = make_plan(g, {2, h, w}, 0, o);
      ASSERT_EQ(plan.segments.back().reduction, attention_node(g)) << to_string(plan, g);
      ASSERT_GT(plan.segments.size(), 1u) << to_string(plan, g);
      if (offload) {
        EXPECT_GT(plan.moved_bytes(), 0) << to_string(plan, g);
      }
      for (uint64_t step = 1; step <= 2; ++step) {
        ASSERT_TRUE(tiles(plan)) << "the check must tile\n" << to_string(plan, g);
        const auto c = compare_with_plain(g, plan, random_image(2, h, w, 7 + step), step);
        EXPECT_LT(c.worst(), kTolerance) << head.name() << (offload ? " offloaded" : "") << "\n"
                                         << to_string(plan, g) << c.to_string();
      }
    }
  }
}

// Budgeted plans keep tiles' autograd graphs from the forward (the backward's surrogate then
// reads a kept tile) and pick their own partitions.
TEST(AttentionPool, MatchesUnderABudget) {
  const int64_t h = 37, w = 29;
  Graph g = attention_network(kHeads[2]);
  int kept = 0;
  for (const int64_t budget_kib : {96, 160, 400, 4096}) {
    PlanOptions o;
    o.element_bytes = 8;
    const Plan plan = make_plan(g, {2, h, w}, budget_kib << 10, o);
    for (const Segment& s : plan.segments) kept += s.keeps_graph();
    // 400 KiB and 4 MiB hold the step whole: one tile with its graph kept, which must equal
    // plain; the smaller budgets tile.
    EXPECT_EQ(tiles(plan), budget_kib < 400) << "the check must tile\n" << to_string(plan, g);
    const auto c = compare_with_plain(g, plan, random_image(2, h, w, 11), 12);
    EXPECT_LT(c.worst(), kTolerance) << budget_kib << " KiB\n"
                                     << to_string(plan, g) << c.to_string();
  }
  EXPECT_GT(kept, 0);
}

// The plain form is the published one (Ilse et al. 2018, eq. 8-9; CLAM's gated attention and
// per-class branches and classifiers): computed here from the parameters, on the whole map.
TEST(AttentionPool, PlainFormIsIlseEtAlsGatedAttention) {
  for (const Head& head : kHeads) {
    Graph g = attention_network(head);
    const at::Tensor image = random_image(2, 15, 13, 21);
    TensorTileSource source(image);
    PlanOptions o;
    o.strategy = Strategy::kNone;
    o.element_bytes = 8;
    const at::Tensor logits = infer(g, make_plan(g, {2, 15, 13}, 0, o), source);

    // The trunk's last feature map, by the graph itself (its convs are tested elsewhere).
    Graph trunk(2);
    NodeId x = trunk.relu(trunk.conv(trunk.input(), ConvSpec(2, 6, 3).padding(1), "c1"));
    const NodeId y = trunk.relu(trunk.conv(x, ConvSpec(6, 6, 3).padding(2).dilation(2), "c2"));
    x = trunk.relu(trunk.conv(trunk.add(x, y), ConvSpec(6, 5, 3).stride(2).padding(1), "c3"));
    trunk.module().to(test_device(), at::kDouble);
    const auto params = g.module().named_parameters(true);
    for (auto& p : trunk.module().named_parameters(true)) {
      at::NoGradGuard no_grad;
      p.value().copy_(params[p.key()]);
    }
    TensorTileSource trunk_source(image);
    PlanOptions to = o;
    const at::Tensor features =
        infer(trunk, make_plan(trunk, {2, 15, 13}, 0, to), trunk_source);  // 1×5×h×w
    const at::Tensor hk = features.flatten(2)[0].t();                      // positions × 5
    auto weight = [&](const std::string& name) {
      const at::Tensor t = params[name];
      return t.dim() == 4 ? t.flatten(1) : t;
    };
    at::Tensor a =
        at::tanh(at::linear(hk, weight("attention_a.weight"), params["attention_a.bias"]));
    if (head.gated) {
      a = a * at::sigmoid(at::linear(hk, weight("attention_b.weight"), params["attention_b.bias"]));
    }
    EXPECT_EQ(params.find("attention_c.bias"), nullptr);
    const at::Tensor scores = at::linear(a, weight("attention_c.weight"));
    const at::Tensor alpha = at::softmax(scores, 0);  // positions × branches
    const at::Tensor z = alpha.t().matmul(hk);        // branches × 5
    const at::Tensor w = params["classifier.weight"], b = params["classifier.bias"];
    at::Tensor expected;
    if (head.branches == 1) {
      expected = at::linear(z, w, b);  // 1 × classes
    } else {
      expected = ((z * w).sum(1) + b).unsqueeze(0);  // class k from branch k
    }
    EXPECT_LT(relative_error(logits, expected), 1e-12) << head.name();
  }
}

// The streaming forward keeps a running maximum: scores far beyond exp's range (±1000) give the
// softmax's result, not inf or NaN.
TEST(AttentionPool, HugeScoresStayFinite) {
  Graph g(3);
  g.attention_pool(g.identity(g.input()), 1, "attention");
  const at::Tensor image = random_image(3, 17, 11, 31) * 1000.0;
  const Plan tiled = make_plan(g, {3, 17, 11}, 0, fixed_tiles(Strategy::kGrid, 3, 2));
  ASSERT_EQ(tiled.segments.back().reduction, 2) << to_string(tiled, g);
  TensorTileSource source(image);
  const at::Tensor pooled = infer(g, tiled, source);
  const at::Tensor plain = attention_pool_plain(g.node(2), image);
  EXPECT_TRUE(at::isfinite(pooled).all().item<bool>());
  EXPECT_LT(relative_error(pooled, plain), 1e-12);
}

// The streamed pool holds nothing of the map's size: the head's memory is the same from 2048² to
// 32768² (vgg-mini, 1 GiB).
TEST(AttentionPool, HeadMemoryIsFlatInTheSlidesSize) {
  models::ModelOptions options;
  options.attention = models::AttentionHead{};
  Graph g = models::build_model("vgg-mini", options);
  int64_t tail = -1;
  for (const int64_t size : {2048, 8192, 32768}) {
    const Plan plan = make_plan(g, {3, size, size}, int64_t{1} << 30, PlanOptions{});
    EXPECT_EQ(plan.segments.back().reduction, attention_node(g)) << size;
    if (tail < 0) tail = plan.predicted.tail;
    EXPECT_EQ(plan.predicted.tail, tail) << size;
    EXPECT_LE(plan.predicted.total(), int64_t{1} << 30) << size;
  }
}

TEST(AttentionPool, RefusesBranchesThatAreNeitherOneNorTheClasses) {
  Graph g(3);
  models::ModelOptions o;
  o.classes = 3;
  o.attention = models::AttentionHead{8, true, 2};
  EXPECT_THROW(models::add_head(g, g.input(), o), Error);
  EXPECT_THROW(g.attention_pool(g.input(), 3), Error);  // no feature channel left
}

}  // namespace
}  // namespace tessel::core
