// The training panel's Plan row before Start (gui/run_estimate.h): a step's FLOPs as the
// planner's cost model counts them, the estimate of a run on slides generated at test time (the
// same plan the run makes, a budget too small as the planner's message), this machine's FLOP
// rate, and the panel's defaults, which must train the demo's slides in minutes on a CPU.
// LibTorch (through the planner) before Qt: Qt defines `slots` as a macro.
#include "core/error.h"
#include "core/plan/planner.h"
#include "io/manifest.h"
#include "io/sample_slides.h"
#include "io/vips.h"
#include "models/zoo.h"
#include "pipelines/train_config.h"
// clang-format off
#include "gui/run_estimate.h"
#include "gui/training_panel.h"
// clang-format on

#include <QTest>

#include "tests/io/temp_folder.h"

namespace tessel::gui {

namespace {

core::Plan plan_of(const std::string& model, int64_t size, int64_t budget,
                   core::Strategy strategy) {
  const core::Graph graph = models::build_model(model, models::ModelOptions());
  core::PlanOptions options;
  options.strategy = strategy;
  options.optimizer_state_per_param = 2;  // Adam, as the run plans
  return core::make_plan(graph, {3, size, size}, budget, options);
}

}  // namespace

class RunEstimateTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    io::start_vips();
    io::SampleDataOptions options;
    options.slides = 6;
    options.size = 512;
    options.seed = 3;
    io::write_sample_data(data_.path(), options);
  }

  void aPlainStepIsAForwardAndABackwardOfTheWholeImage() {
    const core::Plan plan = plan_of("tiny", 256, 0, core::Strategy::kNone);
    QVERIFY(plan.plain_flops > 0);
    QCOMPARE(step_flops(plan), 3.0 * static_cast<double>(plan.plain_flops));
    QCOMPARE(forward_flops(plan), static_cast<double>(plan.plain_flops));
  }

  // Tiled under a small budget: the forward's halos, the backward's recompute and gradients,
  // and the price of every tile, so a tiled step costs more than the plain one it replaces.
  void aTiledStepCountsItsHalosRecomputeAndTiles() {
    const core::Plan plain = plan_of("vgg-mini", 1024, 0, core::Strategy::kNone);
    const core::Plan tiled = plan_of("vgg-mini", 1024, int64_t{96} << 20, core::Strategy::kGrid);
    QVERIFY(!tiled.segments.empty());
    int64_t tiles = 0;
    for (const core::Segment& s : tiled.segments) tiles += s.forward.tiles();
    QVERIFY2(tiles > static_cast<int64_t>(tiled.segments.size()), "the budget should force tiles");
    QVERIFY(tiled.tiled_flops >= tiled.plain_flops);
    QVERIFY(step_flops(tiled) >= 3.0 * static_cast<double>(tiled.tiled_flops));
    QVERIFY(step_flops(tiled) > step_flops(plain));
    QVERIFY(forward_flops(tiled) > static_cast<double>(tiled.tiled_flops));
  }

  // 512² slides at 0.5 µm read at 2 µm: 128² each. The peak is the plan the run makes for that
  // size; an epoch is the train slides' steps and the val slides' forwards; test slides no part.
  void theEstimateIsThePlanTheRunMakesForItsSlides() {
    pipelines::TrainConfig config = pipelines::parse_train_config(
        "model: tiny\nmpp: 2\nbudget: 64MiB\nstrategy: auto\n", "the test",
        {"manifest=" + (data_.path() / "manifest.csv").string()});
    int64_t train = 0, val = 0;
    for (const io::ManifestEntry& entry : io::load_manifest(config.manifest).entries) {
      train += entry.split == io::Split::kTrain ? 1 : 0;
      val += entry.split == io::Split::kVal ? 1 : 0;
    }
    QVERIFY(train > 0 && val > 0);
    RunEstimator estimator;
    const RunEstimate e = estimator.estimate(config);
    QCOMPARE(e.train_slides, train);
    QCOMPARE(e.val_slides, val);
    QVERIFY(e.skipped.empty());
    QCOMPARE(e.peak_width, int64_t{128});
    QCOMPARE(e.peak_height, int64_t{128});
    QCOMPARE(e.budget_bytes, int64_t{64} << 20);
    const core::Plan plan = plan_of("tiny", 128, int64_t{64} << 20, core::Strategy::kAuto);
    QCOMPARE(e.peak_bytes, plan.predicted.total());
    QCOMPARE(e.train_flops, step_flops(plan) * static_cast<double>(train));
    QCOMPARE(e.val_flops, forward_flops(plan) * static_cast<double>(val));
    QCOMPARE(e.epoch_seconds(1e9), (e.train_flops + e.val_flops) / 1e9);
    // Again, from the sizes it keeps: the same.
    QCOMPARE(estimator.estimate(config).peak_bytes, e.peak_bytes);
  }

  void aBudgetTooSmallIsThePlannersMessageForTheSlide() {
    pipelines::TrainConfig config = pipelines::parse_train_config(
        "model: tiny\nmpp: 2\nbudget: 1KiB\nstrategy: none\n", "the test",
        {"manifest=" + (data_.path() / "manifest.csv").string()});
    RunEstimator estimator;
    try {
      (void)estimator.estimate(config);
      QFAIL("a plan in 1 KiB");
    } catch (const Error& e) {
      const QString message = QString::fromUtf8(e.what());
      QVERIFY2(message.contains(QStringLiteral("slide_")) &&
                   message.contains(QStringLiteral("128×128 px")) &&
                   message.contains(QStringLiteral("budget")),
               qPrintable(message));
    }
  }

  void aManifestThatCannotBeReadSaysSo() {
    pipelines::TrainConfig config = pipelines::parse_train_config(
        "model: tiny\n", "the test", {"manifest=" + (data_.path() / "none.csv").string()});
    RunEstimator estimator;
    QVERIFY_THROWS_EXCEPTION(Error, (void)estimator.estimate(config));
  }

  // The rate is the network's own: a training step of it timed, so a model whose FLOPs are
  // mostly convs and one with batch norms, ReLUs and adds between them get their own rates.
  void theMachinesFlopRateIsMeasuredOnTheRunsNetwork() {
    pipelines::TrainConfig config =
        pipelines::parse_train_config("model: tiny\ndevice: cpu\n", "the test",
                                      {"manifest=" + (data_.path() / "manifest.csv").string()});
    const double rate = measure_flops_per_second(config);
    QVERIFY2(rate > 0, qPrintable(QString::number(rate)));
    config.model = "nonexistent";
    QVERIFY_THROWS_EXCEPTION(Error, (void)measure_flops_per_second(config));
  }

  // The demo's slides (sample_data: 8192² at 0.5 µm per pixel, 16 train and 4 val) at the
  // panel's default resolution and model: an epoch well under a TFLOP (half a minute at the
  // ~30 GFLOP/s a 2-core CPU measures; 10 epochs in minutes). Level 0, the config file's
  // default, plans 8192² slides: hours an epoch.
  void theDefaultsTrainTheDemosSlidesInMinutes() {
    const pipelines::TrainConfig c = TrainingPanel::default_config();
    QVERIFY(c.mpp.has_value());
    const auto size = static_cast<int64_t>(8192 * 0.5 / *c.mpp);
    const core::Plan plan =
        plan_of(c.model, size, core::parse_bytes(c.budget), core::parse_strategy(c.strategy));
    const double epoch = 16 * step_flops(plan) + 4 * forward_flops(plan);
    pipelines::TrainConfig measured = c;
    measured.device = "cpu";
    const double rate = measure_flops_per_second(measured);
    qInfo(
        "defaults: %s at %g µm per pixel, %lld² px a demo slide, %.0f GFLOP an epoch; %.1f "
        "GFLOP/s measured on the network: an epoch ≈ %.0f s (estimate)",
        c.model.c_str(), *c.mpp, static_cast<long long>(size), epoch / 1e9, rate / 1e9,
        epoch / rate);
    QVERIFY2(epoch < 1e12, qPrintable(QString::number(epoch / 1e9)));
    QVERIFY(plan.predicted.total() <= core::parse_bytes(c.budget));
  }

 private:
  test::TempFolder data_;
};

}  // namespace tessel::gui

QTEST_MAIN(tessel::gui::RunEstimateTest)
#include "run_estimate_test.moc"
