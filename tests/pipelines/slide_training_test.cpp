// The engine reading a real slide through io's tile source: the same gradients as plain autograd
// on the whole image read at once (the seam between core and io, DESIGN.md "TileSource").
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <iostream>
#include <vector>

#include "core/exec/executor.h"
#include "core/exec/gradcheck.h"
#include "core/plan/planner.h"
#include "io/slide_tile_source.h"
#include "models/zoo.h"

namespace tessel {
namespace {

std::string shared_slide(const std::string& name) {
  return std::string(TESSEL_SHARED_SLIDES) + "/" + name;
}

struct Grads {
  at::Tensor loss, input_grad;
  std::vector<at::Tensor> params;
};

Grads step(core::Graph& g, const core::Plan& plan, core::TileSource& source) {
  for (auto& p : g.module().parameters()) p.mutable_grad() = at::Tensor();
  core::StepOptions options;
  options.input_gradient = true;
  const core::LossFn loss = [](const at::Tensor& logits, const at::Tensor&) {
    return at::cross_entropy_loss(logits, at::ones({1}, at::kLong));
  };
  const core::StepResult r = core::train_step(g, plan, source, at::Tensor(), loss, options);
  Grads out{r.loss, r.input_grad, {}};
  for (auto& p : g.module().parameters()) out.params.push_back(p.grad().clone());
  return out;
}

// A slide's pixels plus a tiny dither that depends only on the global position, so every read
// of a pixel, tiled or whole, sees the same value. boxes.tiff has two distinct pixel values: its
// convolutions give exactly tied values under each max pool, where the gradient goes to
// whichever input rounds highest, and LibTorch 2's float64 convolution rounds in the last bit
// differently for different tile widths. Both routings are correct gradients of the same loss
// (measured: loss 1e-16, input gradient 0.18 apart); the dither (1e-6) breaks the ties, so the
// comparison checks the reading seam rather than a tie's coin toss.
class Dithered : public core::TileSource {
 public:
  explicit Dithered(core::TileSource& inner) : inner_(inner) {}
  int64_t channels() const override { return inner_.channels(); }
  int64_t height() const override { return inner_.height(); }
  int64_t width() const override { return inner_.width(); }
  at::Tensor read(const core::Region& r) override {
    const auto f64 = at::TensorOptions(at::kDouble);
    const at::Tensor y = at::arange(r.y.begin, r.y.end, f64).view({1, 1, -1, 1});
    const at::Tensor x = at::arange(r.x.begin, r.x.end, f64).view({1, 1, 1, -1});
    const at::Tensor c = at::arange(channels(), f64).view({1, -1, 1, 1});
    return inner_.read(r).to(at::kDouble) + 1e-6 * at::sin(0.37 * y + 0.11 * x + 1.3 * c);
  }
  void will_read(const std::vector<core::Region>& upcoming) override { inner_.will_read(upcoming); }

 private:
  core::TileSource& inner_;
};

// tiny in float64 (seed 7) and its plans for `source`'s image: 3×4 tiles, and plain.
struct TinyPlans {
  core::Graph graph;
  core::Plan tiled, plain;
};
TinyPlans tiny_in_float64(const core::TileSource& source) {
  TinyPlans t{models::build_model("tiny"), {}, {}};
  t.graph.module().to(at::kDouble);
  core::randomise(t.graph, 7);
  core::PlanOptions o;
  o.strategy = core::Strategy::kGrid;
  o.element_bytes = 8;
  o.overrides.tiles_y = 3;
  o.overrides.tiles_x = 4;
  const core::Shape in{3, source.height(), source.width()};
  t.tiled = core::make_plan(t.graph, in, 0, o);
  o.strategy = core::Strategy::kNone;
  t.plain = core::make_plan(t.graph, in, 0, o);
  return t;
}

TEST(SlideTraining, TiledStepOverASlideMatchesPlainAutogradOnTheWholeImage) {
  for (const auto& [name, level] : {std::pair<std::string, int>{"boxes.tiff", 0},
                                    {"boxes.tiff", 1},
                                    {"cmu-1-small-region.svs", 0}}) {
    io::SlideTileSourceOptions so;
    so.tile_size = 64;  // many internal tiles, so windows cross them
    io::SlideTileSource slide(shared_slide(name), level, so);
    if (slide.height() * slide.width() > 1'000'000) {
      // CMU-1 (2220×2967): a training step on it is too slow for a unit test; compare the
      // float32 tiled forward through the slide's windows with the plain forward instead.
      models::ModelOptions mo;
      core::Graph g = models::build_model("tiny", mo);
      core::randomise(g, 3);
      core::PlanOptions o;
      o.strategy = core::Strategy::kRows;
      o.overrides.tiles_y = 7;
      const core::Plan tiled = core::make_plan(g, {3, slide.height(), slide.width()}, 0, o);
      o.strategy = core::Strategy::kNone;
      const core::Plan plain = core::make_plan(g, {3, slide.height(), slide.width()}, 0, o);
      core::TensorTileSource whole(slide.read({{0, slide.height()}, {0, slide.width()}}));
      const at::Tensor a = core::infer(g, tiled, slide);
      const at::Tensor b = core::infer(g, plain, whole);
      EXPECT_LT(core::relative_error(a, b), 1e-5) << name << " (float32)";
      continue;
    }
    auto [g, tiled, plain] = tiny_in_float64(slide);
    Dithered dithered(slide);
    core::TensorTileSource whole(dithered.read({{0, slide.height()}, {0, slide.width()}}));
    const Grads a = step(g, tiled, dithered);
    const Grads b = step(g, plain, whole);
    EXPECT_LT(core::relative_error(a.loss, b.loss), 1e-10) << name;
    EXPECT_LT(core::relative_error(a.input_grad, b.input_grad), 1e-10) << name;
    for (size_t i = 0; i < a.params.size(); ++i) {
      EXPECT_LT(core::relative_error(a.params[i], b.params[i]), 1e-10) << name << " param " << i;
    }
    const io::TileCacheStats stats = slide.cache_stats();
    EXPECT_GT(stats.hits + stats.misses + stats.prefetched, 0) << name;
  }
}

// Without the dither, what docs/usage.md says of max pooling's ties: on boxes.tiff's flat regions
// the tiled and the plain step route a tied window's gradient to different positions of the same
// activation, so the loss and every parameter's gradient agree to float64 rounding while the
// image's gradient may move between tied pixels.
TEST(SlideTraining, MaxPoolTiesMoveOnlyTheImagesGradient) {
  io::SlideTileSourceOptions so;
  so.tile_size = 64;
  io::SlideTileSource slide(shared_slide("boxes.tiff"), 0, so);
  auto [g, tiled, plain] = tiny_in_float64(slide);
  ASSERT_TRUE(core::tiles(tiled));
  core::TensorTileSource whole(
      slide.read({{0, slide.height()}, {0, slide.width()}}).to(at::kDouble));
  const Grads a = step(g, tiled, slide);
  const Grads b = step(g, plain, whole);
  double params = 0;
  for (size_t i = 0; i < a.params.size(); ++i) {
    params = std::max(params, core::relative_error(a.params[i], b.params[i]));
  }
  const double image = core::relative_error(a.input_grad, b.input_grad);
  std::cout << "boxes.tiff without dither: loss " << core::relative_error(a.loss, b.loss)
            << ", parameter gradients " << params << ", image gradient " << image << "\n";
  EXPECT_LT(core::relative_error(a.loss, b.loss), 1e-10);
  EXPECT_LT(params, 1e-10);
}

}  // namespace
}  // namespace tessel
