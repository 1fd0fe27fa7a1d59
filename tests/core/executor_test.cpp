// The engine's first law: every strategy gives the gradients of plain LibTorch autograd on the
// whole image (DESIGN.md). Float64, random weights, sizes that do not divide the tiles.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <atomic>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "core/device/copies.h"
#include "core/device/device.h"
#include "core/device/memory.h"
#include "core/device/parallel.h"
#include "core/error.h"
#include "core/exec/gradcheck.h"
#include "core/exec/tile_ops.h"
#include "core/plan/planner.h"
#include "models/zoo.h"
#include "tests/core/first_law.h"

namespace tessel::core {
namespace {

using test::fixed_tiles;
using test::kTolerance;
using test::random_image;
using test::tiling_budget_plan;

// A random case: a random network in float64 with random weights, an input of 17–45 pixels a
// side (rarely a multiple of the tiles), grid or rows with up to `max_ty` × `max_tx` fixed
// tiles, a streaming reduction three times in four, and each checkpoint candidate with
// probability 1 / `one_in`.
struct RandomCase {
  Graph graph;
  Shape input;
  PlanOptions options;
};
RandomCase random_case(uint64_t seed, std::mt19937_64& rng, int64_t max_ty, int64_t max_tx,
                       int64_t one_in) {
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  RandomCase c{models::random_network(seed, 17, 2), {}, {}};
  c.graph.module().to(test_device(), at::kDouble);
  randomise(c.graph, seed);
  c.input = {2, pick(17, 45), pick(17, 45)};
  // At least two tiles: a check of one compares plain with plain.
  const Strategy strategy = pick(0, 1) ? Strategy::kGrid : Strategy::kRows;
  const int64_t ty = pick(strategy == Strategy::kRows ? 2 : 1, max_ty);
  const int64_t tx = pick(ty == 1 ? 2 : 1, max_tx);
  c.options = fixed_tiles(strategy, ty, tx);
  // Training's step (no image gradient), and every other case the step with it.
  c.options.input_gradient = seed % 2 == 0 || !test::has_parameters(c.graph);
  c.options.streaming_reduction = pick(0, 3) != 0;
  std::vector<NodeId> ckpts;
  for (NodeId v : checkpoint_candidates(c.graph)) {
    if (pick(0, one_in - 1) == 0) ckpts.push_back(v);
  }
  c.options.overrides.checkpoints = ckpts;
  return c;
}

TEST(TiledStep, RandomNetworksMatchPlainAutograd) {
  int budgeted = 0;
  for (uint64_t seed = 1; seed <= 80; ++seed) {
    std::mt19937_64 rng(seed * 7919);
    RandomCase rc = random_case(seed, rng, 5, 4, 3);
    Graph& g = rc.graph;
    const Shape& in = rc.input;
    PlanOptions& o = rc.options;
    Plan plan = test::plan_drawn(g, in, o);
    // Every fourth case the plan training makes under a budget (its search picks the tiles,
    // segments and schemes) instead of fixed tiles.
    if (seed % 4 == 3) {
      if (std::optional<Plan> b = tiling_budget_plan(g, in, o)) {
        plan = *b;
        ++budgeted;
      }
    }
    ASSERT_TRUE(tiles(plan)) << "the check must tile\n" << to_string(plan, g);
    const auto c = compare_with_plain(g, plan, random_image(2, in.height, in.width, seed), seed);
    EXPECT_LT(c.worst(), kTolerance) << "seed " << seed << " input " << to_string(in) << "\n"
                                     << to_string(plan, g) << c.to_string();
  }
  EXPECT_GE(budgeted, 12) << "cases planned under a budget";
}

// The check above can only fail for an op the random networks draw: seeds 1–80 draw every
// pointwise and binary op and both sides' own padding in convolutions and pools.
TEST(TiledStep, RandomNetworksDrawEveryOp) {
  std::set<std::string> seen;
  for (uint64_t seed = 1; seed <= 80; ++seed) {
    const Graph g = models::random_network(seed, 17, 2);
    for (const Node& n : g.nodes()) {
      if (n.kind == OpKind::kPointwise || n.kind == OpKind::kBinary) seen.insert(describe(n));
      if ((n.conv || n.pool) && !n.symmetric_padding()) seen.insert(to_string(n.kind) + " asym");
    }
  }
  for (const char* op :
       {"relu",      "leaky-relu", "gelu",      "sigmoid",      "tanh",        "identity",
        "frozen-bn", "gelu-tanh",  "silu",      "hard-sigmoid", "hard-swish",  "clamp",
        "erf",       "scalar",     "scale",     "channel-norm", "add",         "sub",
        "mul",       "div",        "conv asym", "maxpool asym", "avgpool asym"}) {
    EXPECT_TRUE(seen.count(op)) << op << " is never drawn";
  }
}

// Segments that keep their tiles' autograd graphs (where the budget leaves room) instead of
// recomputing them: exact whether all, some or none of a plan's segments keep them.
TEST(TiledStep, SegmentsThatKeepTheirGraphsMatchPlainAutograd) {
  int mixed = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed * 104729);
    RandomCase rc = random_case(seed, rng, 4, 3, 2);
    Graph& g = rc.graph;
    const Shape& in = rc.input;
    PlanOptions& o = rc.options;
    o.input_gradient = seed % 2 == 0;
    const int64_t unlimited = int64_t{1} << 40;
    auto plan_for = [&](int64_t budget, bool keep) {
      o.overrides.keep_graphs = keep;
      try {
        return make_plan(g, in, budget, o);
      } catch (const tessel::Error&) {
        o.overrides.checkpoints
            .reset();  // a checkpoint after the last tiled layer: plan without them
        return make_plan(g, in, budget, o);
      }
    };
    const Plan none = plan_for(unlimited, false);
    const Plan all = plan_for(unlimited, true);
    // A budget between the two peaks keeps some segments' graphs (keeping can also lower the
    // peak: a kept graph's input is a view of a checkpoint, and a pass without recompute holds
    // less).
    const int64_t between =
        std::max(none.predicted.total(), (none.predicted.total() + all.predicted.total()) / 2);
    const Plan some =
        plan_for(static_cast<int64_t>(static_cast<double>(between) / (1 - o.headroom)) + 64, true);
    int64_t kept = 0;
    for (const Segment& s : some.segments) kept += s.keeps_graph() ? 1 : 0;
    if (kept > 0 && kept < static_cast<int64_t>(some.segments.size())) ++mixed;
    for (const Plan* plan : {&all, &some}) {
      const auto c = compare_with_plain(g, *plan, random_image(2, in.height, in.width, seed), seed);
      EXPECT_LT(c.worst(), kTolerance) << "seed " << seed << " input " << to_string(in) << "\n"
                                       << to_string(*plan, g) << c.to_string();
    }
  }
  EXPECT_GE(mixed, 10) << "plans where some segments keep their graphs and others recompute";
}

// One op between two 3×3 convs (so padding meets computed halos), on a prime-sized image cut
// into uneven tiles.
void expect_exact(Graph& g, const std::string& what, int64_t h = 23, int64_t w = 19) {
  g.module().to(test_device(), at::kDouble);
  randomise(g, 11);
  for (const auto& [ty, tx] : {std::pair<int64_t, int64_t>{3, 2}, {4, 1}, {2, 5}}) {
    const Plan plan = make_plan(g, {2, h, w}, 0, fixed_tiles(Strategy::kGrid, ty, tx));
    const auto c = compare_with_plain(g, plan, random_image(2, h, w, 5), 5);
    EXPECT_LT(c.worst(), kTolerance) << what << " tiles " << ty << "×" << tx << "\n"
                                     << c.to_string();
  }
}

TEST(TiledStep, ConvolutionsMatchForEveryKernelStridePaddingDilation) {
  for (int64_t k = 1; k <= 4; ++k) {
    for (int64_t s = 1; s <= 3; ++s) {
      for (int64_t p = 0; p <= 3; ++p) {
        for (int64_t d = 1; d <= 2; ++d) {
          for (bool bias : {true, false}) {
            Graph g(2);
            NodeId x = g.conv(g.input(), ConvSpec(2, 4, 3).padding(1));
            x = g.conv(x, ConvSpec(4, 4, k).stride(s).padding(p).dilation(d).bias(bias).groups(
                              k % 2 ? 1 : 2));
            x = g.conv(g.relu(x), ConvSpec(4, 3, 3).padding(1));
            expect_exact(g, describe(g.node(2)));
          }
        }
      }
    }
  }
}

TEST(TiledStep, AsymmetricConvolutionsMatch) {
  Graph g(2);
  NodeId x =
      g.conv(g.input(), ConvSpec(2, 3, 1).kernel(3, 1).stride(2, 1).padding(2, 0).dilation(1, 3));
  x = g.conv(x, ConvSpec(3, 3, 1).kernel(1, 4).stride(1, 3).padding(0, 3));
  expect_exact(g, "asymmetric", 29, 31);
}

TEST(TiledStep, PoolsMatchForEveryKernelStridePaddingAndCeilMode) {
  for (int64_t k = 1; k <= 3; ++k) {
    for (int64_t s = 1; s <= 3; ++s) {
      for (int64_t p = 0; p <= k / 2; ++p) {
        for (bool ceil : {false, true}) {
          for (int kind = 0; kind < 4; ++kind) {
            Graph g(2);
            NodeId x = g.conv(g.input(), ConvSpec(2, 3, 3).padding(1));
            PoolSpec spec = PoolSpec(k).stride(s).padding(p).ceil_mode(ceil);
            if (kind == 0) x = g.max_pool(x, spec);
            if (kind == 1) x = g.max_pool(x, spec.dilation(2));
            if (kind == 2) x = g.avg_pool(x, spec.count_include_pad(true));
            if (kind == 3) x = g.avg_pool(x, spec.count_include_pad(false));
            x = g.conv(x, ConvSpec(3, 2, 3).padding(1));
            try {
              (void)g.shapes({2, 23, 19});
            } catch (const tessel::Error&) {
              continue;  // dilated kernel larger than the input
            }
            expect_exact(g, describe(g.node(2)));
          }
        }
      }
    }
  }
}

TEST(TiledStep, AvgPoolDivisorOverrideMatches) {
  Graph g(2);
  NodeId x = g.conv(g.input(), ConvSpec(2, 3, 3).padding(1));
  x = g.avg_pool(x, PoolSpec(3).stride(2).padding(1).ceil_mode(true).divisor_override(4));
  expect_exact(g, "divisor_override");
}

TEST(TiledStep, PointwiseOpsMatch) {
  for (int op = 0; op < 7; ++op) {
    Graph g(2);
    NodeId x = g.conv(g.input(), ConvSpec(2, 3, 3).padding(1));
    switch (op) {
      case 0:
        x = g.relu(x);
        break;
      case 1:
        x = g.leaky_relu(x, 0.2);
        break;
      case 2:
        x = g.gelu(x);
        break;
      case 3:
        x = g.sigmoid(x);
        break;
      case 4:
        x = g.tanh(x);
        break;
      case 5:
        x = g.identity(x);
        break;
      default:
        x = g.frozen_batch_norm(x);
        break;
    }
    x = g.conv(x, ConvSpec(3, 2, 3).padding(1));
    expect_exact(g, describe(g.node(2)));
  }
}

// The no-grad forward overwrites a tensor in place when its producer allocated it and nothing
// else reads it: chains of pointwise ops (batch norm → leaky relu → batch norm → relu), a tensor
// with two readers (never overwritten), and identity, which allocates nothing (the op after it
// must not overwrite the tensor identity passed through).
TEST(TiledStep, InPlacePointwiseChainsMatch) {
  Graph g(2);
  NodeId x = g.conv(g.input(), ConvSpec(2, 4, 3).padding(1));
  x = g.relu(g.frozen_batch_norm(g.leaky_relu(g.frozen_batch_norm(x), 0.1)));
  const NodeId shared = g.conv(x, ConvSpec(4, 4, 3).padding(1));
  x = g.add(g.frozen_batch_norm(shared), g.sigmoid(shared));
  // relu after identity would overwrite `passed`, which sigmoid reads after it.
  const NodeId passed = g.conv(x, ConvSpec(4, 3, 1));
  const NodeId through = g.relu(g.identity(passed));
  x = g.add(through, g.sigmoid(passed));
  x = g.conv(g.tanh(g.identity(x)), ConvSpec(3, 2, 3).padding(1));
  expect_exact(g, "pointwise chains", 29, 23);
}

TEST(TiledStep, ResidualAndConcatJoinsMatch) {
  Graph g(2);
  NodeId x = g.relu(g.conv(g.input(), ConvSpec(2, 4, 3).padding(1)));
  NodeId y = g.conv(g.relu(g.conv(x, ConvSpec(4, 4, 3).padding(2).dilation(2))),
                    ConvSpec(4, 4, 3).padding(1));
  x = g.add(y, x);
  NodeId a = g.conv(x, ConvSpec(4, 2, 5).padding(2));
  NodeId b = g.max_pool(x, PoolSpec(3).stride(1).padding(1));
  x = g.concat({a, b});
  x = g.conv(x, ConvSpec(6, 3, 3).stride(2).padding(1));
  expect_exact(g, "residual+concat", 31, 26);
}

TEST(TiledStep, StreamingGlobalPoolsMatchWithAndWithoutCheckpoints) {
  for (bool max : {false, true}) {
    models::ModelOptions mo;
    mo.in_channels = 2;
    mo.classes = 3;
    mo.global_max_pool = max;
    Graph g = models::build_model("tiny", mo);
    g.module().to(test_device(), at::kDouble);
    randomise(g, 3);
    for (bool streaming : {true, false}) {
      for (int64_t tiles : {1, 3, 4}) {
        PlanOptions o = fixed_tiles(Strategy::kGrid, tiles, tiles + 1);
        o.streaming_reduction = streaming;
        const Plan plan = make_plan(g, {2, 37, 41}, 0, o);
        EXPECT_EQ(plan.segments.back().reduction >= 0, streaming);
        const auto c = compare_with_plain(g, plan, random_image(2, 37, 41, 9), 9);
        EXPECT_LT(c.worst(), kTolerance)
            << (max ? "max" : "avg") << " streaming " << streaming << " tiles " << tiles << "\n"
            << c.to_string();
      }
    }
  }
}

TEST(TiledStep, ImagesSmallerThanOneTileMatch) {
  Graph g = models::random_network(42, 8, 2);
  g.module().to(test_device(), at::kDouble);
  randomise(g, 42);
  PlanOptions o = fixed_tiles(Strategy::kGrid, 1, 1);
  o.overrides.tile_size = 64;
  o.overrides.tiles_y.reset();
  const Plan plan = make_plan(g, {2, 9, 11}, 0, o);
  const auto c = compare_with_plain(g, plan, random_image(2, 9, 11, 4), 4);
  EXPECT_LT(c.worst(), kTolerance) << c.to_string();
}

TEST(TiledStep, BudgetedPlansOfTheShippedModelsMatch) {
  for (const std::string name : {"tiny", "resnet18"}) {
    models::ModelOptions mo;
    mo.in_channels = 3;
    Graph g = models::build_model(name, mo);
    g.module().to(test_device(), at::kDouble);
    randomise(g, 8);
    for (Strategy s : {Strategy::kGrid, Strategy::kRows}) {
      PlanOptions o;
      o.strategy = s;
      o.element_bytes = 8;
      o.overrides.tile_size = 5;
      const Plan plan = make_plan(g, {3, 67, 53}, 0, o);
      const auto c = compare_with_plain(g, plan, random_image(3, 67, 53, 8), 8);
      EXPECT_LT(c.worst(), kTolerance) << name << " " << to_string(s) << "\n"
                                       << to_string(plan, g) << c.to_string();
    }
  }
}

}  // namespace
}  // namespace tessel::core

namespace tessel::core {
namespace {

TEST(Infer, TiledForwardEqualsPlainForward) {
  for (uint64_t seed = 100; seed < 110; ++seed) {
    Graph g = models::random_network(seed, 17, 2);
    g.module().to(test_device(), at::kDouble);
    randomise(g, seed);
    const at::Tensor image = random_image(2, 29, 34, seed);
    TensorTileSource source(image);
    PlanOptions o = fixed_tiles(seed % 2 ? Strategy::kGrid : Strategy::kRows, 3, 2);
    const Plan tiled = make_plan(g, {2, 29, 34}, 0, o);
    o.strategy = Strategy::kNone;
    const Plan plain = make_plan(g, {2, 29, 34}, 0, o);
    EXPECT_LT(relative_error(infer(g, tiled, source), infer(g, plain, source)), kTolerance)
        << "seed " << seed << "\n"
        << to_string(tiled, g);
  }
}

// Records what the engine reports, to check the events match the plan.
class Recorder : public Observer {
 public:
  void on_tile(const TileEvent& e) override { tiles.push_back(e); }
  void on_memory(const MemorySample& m) override { memory.push_back(m); }
  std::vector<TileEvent> tiles;
  std::vector<MemorySample> memory;
};

TEST(Events, EveryTileStartsAndFinishesInScheduleOrderInBothPasses) {
  MemoryTracker::install();
  models::ModelOptions mo;
  mo.in_channels = 2;
  Graph g = models::build_model("tiny", mo);
  g.module().to(test_device(), at::kDouble);
  randomise(g, 1);
  PlanOptions o = fixed_tiles(Strategy::kGrid, 3, 2);
  // Checkpoints named: at a fixed tile count the search would rather run fewer segments.
  const std::vector<NodeId> candidates = checkpoint_candidates(g);
  ASSERT_GE(candidates.size(), 2u);
  o.overrides.checkpoints = std::vector<NodeId>(candidates.begin(), candidates.begin() + 2);
  const Plan plan = make_plan(g, {2, 40, 36}, 0, o);
  TensorTileSource source(random_image(2, 40, 36, 1));
  Recorder recorder;
  StepOptions options;
  options.observer = &recorder;
  const LossFn loss = [](const at::Tensor& logits, const at::Tensor&) { return logits.sum(); };
  const StepResult r = train_step(g, plan, source, at::Tensor(), loss, options);
  // Expected order: every segment forward in order, then backward in reverse; forward tiles in
  // row-major order, backward tiles in reverse (LIFO), each started then finished.
  struct Expected {
    int segment;
    TileEvent::Pass pass;
    const Partition* part;
  };
  std::vector<Expected> passes;
  int64_t forward_tiles = 0, backward_tiles = 0;
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    passes.push_back({static_cast<int>(i), TileEvent::kForward, &plan.segments[i].forward});
    forward_tiles += plan.segments[i].forward.tiles();
    backward_tiles += plan.segments[i].backward.tiles();
  }
  for (size_t i = plan.segments.size(); i-- > 0;) {
    passes.push_back({static_cast<int>(i), TileEvent::kBackward, &plan.segments[i].backward});
  }
  EXPECT_GT(plan.segments.size(), 1u) << "the test wants checkpoints between segments";
  EXPECT_EQ(r.forward_tiles, forward_tiles);
  EXPECT_EQ(r.backward_tiles, backward_tiles);
  ASSERT_EQ(recorder.tiles.size(), static_cast<size_t>(2 * (forward_tiles + backward_tiles)));
  size_t i = 0;
  for (const Expected& p : passes) {
    for (int64_t k = 0; k < p.part->tiles(); ++k) {
      const int64_t t = p.pass == TileEvent::kForward ? k : p.part->tiles() - 1 - k;
      for (bool done : {false, true}) {
        const TileEvent& e = recorder.tiles[i++];
        EXPECT_EQ(e.segment, p.segment);
        EXPECT_EQ(e.pass, p.pass);
        EXPECT_EQ(e.done, done);
        EXPECT_EQ(e.tile, t);
        EXPECT_EQ(e.tiles, p.part->tiles());
        EXPECT_EQ(e.out, p.part->tile(t));
        EXPECT_EQ(e.row * p.part->cols() + e.col, t);
      }
    }
  }
  ASSERT_EQ(recorder.memory.size(), static_cast<size_t>(forward_tiles + backward_tiles));
  for (const MemorySample& m : recorder.memory) EXPECT_GE(m.peak, m.live);
}

}  // namespace
}  // namespace tessel::core

namespace tessel::core {
namespace {

// A network without parameters computes in the image's dtype, never silently in float32
// (found by `tessel gradcheck --seed 60`: 6e-8 errors from float rounding in float64 mode).
TEST(TiledStep, NetworksWithoutParametersComputeInTheImagesDtype) {
  Graph g(2);
  g.max_pool(g.gelu(g.input()), PoolSpec(2));
  const at::Tensor image = random_image(2, 13, 11, 2);
  TensorTileSource source(image);
  for (Strategy s : {Strategy::kNone, Strategy::kGrid}) {
    PlanOptions o = fixed_tiles(s, 2, 2);
    EXPECT_EQ(infer(g, make_plan(g, {2, 13, 11}, 0, o), source).scalar_type(), at::kDouble)
        << to_string(s);
  }
  PlanOptions o = fixed_tiles(Strategy::kGrid, 3, 2);
  o.input_gradient = true;  // the only gradient a step without parameters has
  const auto c = compare_with_plain(g, make_plan(g, {2, 13, 11}, 0, o), image, 2);
  EXPECT_LT(c.worst(), kTolerance) << c.to_string();
}

}  // namespace
}  // namespace tessel::core

namespace tessel::core {
namespace {

// The float32 bar's floor: plain float32 against plain float64 on the same weights is a small,
// nonzero rounding error, and the graph comes back in float32 with the same weights.
TEST(Gradcheck, Float32RoundingFloorIsPlainFloat32AgainstFloat64) {
  Graph g = models::build_model("tiny");
  g.module().to(test_device(), at::kFloat);
  randomise(g, 4);
  const at::Tensor before = g.module().parameters()[0].clone();
  const Plan plan = make_plan(g, {3, 29, 23}, 0, fixed_tiles(Strategy::kGrid, 2, 2));
  const at::Tensor image = random_image(3, 29, 23, 4).to(at::kFloat);
  const Comparison floor = check_in_precision(g, plan, image, 4).plain_floor;
  EXPECT_GT(floor.worst(), 1e-9) << floor.to_string();
  EXPECT_LT(floor.worst(), 1e-4) << floor.to_string();
  EXPECT_EQ(g.module().parameters()[0].scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(g.module().parameters()[0], before));
  // A float64 graph has no rounding to speak of against itself.
  g.module().to(at::kDouble);
  EXPECT_EQ(check_in_precision(g, plan, image.to(at::kDouble), 4).plain_floor.worst(), 0);
}

// The check refuses a halo one pixel short in one tile (core/exec/fault.h) in float64, for a
// network of each family the zoo ships, with each strategy (scripts/check-injections runs every
// shipped model: a few minutes, too long here). Each size is the smallest tried at which some tile
// has a halo to shorten (at 97×83 vgg-mini's every tile reads the whole image).
TEST(Faults, ShippedModelsRefuseAHaloOnePixelShort) {
  const std::vector<std::pair<std::string, Strategy>> cases = {{"tiny", Strategy::kGrid},
                                                               {"vgg-mini", Strategy::kGrid},
                                                               {"resnet18", Strategy::kGrid},
                                                               {"vgg-mini", Strategy::kRowsShared},
                                                               {"resnet18", Strategy::kRows}};
  for (const auto& [model, strategy] : cases) {
    Graph g = models::build_model(model);
    g.module().to(test_device(), at::kDouble);
    randomise(g, 3);
    Plan plan;
    int64_t size = 0;
    for (const int64_t s : {97, 160, 224}) {
      plan = make_plan(g, {3, s, s - 14}, 0, fixed_tiles(strategy, 3, 3));
      size = s;
      if (halo_fault_segment(g, plan) >= 0) break;
    }
    ASSERT_GE(halo_fault_segment(g, plan), 0) << model << "\n" << to_string(plan, g);
    const at::Tensor image = random_image(3, size, size - 14, 3);
    StepOptions o;
    o.inject = Fault::kHalo;
    const Comparison c = compare_with_plain(g, plan, image, 3, o);
    EXPECT_GT(c.worst(), 1e-3) << model << " " << to_string(strategy) << " " << size << "\n"
                               << c.to_string();
  }
}

// One-pixel tiles through ResNet's downsampling block with a checkpoint after it (found by
// `tessel gradcheck --model resnet18 --tile 1`: the downsample batch norm's bias gradient was
// off by up to 100%, as AccumulateGrad adopted an aliased gradient).
TEST(TiledStep, OnePixelTilesThroughResnetDownsamplingMatch) {
  models::ModelOptions mo;
  Graph g = models::build_model("resnet18", mo);
  g.module().to(test_device(), at::kDouble);
  randomise(g, 1);
  NodeId act7 = -1;
  for (NodeId v : checkpoint_candidates(g)) {
    if (g.node(v).name == "act7") act7 = v;
  }
  ASSERT_GE(act7, 0);
  PlanOptions o = fixed_tiles(Strategy::kGrid, 1, 1);
  o.overrides.tiles_y.reset();
  o.overrides.tile_size = 1;
  o.overrides.checkpoints = std::vector<NodeId>{act7};
  const Plan plan = make_plan(g, {3, 24, 24}, 0, o);
  const auto c = compare_with_plain(g, plan, random_image(3, 24, 24, 4), 1);
  EXPECT_LT(c.worst(), kTolerance) << to_string(plan, g) << c.to_string();
}

}  // namespace
}  // namespace tessel::core

// The engine's parallel loops run on LibTorch's threads: every item once, on both threads
// (at::parallel_for, used before, ran on one: core/device/parallel.h), and a part's exception
// reaches the caller. ctest runs one thread per test; this asks for two.
TEST(TileOps, ParallelRangesSplitOverLibTorchsThreads) {
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  std::vector<std::atomic<int>> hits(1001);
  std::mutex mutex;
  std::set<std::thread::id> threads;
  tessel::core::parallel_ranges(0, 1001, [&](int64_t b, int64_t e) {
    {
      const std::lock_guard<std::mutex> lock(mutex);
      threads.insert(std::this_thread::get_id());
    }
    for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
  });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_EQ(threads.size(), 2u);
  EXPECT_THROW(tessel::core::parallel_ranges(0, 10,
                                             [](int64_t b, int64_t) {
                                               if (b > 0) throw tessel::Error("second part");
                                             }),
               tessel::Error);
  at::set_num_threads(before);
}

// copy_tile between channels-first and channels-last tensors and views of them (crops), float
// and double, against ATen's own copy: the same elements, bit for bit; on one thread and on two.
TEST(TileOps, CopyTileTransposesLayoutsExactly) {
  // Far outside randn's values (-1.0 was one of them about once in a hundred runs).
  constexpr double kUnwritten = 1e30;
  const int before = at::get_num_threads();
  for (const int threads : {1, 2}) {
    at::set_num_threads(threads);
    for (const auto dtype : {at::kFloat, at::kDouble}) {
      const at::Tensor whole = at::randn({1, 67, 41, 53}, at::TensorOptions().dtype(dtype));
      const at::Tensor last = whole.contiguous(at::MemoryFormat::ChannelsLast);
      for (const at::Tensor& src : {whole, last}) {
        for (const auto format : {at::MemoryFormat::Contiguous, at::MemoryFormat::ChannelsLast}) {
          const at::Tensor view = src.slice(2, 3, 40).slice(3, 5, 52);
          at::Tensor dst =
              at::full({1, 67, 45, 60}, kUnwritten, whole.options().memory_format(format));
          const at::Tensor target = dst.slice(2, 4, 41).slice(3, 2, 49);
          tessel::core::copy_tile(target, view);
          EXPECT_TRUE(at::equal(target, view));
          EXPECT_EQ(dst.eq(kUnwritten).sum().item<int64_t>(), dst.numel() - view.numel());
        }
      }
    }
  }
  at::set_num_threads(before);
}
