#include "core/plan/planner.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>

#include "core/device/memory.h"
#include "core/error.h"
#include "core/exec/executor.h"
#include "core/plan/geometry.h"
#include "models/zoo.h"

namespace tessel::core {
namespace {

TEST(Window, OutputSizesAgreeWithLibTorchForEveryOption) {
  for (int64_t n = 1; n <= 12; ++n) {
    for (int64_t k = 1; k <= 4; ++k) {
      for (int64_t s = 1; s <= 3; ++s) {
        for (int64_t p = 0; p <= k / 2; ++p) {
          for (int64_t d = 1; d <= 2; ++d) {
            for (bool ceil : {false, true}) {
              const AxisOp op{k, s, p, d, ceil};
              const at::Tensor x = at::zeros({1, 1, n, 1});
              int64_t expected = 0;
              try {
                expected = at::max_pool2d(x, {k, 1}, {s, 1}, {p, 0}, {d, 1}, ceil).size(2);
              } catch (const std::exception&) {
                expected = 0;  // LibTorch rejects an output smaller than 1
              }
              EXPECT_EQ(std::max<int64_t>(0, output_size(op, n)), expected)
                  << "n " << n << " k " << k << " s " << s << " p " << p << " d " << d << " ceil "
                  << ceil;
            }
          }
        }
      }
    }
  }
}

TEST(Window, InputWindowIsExactlyWhatTheOutputsRead) {
  for (int64_t k = 1; k <= 4; ++k) {
    for (int64_t s = 1; s <= 3; ++s) {
      for (int64_t p = 0; p <= 3; ++p) {
        for (int64_t d = 1; d <= 3; ++d) {
          const AxisOp op{k, s, p, d, false};
          for (int64_t a = 0; a < 5; ++a) {
            for (int64_t b = a + 1; b <= 6; ++b) {
              int64_t lo = INT64_MAX, hi = INT64_MIN;
              for (int64_t o = a; o < b; ++o) {
                for (int64_t j = 0; j < k; ++j) {
                  lo = std::min(lo, o * s - p + d * j);
                  hi = std::max(hi, o * s - p + d * j + 1);
                }
              }
              EXPECT_EQ(input_window(op, {a, b}), (Window{lo, hi}));
            }
          }
          EXPECT_TRUE(input_window(op, {3, 3}).empty());
        }
      }
    }
  }
}

TEST(Window, ReceptiveFieldIsTheHullOverEveryPathIncludingPadding) {
  // A residual join of a 3×3 stride-2 conv and a 1×1 stride-2 shortcut, then a padded 3×3 conv.
  Graph g(3);
  const NodeId a = g.conv(g.input(), ConvSpec(3, 4, 3).stride(2), "a");
  const NodeId b = g.conv(g.input(), ConvSpec(3, 4, 1).stride(2), "b");
  const NodeId sum = g.add(a, b);
  const NodeId out = g.conv(sum, ConvSpec(4, 4, 3).padding(1), "c");
  EXPECT_EQ(receptive_field(g, sum, 0, {0, 1}), (Window{0, 3}));
  EXPECT_EQ(receptive_field(g, sum, 1, {1, 2}), (Window{2, 5}));
  // Cell 0 of the last conv reads the join's [-1, 2): padding, then [-2, 5) of the input.
  EXPECT_EQ(receptive_field(g, out, 0, {0, 1}), (Window{-2, 5}));
  EXPECT_EQ(receptive_field(g, out, 0, {1, 2}), (Window{0, 7}));
  const NodeId pooled = g.global_avg_pool(out);
  EXPECT_THROW(receptive_field(g, pooled, 0, {0, 1}), Error);
}

TEST(Planner, FitsTheBudgetAndTilesMoreWhenItShrinks) {
  Graph g = models::build_model("vgg-mini");
  const Shape in{3, 4096, 4096};
  int64_t previous_tiles = 0;
  for (int64_t budget : {int64_t{2} << 30, int64_t{512} << 20, int64_t{128} << 20}) {
    for (Strategy s : {Strategy::kGrid, Strategy::kRows, Strategy::kAuto}) {
      // Full-width rows of a 4096-px image cannot go below ~270 MiB (their halo is 4096 wide).
      if (s == Strategy::kRows && budget < (int64_t{256} << 20)) continue;
      PlanOptions o;
      o.strategy = s;
      const Plan plan = make_plan(g, in, budget, o);
      EXPECT_LE(plan.predicted.total(), budget) << to_string(plan, g);
      EXPECT_FALSE(plan.segments.empty());
      for (const Segment& seg : plan.segments) {
        EXPECT_GE(seg.backward.tiles(), seg.forward.tiles()) << to_string(plan, g);
        if (s == Strategy::kRows) {
          EXPECT_EQ(seg.forward.cols(), 1);
        }
      }
      if (s == Strategy::kGrid) {
        EXPECT_GE(plan.segments[0].backward.tiles(), previous_tiles);
        previous_tiles = plan.segments[0].backward.tiles();
      }
    }
  }
}

TEST(Planner, RowsAreBalancedByTheirInputWindow) {
  Graph g = models::build_model("vgg-mini");
  PlanOptions o;
  o.strategy = Strategy::kRows;
  o.overrides.tiles_y = 7;
  const Plan plan = make_plan(g, {3, 1000, 300}, 0, o);
  const Segment& s = plan.segments[0];
  int64_t lo = INT64_MAX, hi = 0;
  for (int64_t t = 0; t < s.forward.tiles(); ++t) {
    const auto need = segment_needs(g, plan.shapes, s.input, s.output, s.forward.tile(t));
    lo = std::min(lo, need[0].y.size());
    hi = std::max(hi, need[0].y.size());
  }
  EXPECT_LE(hi - lo, 32) << "rows read between " << lo << " and " << hi << " input rows";
}

TEST(Planner, NamesTheSmallestBudgetWhenNothingFits) {
  Graph g = models::build_model("vgg16");
  try {
    (void)make_plan(g, {3, 20000, 20000}, int64_t{64} << 20);
    FAIL() << "a 64 MiB budget cannot hold VGG-16's parameters (59 MiB) and their gradients";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("smallest budget that fits is about"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parameters"), std::string::npos) << msg;
  }
}

// Issue 51: a budget of a byte, less the headroom, rounded to 0 — "no budget" — and planned freely.
TEST(Planner, ABudgetOfAFewBytesIsABudgetNotNone) {
  Graph g = models::build_model("tiny");
  for (const int64_t budget : {int64_t{1}, int64_t{9}}) {
    EXPECT_THROW((void)make_plan(g, {3, 512, 512}, budget), Error) << budget;
  }
}

TEST(Planner, TheSmallestBudgetNamedForResidentSharedRowsFits) {
  // Resident shared rows keep more with more rows: the finest partition is not the smallest,
  // and the fewest rows whose working set fits may not fit with what they keep. Measured before
  // the fix: 128 MiB named "about 83 MiB", and 210 MiB found no plan.
  Graph g = models::build_model("vgg-mini");
  PlanOptions o;
  o.strategy = Strategy::kRowsShared;
  o.offload = PlanOptions::Offload::kNever;
  const Shape input{3, 2048, 2048};
  std::string named;
  try {
    (void)make_plan(g, input, int64_t{128} << 20, o);
    FAIL() << "vgg-mini 2048² rows-shared fits 128 MiB without offloading";
  } catch (const Error& e) {
    const std::string msg = e.what();
    const std::string about = "fits is about ";
    const size_t at = msg.find(about);
    ASSERT_NE(at, std::string::npos) << msg;
    named = msg.substr(at + about.size(), msg.find(',', at) - at - about.size());
    named.erase(std::remove(named.begin(), named.end(), ' '), named.end());
  }
  const int64_t budget = parse_bytes(named);
  EXPECT_GT(budget, int64_t{128} << 20) << named;
  const Plan plan = make_plan(g, input, budget + (int64_t{1} << 20), o);
  EXPECT_TRUE(plan.segments[0].is<SharedRows>());
  EXPECT_FALSE(plan.offloads());
}

TEST(Planner, PlansVgg16OnA200kSlide) {
  Graph g = models::build_model("vgg16");
  const Plan plan = make_plan(g, {3, 200000, 200000}, int64_t{8} << 30);
  EXPECT_LE(plan.predicted.total(), int64_t{8} << 30);
  EXPECT_GT(plan.segments[0].forward.tiles(), 100);
}

TEST(Planner, RejectsInvalidInputNamingTheNode) {
  Graph g(3);
  NodeId x = g.conv(g.input(), ConvSpec(3, 4, 7), "big");
  (void)x;
  try {
    (void)make_plan(g, {3, 5, 5}, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("big"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)make_plan(g, {3, 0, 10}, 0), Error);
  EXPECT_THROW((void)make_plan(g, {2, 10, 10}, 0), Error);
  EXPECT_THROW(g.conv(x, ConvSpec(5, 4, 3)), Error);  // channel mismatch
}

// Predicted peak vs the tracking allocator's measured peak, float32, three sizes.
TEST(Memory, PredictedPeakIsWithin15PercentOfMeasuredForBudgetedPlans) {
  MemoryTracker::install();
  // Plans the planner chose itself: rows and grid, with checkpoints (resnet18's residual
  // segments) and separate forward and backward tile counts.
  for (const auto& [name, size, budget_mib] :
       {std::tuple<std::string, int64_t, int64_t>{"resnet18", 512, 330},
        {"resnet18", 768, 360},
        {"vgg-mini", 1024, 160},
        // Frozen batch norm (affine) and leaky relu: the affine once held a product and a sum.
        {"darknet19", 1024, 350}}) {
    Graph g = models::build_model(name);
    for (Strategy s : {Strategy::kGrid, Strategy::kRows}) {
      PlanOptions o;
      o.strategy = s;
      Plan plan;
      try {
        plan = make_plan(g, {3, size, size}, budget_mib << 20, o);
      } catch (const Error& e) {
        ADD_FAILURE() << name << " " << size << "² " << to_string(s) << ": " << e.what();
        continue;
      }
      TensorTileSource source(at::rand({1, 3, size, size}));
      for (auto& p : g.module().parameters()) p.mutable_grad() = at::zeros_like(p);
      const LossFn loss = [](const at::Tensor& logits, const at::Tensor&) { return logits.sum(); };
      const StepResult r = train_step(g, plan, source, at::Tensor(), loss);
      const int64_t predicted = plan.predicted.checkpoints + plan.predicted.working_set;
      EXPECT_NEAR(static_cast<double>(r.measured_peak_bytes) / static_cast<double>(predicted), 1.0,
                  0.15)
          << name << " " << size << "²: predicted " << format_bytes(predicted) << ", measured "
          << format_bytes(r.measured_peak_bytes) << "\n"
          << to_string(plan, g);
    }
  }
}

TEST(Memory, PredictedPeakIsWithin15PercentOfMeasured) {
  MemoryTracker::install();
  for (const std::string name : {"tiny", "vgg-mini"}) {
    Graph g = models::build_model(name);
    for (int64_t size : {384, 640, 1024}) {
      PlanOptions o;
      o.strategy = Strategy::kGrid;
      o.overrides.tiles_y = 3;
      o.overrides.tiles_x = 2;
      const Plan plan = make_plan(g, {3, size, size}, 0, o);
      at::Tensor image = at::rand({1, 3, size, size});
      TensorTileSource source(image);
      for (auto& p : g.module().parameters()) p.mutable_grad() = at::zeros_like(p);
      const LossFn loss = [](const at::Tensor& logits, const at::Tensor&) { return logits.sum(); };
      const StepResult r = train_step(g, plan, source, at::Tensor(), loss);
      const double predicted =
          static_cast<double>(plan.predicted.checkpoints + plan.predicted.working_set);
      const double measured = static_cast<double>(r.measured_peak_bytes);
      EXPECT_NEAR(measured / predicted, 1.0, 0.15)
          << name << " " << size << "²: predicted "
          << format_bytes(plan.predicted.checkpoints + plan.predicted.working_set) << ", measured "
          << format_bytes(r.measured_peak_bytes) << "\n"
          << to_string(plan, g);
    }
  }
}

}  // namespace
}  // namespace tessel::core

namespace tessel::core {
namespace {

TEST(Planner, KeepsTheRequestedRowCountWhenBalancing) {
  Graph g = models::build_model("resnet18");
  for (int64_t rows : {2, 3, 5}) {
    PlanOptions o;
    o.strategy = Strategy::kRows;
    o.overrides.tiles_y = rows;
    const Plan plan = make_plan(g, {3, 200, 150}, 0, o);
    for (const Segment& s : plan.segments) {
      EXPECT_EQ(s.forward.rows(), std::min(rows, plan.shapes[static_cast<size_t>(s.output)].height))
          << to_string(plan, g);
      EXPECT_EQ(s.backward.rows(), s.forward.rows());
    }
  }
}

}  // namespace
}  // namespace tessel::core
