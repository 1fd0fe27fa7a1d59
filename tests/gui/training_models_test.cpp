// The models behind the training views fed synthetic events: the tile grid and its states, the
// memory series (by category, budget, predicted and measured peaks, bounded), the metrics.
#include <QTest>

#include <cmath>
#include <fstream>
#include <limits>
#include <utility>
#include <vector>

#include "gui/training_models.h"
#include "tests/io/temp_folder.h"

namespace tessel::gui {

namespace {

core::TileEvent tile(int segment, int64_t index, int64_t tiles, core::TileEvent::Pass pass,
                     bool done) {
  core::TileEvent e;
  e.segment = segment;
  e.tile = index;
  e.tiles = tiles;
  e.row = index / 2;
  e.col = index % 2;
  e.out.y = {e.row * 10, e.row * 10 + 10};
  e.out.x = {e.col * 10, e.col * 10 + 10};
  e.pass = pass;
  e.done = done;
  return e;
}

}  // namespace

class TrainingModelsTest : public QObject {
  Q_OBJECT

 private slots:
  void tilesGoFromPendingThroughForwardToDoneAndTheCurrentOneIsKnown() {
    TileStateModel model;
    QVERIFY(model.empty());
    model.apply(tile(0, 0, 4, core::TileEvent::kForward, false));
    QCOMPARE(model.tiles(), 4);
    QCOMPARE(model.state(0), TileState::kForward);
    QCOMPARE(model.count(TileState::kPending), 3);
    QCOMPARE(model.current_tile(), 0);
    model.apply(tile(0, 0, 4, core::TileEvent::kForward, true));
    model.apply(tile(0, 1, 4, core::TileEvent::kForward, false));
    QCOMPARE(model.state(0), TileState::kDone);
    QCOMPARE(model.current_tile(), 1);
    QCOMPARE(model.tiles_done(), 1);
    model.apply(tile(0, 3, 4, core::TileEvent::kForward, false));
    QCOMPARE(model.extent(), QRectF(0, 0, 20, 20));
    QCOMPARE(model.rect(3), QRectF(10, 10, 10, 10));
  }

  void glassTilesFinishAsGlassNotAsDone() {
    TileStateModel model;
    core::TileEvent e = tile(0, 1, 4, core::TileEvent::kForward, false);
    e.glass = true;
    model.apply(e);
    e.done = true;
    model.apply(e);
    QCOMPARE(model.state(1), TileState::kGlass);
    QCOMPARE(model.count(TileState::kDone), 0);
    QCOMPARE(model.tiles_done(), 1);
  }

  void theGridsExtentIsKnownBeforeAllItsTilesHaveRun() {
    TileStateModel model;
    // 3 rows × 2 columns of 10 px tiles. Only the first seen: guessed near-square, 3 columns.
    core::TileEvent e = tile(0, 0, 6, core::TileEvent::kForward, false);
    model.apply(e);
    QCOMPARE(model.extent(), QRectF(0, 0, 30, 20));
    QCOMPARE(model.rect(4), QRectF(10, 10, 10, 10));      // not reached: its cell in the guess
    e = tile(0, 2, 6, core::TileEvent::kForward, false);  // row 1, col 0: two columns
    model.apply(e);
    QCOMPARE(model.grid_cols(), 2);
    QCOMPARE(model.extent(), QRectF(0, 0, 20, 30));
    QCOMPARE(model.rect(5), QRectF(10, 20, 10, 10));
  }

  void aNewSegmentOrPassStartsANewGridAndTheOldOneCountsAsDone() {
    TileStateModel model;
    model.apply(tile(0, 0, 4, core::TileEvent::kForward, true));
    model.apply(tile(1, 0, 2, core::TileEvent::kForward, false));
    QCOMPARE(model.segment(), 1);
    QCOMPARE(model.segments(), 2);
    QCOMPARE(model.tiles(), 2);
    QVERIFY(model.segment_done(0, core::TileEvent::kForward));
    QVERIFY(!model.segment_done(1, core::TileEvent::kForward));
    model.apply(tile(1, 1, 2, core::TileEvent::kBackward, false));
    QCOMPARE(model.pass(), core::TileEvent::kBackward);
    QCOMPARE(model.state(1), TileState::kBackward);
    QCOMPARE(model.state(0), TileState::kPending);
    model.reset();
    QVERIFY(model.empty());
    QCOMPARE(model.segments(), 0);
  }

  void eventsOutsideTheGridAreIgnored() {
    TileStateModel model;
    model.apply(tile(0, 7, 4, core::TileEvent::kForward, false));
    QCOMPARE(model.tiles(), 4);
    QCOMPARE(model.count(TileState::kPending), 4);
  }

  // What the step uses (above the bytes live when it began: the budget bounds that), its memory
  // categories, disk apart, the budget.
  void memorySeriesKeepWhatTheStepUsesByCategoryWithTheBudget() {
    MemorySeries series;
    core::MemorySample s;
    s.live = 1100;
    s.peak = 1150;
    s.baseline = 1000;
    s.budget = 1000;
    s.by_category = {{"host", 40}, {"checkpoints.disk", 10}, {"disk", 5}};
    series.add(0.5, s);
    s.live = 1300;
    s.peak = 1300;
    s.by_category["disk"] = 2000;
    series.add(1.0, s);
    QCOMPARE(series.live().size(), 2);
    QCOMPARE(series.live()[1], QPointF(1.0, 300));
    QCOMPARE(series.peak()[0], QPointF(0.5, 150));
    QCOMPARE(series.by_category().size(), size_t{1});
    QCOMPARE(series.by_category().at("host").size(), 2);
    QCOMPARE(series.disk().size(), 2);
    QCOMPARE(series.disk()[0], QPointF(0.5, 15));
    QCOMPARE(series.largest_disk(), 2010);
    QCOMPARE(series.budget(), 1000);
    QCOMPARE(series.largest(), 1000);  // disk is not on the memory axis
    QCOMPARE(series.measured_peak(), -1);
  }

  // The measured peak of each training slide stays drawn: validation's slides (no gradients,
  // another plan; measured -1 from the GUI's point of view) leave it as it was.
  void eachTrainingSlideHasItsPredictedAndMeasuredPeak() {
    MemorySeries series;
    pipelines::SlideProgress slide;
    slide.phase = "train";
    // The plan and the budget hold the weights and optimizer state (100) the step starts with;
    // the measured peak does not: the chart draws the prediction and the budget less them.
    slide.predicted_peak_bytes = 900;
    slide.fixed_bytes = 100;
    slide.budget_bytes = 1000;
    series.add_slide(1, slide);
    slide.done = true;
    slide.measured_peak_bytes = 850;
    series.add_slide(2, slide);
    QCOMPARE(series.predicted_peak(), 800);
    QCOMPARE(series.step_budget(), 900);
    QCOMPARE(series.measured_peak(), 850);
    slide.phase = "val";
    slide.done = false;
    slide.predicted_peak_bytes = 400;
    slide.fixed_bytes = 0;
    series.add_slide(3, slide);
    slide.done = true;
    slide.measured_peak_bytes = -1;
    series.add_slide(4, slide);
    QCOMPARE(series.measured_peak(), 850);
    QCOMPARE(series.predicted_peak(), 800);
    QCOMPARE(series.step_budget(), 900);
    slide.phase = "train";
    slide.done = false;
    slide.predicted_peak_bytes = 700;
    slide.fixed_bytes = 100;
    series.add_slide(5, slide);
    slide.done = true;
    slide.measured_peak_bytes = 650;
    series.add_slide(6, slide);
    QCOMPARE(series.predicted().size(), 2);
    QCOMPARE(series.predicted()[1], QPointF(5, 600));
    QCOMPARE(series.measured().size(), 2);
    QCOMPARE(series.measured()[0], QPointF(2, 850));
    QCOMPARE(series.measured()[1], QPointF(6, 650));
    QCOMPARE(series.budget(), 1000);
  }

  void aLongRunKeepsTheMemorySeriesBoundedWithItsFirstAndLastPoints() {
    MemorySeries series;
    core::MemorySample s;
    s.by_category = {{"tiles", 1}};
    for (int i = 0; i < 10 * MemorySeries::kMaxPoints; ++i) {
      s.live = i;
      series.add(i, s);
    }
    QVERIFY(series.live().size() <= MemorySeries::kMaxPoints);
    QVERIFY(series.live().size() > MemorySeries::kMaxPoints / 4);
    QCOMPARE(series.live().front().x(), 0.0);
    QCOMPARE(series.live().back().x(), 10.0 * MemorySeries::kMaxPoints - 1);
    QCOMPARE(series.by_category().at("tiles").size(), series.live().size());
  }

  void metricsAreOnePointPerEpochAndValidationOnlyWhenThereIsOne() {
    MetricsSeries metrics;
    pipelines::EpochReport e;
    e.epoch = 1;
    e.train_loss = 0.7;
    metrics.add(e);
    QCOMPARE(metrics.epochs(), 1);
    QVERIFY(metrics.val_loss().isEmpty());
    e.epoch = 2;
    e.train_loss = 0.5;
    e.val.count = 2;
    e.val.loss = 0.9;
    e.val.accuracy = 0.5;
    e.val.balanced_accuracy = 0.5;
    e.val.auc = std::numeric_limits<double>::quiet_NaN();
    e.best = true;
    metrics.add(e);
    QCOMPARE(metrics.train_loss()[1], QPointF(2, 0.5));
    QCOMPARE(metrics.val_loss().size(), 1);
    QVERIFY(metrics.val_auc().isEmpty());
    QCOMPARE(metrics.largest_loss(), 0.9);
    QCOMPARE(metrics.best_epoch(), 2);
    e.epoch = 3;
    e.train_loss = std::numeric_limits<double>::quiet_NaN();  // every slide skipped
    metrics.add(e);
    QCOMPARE(metrics.epochs(), 3);
    QCOMPARE(metrics.train_loss().size(), 2);
  }

  // A resumed run repeats the epochs after its checkpoint's: metrics.csv may hold a row the
  // checkpoint never saw (a crash after the row, before last.h5), which the run's own report of
  // that epoch replaces, with every later one.
  void anEpochReportedAgainReplacesItAndTheEpochsAfterIt() {
    MetricsSeries metrics;
    pipelines::EpochReport e;
    e.val.count = 1;
    for (int64_t epoch = 1; epoch <= 4; ++epoch) {
      e.epoch = epoch;
      e.train_loss = 1.0 / static_cast<double>(epoch);
      e.val.loss = e.train_loss;
      e.best = epoch == 4;
      metrics.add(e);
    }
    QCOMPARE(metrics.best_epoch(), 4);
    e.epoch = 3;
    e.train_loss = 0.25;
    e.best = false;
    metrics.add(e);
    QCOMPARE(metrics.epochs(), 3);
    QCOMPARE(metrics.train_loss().size(), 3);
    QCOMPARE(metrics.train_loss().back(), QPointF(3, 0.25));
    QCOMPARE(metrics.val_loss().size(), 3);
    QCOMPARE(metrics.best_epoch(), 0);
  }

  // The run's metrics.csv as pipelines/train.cpp writes it: columns by name, empty cells for
  // values the epoch did not have (no validation, every slide skipped), a half-written last line.
  void metricsCsvReadsBackAsTheEpochsTheRunReported() {
    const test::TempFolder folder;
    const auto csv = folder.path() / "metrics.csv";
    std::ofstream(csv) << "epoch,lr,train_loss,train_accuracy,val_loss,val_accuracy,"
                          "val_balanced_accuracy,val_auc,best,seconds,measured_peak_bytes\n"
                          "1,0.001000,0.693100,0.500000,0.690000,0.500000,0.500000,0.750000,1,"
                          "12.500000,104857600\n"
                          "2,0.000500,0.650000,0.625000,,,,,0,11.000000,104857600\n"
                          "3,0.000250,,0.0";
    const std::vector<pipelines::EpochReport> epochs = read_metrics_csv(csv);
    QCOMPARE(epochs.size(), size_t{3});
    QCOMPARE(epochs[0].epoch, int64_t{1});
    QCOMPARE(epochs[0].train_loss, 0.6931);
    QCOMPARE(epochs[0].val.count, int64_t{1});
    QCOMPARE(epochs[0].val.auc, 0.75);
    QVERIFY(epochs[0].best);
    QCOMPARE(epochs[0].seconds, 12.5);
    QCOMPARE(epochs[1].val.count, int64_t{0});
    QVERIFY(!epochs[1].best);
    QVERIFY(std::isnan(epochs[2].train_loss));
    MetricsSeries metrics;
    for (const auto& e : epochs) metrics.add(e);
    QCOMPARE(metrics.epochs(), 3);
    QCOMPARE(metrics.train_loss().size(), 2);
    QCOMPARE(metrics.val_auc().size(), 1);
    QCOMPARE(metrics.best_epoch(), 1);
    QVERIFY(read_metrics_csv(folder.path() / "none.csv").empty());
  }

  void aLargeFirstEpochIsAboveTheLossAxisAndAGradualFallIsNot() {
    const auto series = [](std::vector<double> losses) {
      MetricsSeries metrics;
      pipelines::EpochReport e;
      for (size_t i = 0; i < losses.size(); ++i) {
        e.epoch = static_cast<int64_t>(i + 1);
        e.train_loss = losses[i];
        metrics.add(e);
      }
      return metrics;
    };
    LossScale scale = series({40, 0.7, 0.6, 0.5}).loss_scale();
    QCOMPARE(scale.above.size(), size_t{1});
    QCOMPARE(scale.above[0], std::make_pair(1, 40.0));
    QVERIFY(std::abs(scale.top - 0.77) < 1e-9);
    scale = series({80, 30, 0.7, 0.6, 0.5}).loss_scale();  // two leading epochs
    QCOMPARE(scale.above.size(), size_t{2});
    scale = series({2, 1, 0.7, 0.5}).loss_scale();  // a gradual fall: nothing clipped
    QVERIFY(scale.above.empty());
    QVERIFY(std::abs(scale.top - 2.2) < 1e-9);
    scale = series({40}).loss_scale();  // one epoch is not an outlier against nothing
    QVERIFY(scale.above.empty());
  }

  void theVerdictSaysLearningAtChanceDivergingOrNotYet() {
    const auto run = [](std::vector<double> train, std::vector<double> auc) {
      MetricsSeries metrics;
      pipelines::EpochReport e;
      for (size_t i = 0; i < train.size(); ++i) {
        e.epoch = static_cast<int64_t>(i + 1);
        e.train_loss = train[i];
        e.val.count = auc.empty() ? 0 : 4;
        e.val.loss = 0.69;
        e.val.auc = auc.empty() ? 0 : auc[i];
        metrics.add(e);
      }
      return judge_run(metrics);
    };
    const double nan = std::numeric_limits<double>::quiet_NaN();
    QCOMPARE(run({0.7}, {}).kind, RunVerdict::kTooEarly);
    QCOMPARE(run({0.7, 0.5}, {}).kind, RunVerdict::kLearning);
    QCOMPARE(run({0.7, 0.6, 0.4}, {0.6, 0.7, 0.8}).kind, RunVerdict::kLearning);
    const RunVerdict chance = run({0.7, 0.6, 0.4}, {0.5, 0.52, 0.47});
    QCOMPARE(chance.kind, RunVerdict::kAtChance);
    QVERIFY2(chance.text.contains(QStringLiteral("3 validations")), qPrintable(chance.text));
    QCOMPARE(run({0.7, 0.6, 0.4}, {0.5, 0.52, 0.6}).kind, RunVerdict::kLearning);
    QCOMPARE(run({0.7, 0.6, nan}, {}).kind, RunVerdict::kSkipped);
    QCOMPARE(run({0.7, 0.8, 0.9}, {}).kind, RunVerdict::kDiverging);
    QCOMPARE(run({0.7, 0.71, 0.69, 0.7}, {}).kind, RunVerdict::kNotLearning);
    // An epoch skipped earlier is history, not the verdict.
    QCOMPARE(run({0.7, nan, 0.5}, {}).kind, RunVerdict::kLearning);
  }
};

}  // namespace tessel::gui

QTEST_MAIN(tessel::gui::TrainingModelsTest)
#include "training_models_test.moc"
