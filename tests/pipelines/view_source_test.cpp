// Augmentation through the tile source: any window of a cropped, flipped, rotated and colour-
// changed view equals the same window of the transformed whole image, so the engine's exactness
// carries over (and training on a view is plain training on the transformed image).
#include "pipelines/view_source.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/exec/executor.h"
#include "core/exec/gradcheck.h"
#include "core/plan/planner.h"
#include "models/zoo.h"
#include "pipelines/slide_input.h"
#include "temp_folder.h"

namespace tessel::pipelines {
namespace {

// The view applied to the whole image with plain tensor ops: the reference.
at::Tensor transform_whole(const at::Tensor& image, const View& v) {
  at::Tensor t = image.index({at::indexing::Slice(), at::indexing::Slice(),
                              at::indexing::Slice(v.crop.y.begin, v.crop.y.end),
                              at::indexing::Slice(v.crop.x.begin, v.crop.x.end)});
  if (v.transpose) t = t.transpose(2, 3);
  if (v.flip_y) t = t.flip({2});
  if (v.flip_x) t = t.flip({3});
  const at::Tensor scale = at::tensor(std::vector<float>(v.scale.begin(), v.scale.end()));
  const at::Tensor shift = at::tensor(std::vector<float>(v.shift.begin(), v.shift.end()));
  return t * scale.to(t.scalar_type()).view({1, 3, 1, 1}) +
         shift.to(t.scalar_type()).view({1, 3, 1, 1});
}

TEST(ViewTileSource, EveryWindowMatchesTheTransformedWholeImage) {
  std::mt19937_64 rng(7);
  const at::Tensor image = at::rand({1, 3, 37, 53}, at::kDouble);
  auto source = std::make_shared<core::TensorTileSource>(image);
  for (int trial = 0; trial < 40; ++trial) {
    View base;
    base.crop = {{static_cast<int64_t>(rng() % 10), 37 - static_cast<int64_t>(rng() % 10)},
                 {static_cast<int64_t>(rng() % 10), 53 - static_cast<int64_t>(rng() % 10)}};
    const View v = random_view(base, true, true, 0.1, rng);
    ViewTileSource view(source, v);
    const at::Tensor whole = transform_whole(image, v);
    ASSERT_EQ(view.height(), whole.size(2));
    ASSERT_EQ(view.width(), whole.size(3));
    for (int w = 0; w < 10; ++w) {
      const int64_t y0 = static_cast<int64_t>(rng() % static_cast<uint64_t>(view.height()));
      const int64_t x0 = static_cast<int64_t>(rng() % static_cast<uint64_t>(view.width()));
      const int64_t y1 =
          y0 + 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(view.height() - y0));
      const int64_t x1 =
          x0 + 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(view.width() - x0));
      const at::Tensor got = view.read({{y0, y1}, {x0, x1}});
      const at::Tensor want =
          whole.index({at::indexing::Slice(), at::indexing::Slice(), at::indexing::Slice(y0, y1),
                       at::indexing::Slice(x0, x1)});
      ASSERT_TRUE(at::equal(got, want))
          << "trial " << trial << " window " << y0 << ":" << y1 << ", " << x0 << ":" << x1;
    }
  }
}

TEST(ViewTileSource, RotationsOnlyDrawTheFourTurnsAndFlipsOnlyTheFourMirrors) {
  std::mt19937_64 rng(3);
  int seen_transposed_rotation = 0, seen_transposed_flip = 0;
  for (int i = 0; i < 200; ++i) {
    const View r = random_view({}, false, true, 0, rng);
    // A turn is the identity, transpose+flip_y, flip_y+flip_x or transpose+flip_x: never a
    // transpose alone (which is a mirror about the diagonal).
    EXPECT_FALSE(r.transpose && !r.flip_y && !r.flip_x);
    EXPECT_FALSE(r.transpose && r.flip_y && r.flip_x);
    seen_transposed_rotation += r.transpose ? 1 : 0;
    const View f = random_view({}, true, false, 0, rng);
    seen_transposed_flip += f.transpose ? 1 : 0;
  }
  EXPECT_GT(seen_transposed_rotation, 50);
  EXPECT_EQ(seen_transposed_flip, 0);
}

TEST(ViewTileSource, TiledTrainingOnAViewMatchesPlainAutogradOnTheTransformedImage) {
  const at::Tensor image = at::rand({1, 3, 45, 38}, at::kDouble);
  std::mt19937_64 rng(11);
  View v;
  v.crop = {{3, 44}, {2, 35}};
  v = random_view(v, true, true, 0.2, rng);
  v.transpose = true;  // a non-square crop, turned
  auto view = std::make_shared<ViewTileSource>(std::make_shared<core::TensorTileSource>(image), v);
  core::TensorTileSource reference(transform_whole(image, v));

  core::Graph g = models::build_model("tiny");
  g.module().to(at::kDouble);
  core::randomise(g, 5);
  const core::LossFn loss = [](const at::Tensor& logits, const at::Tensor& target) {
    return at::cross_entropy_loss(logits, target);
  };
  const at::Tensor target = at::ones({1}, at::kLong);
  const auto grads = [&](core::TileSource& source, core::Strategy strategy) {
    for (auto& p : g.module().parameters()) p.mutable_grad() = at::Tensor();
    core::PlanOptions o;
    o.strategy = strategy;
    o.element_bytes = 8;
    o.overrides.tile_size = 7;
    const core::Plan plan = core::make_plan(g, {3, source.height(), source.width()}, 0, o);
    core::train_step(g, plan, source, target, loss);
    std::vector<at::Tensor> out;
    for (auto& p : g.module().parameters()) out.push_back(p.grad().clone());
    return out;
  };
  const auto tiled = grads(*view, core::Strategy::kGrid);
  const auto plain = grads(reference, core::Strategy::kNone);
  ASSERT_EQ(tiled.size(), plain.size());
  for (size_t i = 0; i < tiled.size(); ++i) {
    EXPECT_LT(core::relative_error(tiled[i], plain[i]), 1e-10) << "parameter " << i;
  }
}

TEST(MaskedTileSource, FillsPixelsOffTheMaskAndEveryWindowAgreesWithTheWholeImage) {
  const at::Tensor image = at::rand({1, 3, 29, 41}, at::kDouble);
  // A 5×7 mask at 29/5 × 41/7 image pixels per mask pixel: keep a checkerboard.
  const at::Tensor mask = (at::arange(35).view({5, 7}) % 2).to(at::kByte);
  MaskedTileSource masked(std::make_shared<core::TensorTileSource>(image), mask, 41.0 / 7, 29.0 / 5,
                          {-1.0F, -2.0F, -3.0F});
  const at::Tensor whole = masked.read({{0, 29}, {0, 41}});
  for (int64_t y = 0; y < 29; ++y) {
    for (int64_t x = 0; x < 41; ++x) {
      const auto my = static_cast<int64_t>((static_cast<double>(y) + 0.5) / (29.0 / 5));
      const auto mx = static_cast<int64_t>((static_cast<double>(x) + 0.5) / (41.0 / 7));
      const bool keep = mask[my][mx].item<int64_t>() != 0;
      for (int64_t c = 0; c < 3; ++c) {
        const double want = keep ? image[0][c][y][x].item<double>() : -1.0 - static_cast<double>(c);
        ASSERT_EQ(whole[0][c][y][x].item<double>(), want) << y << "," << x;
      }
    }
  }
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t y0 = static_cast<int64_t>(rng() % 29), x0 = static_cast<int64_t>(rng() % 41);
    const int64_t y1 = y0 + 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(29 - y0));
    const int64_t x1 = x0 + 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(41 - x0));
    const at::Tensor want = whole.index({at::indexing::Slice(), at::indexing::Slice(),
                                         at::indexing::Slice(y0, y1), at::indexing::Slice(x0, x1)});
    ASSERT_TRUE(at::equal(masked.read({{y0, y1}, {x0, x1}}), want));
  }
}

// The filled pixels are declared as the image's background (core::TileSource::background), and
// a view declares them cropped, transposed, flipped and colour-changed: every declared cell reads
// the declared colour (core::check_background), and the cells are exactly the filled pixels.
TEST(MaskedTileSource, DeclaresItsFilledPixelsThroughEveryView) {
  const at::Tensor image = at::rand({1, 3, 29, 41});
  const at::Tensor mask = (at::arange(35).view({5, 7}) % 3 != 0).to(at::kByte);
  // Cells one position a side at the least: the declared cells are exactly the filled pixels.
  auto masked = std::make_shared<MaskedTileSource>(std::make_shared<core::TensorTileSource>(image),
                                                   mask, 41.0 / 7, 29.0 / 5,
                                                   std::vector<float>{-1.0F, 0.25F, 2.0F}, 1);
  ASSERT_NE(masked->background(), nullptr);
  core::check_background(*masked, *masked->background());
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 16; ++trial) {
    View v = random_view({}, true, true, 0.2, rng);
    v.crop = {{static_cast<int64_t>(rng() % 6), 29 - static_cast<int64_t>(rng() % 6)},
              {static_cast<int64_t>(rng() % 6), 41 - static_cast<int64_t>(rng() % 6)}};
    ViewTileSource view(masked, v);
    const core::Background* b = view.background();
    ASSERT_NE(b, nullptr);
    core::check_background(view, *b);
    // Every filled pixel is in a cell: the area matches the pixels holding the colour off a
    // random image (which never does by chance).
    const at::Tensor whole = view.read({{0, view.height()}, {0, view.width()}}).to(at::kDouble);
    const at::Tensor colour = at::tensor(b->value, at::kDouble).view({1, 3, 1, 1});
    const int64_t filled = whole.eq(colour).all(1).sum().item<int64_t>();
    EXPECT_EQ(filled, b->cells.area()) << "trial " << trial;
  }
  // Coarser cells (runs of about 5.8 positions joined in pairs) declare only cells wholly
  // filled: fewer positions, every one reading the colour.
  at::Tensor coarse_mask = at::ones({5, 7}, at::kByte);
  coarse_mask.slice(0, 0, 3).slice(1, 0, 4).zero_();
  for (const int64_t side : {1, 8}) {
    MaskedTileSource coarse(std::make_shared<core::TensorTileSource>(image), coarse_mask, 41.0 / 7,
                            29.0 / 5, {-1.0F, 0.25F, 2.0F}, side);
    ASSERT_NE(coarse.background(), nullptr) << side;
    const core::CellMask& cells = coarse.background()->cells;
    core::check_background(coarse, *coarse.background());
    for (int64_t r = 0; r + 1 < cells.rows(); ++r) {
      EXPECT_GE(cells.cell(r, 0).y.size(), side) << "rows but the last at least " << side;
    }
    const at::Tensor whole = coarse.read({{0, 29}, {0, 41}}).to(at::kDouble);
    const at::Tensor colour = at::tensor(std::vector<double>{-1.0, 0.25, 2.0}).view({1, 3, 1, 1});
    const int64_t filled = whole.eq(colour).all(1).sum().item<int64_t>();
    EXPECT_LE(cells.area(), filled) << side;
    if (side == 1) {
      EXPECT_EQ(cells.area(), filled);
    } else {
      EXPECT_LT(cells.area(), filled) << "the third row of mask pixels pairs with a kept one";
    }
  }
  // A mask that keeps everything declares nothing.
  MaskedTileSource all(std::make_shared<core::TensorTileSource>(image), at::ones({5, 7}, at::kByte),
                       41.0 / 7, 29.0 / 5, {0.0F, 0.0F, 0.0F});
  EXPECT_EQ(all.background(), nullptr);
}

// A real slide with tissue_fill (CMU-1 at 4 µm/px): its filled glass is declared, the step skips
// the glass tiles, and the loss and every parameter's gradient are plain autograd's on the whole
// image read at once (float64). The image's gradient is not compared: the fill's flat regions
// tie under max pooling (docs/glass.md).
// A tiled step over `source` with its background's glass tiles skipped, against plain autograd on
// the whole image read at once (float64): the loss and every parameter's gradient.
void expect_plain_gradients(core::TileSource& source) {
  const core::Background* background = source.background();
  ASSERT_NE(background, nullptr);
  core::Graph g = models::build_model("tiny");
  g.module().to(at::kDouble);
  core::randomise(g, 4);
  const core::Shape shape{3, source.height(), source.width()};
  core::PlanOptions o;
  o.strategy = core::Strategy::kGrid;
  o.element_bytes = 8;
  o.overrides.tile_size = 6;
  o.background = std::make_shared<core::CellMask>(background->cells);
  const core::Plan tiled = core::make_plan(g, shape, 0, o);
  ASSERT_GT(tiled.segments.front().forward.tiles(), 1) << core::to_string(tiled, g);
  o.strategy = core::Strategy::kNone;
  const core::Plan plain = core::make_plan(g, shape, 0, o);
  core::TensorTileSource whole(source.read({{0, shape.height}, {0, shape.width}}));
  const core::LossFn loss = [](const at::Tensor& logits, const at::Tensor&) {
    return at::cross_entropy_loss(logits, at::ones({1}, at::kLong));
  };
  const auto step = [&](const core::Plan& plan, core::TileSource& s, core::StepResult& r) {
    for (auto& p : g.module().parameters()) p.mutable_grad() = at::Tensor();
    r = core::train_step(g, plan, s, at::Tensor(), loss);
    std::vector<at::Tensor> out;
    for (auto& p : g.module().parameters()) out.push_back(p.grad().clone());
    return out;
  };
  core::StepResult a, b;
  const auto glass = step(tiled, source, a);
  const auto reference = step(plain, whole, b);
  EXPECT_GT(a.glass_forward_tiles, 0) << core::to_string(tiled, g);
  EXPECT_GT(a.glass_backward_tiles, 0);
  EXPECT_LT(core::relative_error(a.loss, b.loss), 1e-10);
  for (size_t i = 0; i < glass.size(); ++i) {
    EXPECT_LT(core::relative_error(glass[i], reference[i]), 1e-10) << "parameter " << i;
  }
}

const std::string kSmallRegion = std::string(TESSEL_SHARED_SLIDES) + "/cmu-1-small-region.svs";

// A real slide with tissue_fill (CMU-1 at 4 µm/px): its filled glass is declared, the step skips
// the glass tiles, and the loss and every parameter's gradient are plain autograd's on the whole
// image read at once (float64). The image's gradient is not compared: the fill's flat regions
// tie under max pooling (docs/glass.md).
TEST(MaskedTileSource, GlassOfARealSlideGivesPlainAutogradsGradients) {
  TrainConfig config;
  config.manifest = "none.csv";
  config.tissue_fill = true;
  config.mpp = 4.0;
  const SlideInput in = open_slide_input(config, kSmallRegion);
  EXPECT_GT(in.view->background()->cells.fraction(), 0.3);
  expect_plain_gradients(*in.view);
}

// A region of interest trains on its polygons (issue 53), not on their bounding box: the image is
// cropped to the box, and within it what lies outside the polygons or in a hole reads as empty
// glass and is declared background, so the step computes it once; the rest is the slide's pixels.
TEST(MaskedTileSource, ARegionOfInterestsOutsideAndHolesAreBackground) {
  const test::TempFolder folder;
  const std::filesystem::path geojson = folder.path() / "roi.geojson";
  // Level 0 is 2220 × 2967: an L of two rectangles, the first with a square hole.
  std::ofstream(geojson) << R"({"type": "FeatureCollection", "features": [
    {"type": "Feature", "properties": {"objectType": "annotation"}, "geometry": {
      "type": "Polygon", "coordinates": [
        [[200, 300], [1400, 300], [1400, 1100], [200, 1100], [200, 300]],
        [[500, 500], [900, 500], [900, 900], [500, 900], [500, 500]]]}},
    {"type": "Feature", "properties": {"objectType": "annotation"}, "geometry": {
      "type": "Polygon", "coordinates": [
        [[200, 1100], [700, 1100], [700, 2300], [200, 2300], [200, 1100]]]}}]})";
  TrainConfig config;
  config.manifest = "none.csv";
  config.mpp = 4.0;
  SlideOptions options;
  options.roi = geojson;
  const SlideInput in = open_slide_input(config, kSmallRegion, options);
  const SlideInput plain = open_slide_input(config, kSmallRegion);
  const double l0 = in.level0_per_pixel;
  EXPECT_EQ(in.view->width(), in.crop.x.size());
  EXPECT_EQ(in.view->height(), in.crop.y.size());
  EXPECT_LE(in.crop.x.begin, static_cast<int64_t>(200 / l0));
  EXPECT_GE(in.crop.x.end, static_cast<int64_t>(1400 / l0));
  EXPECT_GE(in.crop.y.end, static_cast<int64_t>(2300 / l0));
  // The reference: the slide's own pixels in the box, white where a pixel's centre is outside.
  const at::Tensor seen = in.view->read({{0, in.view->height()}, {0, in.view->width()}});
  const at::Tensor slide = plain.view->read({in.crop.y, in.crop.x});
  const auto centres = [&](const core::Window& span) {
    return (at::arange(span.begin, span.end, at::kDouble) + 0.5) * l0;
  };
  const at::Tensor x = centres(in.crop.x).view({1, -1});
  const at::Tensor y = centres(in.crop.y).view({-1, 1});
  const auto within = [](const at::Tensor& v, double lo, double hi) {
    return (v >= lo) & (v < hi);
  };
  const at::Tensor keep = (within(x, 200, 1400) & within(y, 300, 1100) &
                           (within(x, 500, 900) & within(y, 500, 900)).logical_not()) |
                          (within(x, 200, 700) & within(y, 1100, 2300));
  std::vector<float> white;
  for (size_t c = 0; c < 3; ++c)
    white.push_back((1.0F - io::kImageNetMean[c]) / io::kImageNetStd[c]);
  const at::Tensor fill = at::tensor(white).view({1, 3, 1, 1}).to(seen.scalar_type());
  const at::Tensor expected = at::where(keep.view({1, 1, keep.size(0), keep.size(1)}), slide, fill);
  EXPECT_TRUE(at::equal(seen, expected.to(seen.scalar_type())));
  // Declared: a good part of the outside (the cells wholly in it; coarser than pixels).
  const double outside = 1.0 - keep.to(at::kDouble).mean().item<double>();
  ASSERT_NE(in.view->background(), nullptr);
  const double declared = in.view->background()->cells.fraction();
  EXPECT_GT(outside, 0.3);
  EXPECT_GT(declared, 0.3 * outside) << outside;
  EXPECT_LE(declared, outside + 1e-9);
  expect_plain_gradients(*in.view);
}

}  // namespace
}  // namespace tessel::pipelines
