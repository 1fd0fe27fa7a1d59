// The training panel driven as a user would, in the main window: four tiny slides generated at
// test time, their manifest opened, model tiny at level 1 for 2 epochs, Start, tile events and an
// epoch arrive (a screenshot of the panel mid-run goes to the build tree), Stop, and the UI shows
// what happened: tile states, memory points, metrics, log, a checkpoint; a stopped run resumed
// from the panel; then a heatmap of that checkpoint over a slide. Bad configs and a budget too
// small are messages, never a crash. libvips (through glib, for tests/gui/screenshots.h) before Qt:
// Qt defines `signals`.
#include <vips/vips8>

#include <QDir>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QSignalSpy>
#include <QTest>
#include <QTimer>

#include <filesystem>
#include <fstream>
#include <vector>

#include "gui/main_window.h"
#include "io/sample_slides.h"
#include "io/vips.h"
#include "pipelines/train_config.h"
#include "tests/gui/screenshots.h"
#include "tests/gui/stall_meter.h"
#include "tests/io/temp_folder.h"

namespace tessel::gui {

namespace {

constexpr int kTimeoutMs = 120000;

}  // namespace

class TrainingPanelTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    io::start_vips();
    io::SampleDataOptions options;
    options.slides = 4;
    options.size = 512;
    options.seed = 5;
    slides_ = io::write_sample_data(data_.path() / "slides", options);
    manifest_ = QString::fromStdString((data_.path() / "slides" / "manifest.csv").string());
    window_.resize(1400, 900);
    window_.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window_));
  }

  void theFormIsValidatedByTheConfigParserAndSaysWhatIsWrong() {
    TrainingPanel* panel = window_.training();
    panel->set_manifest(manifest_);
    panel->budget_edit()->setText(QStringLiteral("lots"));
    QVERIFY(!panel->config().has_value());
    QVERIFY2(panel->message().contains(QStringLiteral("'lots' is not a size")),
             qPrintable(panel->message()));
    QVERIFY(!panel->start());
    QVERIFY(!panel->running());
    panel->budget_edit()->setText(QStringLiteral("64MiB"));
    QVERIFY(panel->config().has_value());
    // The norm row reaches the config, and a loaded config sets it.
    panel->norm_edit()->setCurrentText(QStringLiteral("batch"));
    QCOMPARE(QString::fromStdString(panel->config()->norm), QStringLiteral("batch"));
    pipelines::TrainConfig c = *panel->config();
    c.norm = "group";
    panel->set_config(c);
    QCOMPARE(panel->norm_edit()->currentText(), QStringLiteral("group"));
    panel->norm_edit()->setCurrentText(QStringLiteral("frozen"));
  }

  // The Model row's "…": a checkpoint is used as it is; an ONNX file Tessel cannot import is a
  // message naming the file, and the model is left as it was (tests/pipelines covers imports).
  void aNetworkFileIsTheModelOrAMessageSayingWhyNot() {
    TrainingPanel* panel = window_.training();
    panel->set_manifest(manifest_);
    const QString h5 = QString::fromStdString((data_.path() / "net.h5").string());
    QVERIFY(panel->use_network(h5));
    QVERIFY(panel->config().has_value());
    QCOMPARE(QString::fromStdString(panel->config()->model), h5);
    const auto broken = data_.path() / "broken.onnx";
    std::ofstream(broken) << "not a network";
    QVERIFY(!panel->use_network(QString::fromStdString(broken.string())));
    QVERIFY2(panel->message().contains(QString::fromStdString(broken.string())) &&
                 panel->message().contains(QStringLiteral("not an ONNX model")),
             qPrintable(panel->message()));
    QCOMPARE(QString::fromStdString(panel->config()->model), h5);
    QVERIFY(!std::filesystem::exists(data_.path() / "broken.h5"));
    QVERIFY(panel->use_network(QStringLiteral("vgg-mini")));
  }

  void theConfigSavesAndLoadsAsTheCliReadsIt() {
    TrainingPanel* panel = window_.training();
    panel->model_edit()->setCurrentText(QStringLiteral("tiny"));
    panel->resolution_kind()->setCurrentText(QStringLiteral("level"));
    panel->resolution_value()->setValue(1);
    panel->epochs_edit()->setValue(7);
    const QString yaml = QString::fromStdString((runs_.path() / "run.yaml").string());
    QVERIFY2(panel->save_config(yaml), qPrintable(panel->message()));
    const pipelines::TrainConfig saved = pipelines::load_train_config(yaml.toStdString());
    QCOMPARE(saved.model, std::string("tiny"));
    QCOMPARE(saved.level.value_or(-1), 1);
    QCOMPARE(saved.epochs, int64_t{7});
    panel->epochs_edit()->setValue(3);
    QVERIFY(panel->load_config(yaml));
    QCOMPARE(panel->epochs_edit()->value(), 7);
    QVERIFY(!panel->load_config(QStringLiteral("/nonexistent/run.yaml")));
    QVERIFY2(panel->message().contains(QStringLiteral("run.yaml")), qPrintable(panel->message()));
  }

  // Untiled training in 1 KiB: each slide is skipped with the planner's reason, and the window
  // says so (in the panel and the log) instead of failing silently.
  void aBudgetTooSmallIsAMessageInTheWindow() {
    TrainingPanel* panel = window_.training();
    window_.open_manifest(manifest_);
    QCOMPARE(panel->manifest_edit()->text(), manifest_);
    panel->model_edit()->setCurrentText(QStringLiteral("tiny"));
    panel->epochs_edit()->setValue(1);
    panel->budget_edit()->setText(QStringLiteral("1KiB"));
    panel->strategy_edit()->setCurrentText(QStringLiteral("none"));  // untiled
    panel->output_edit()->setText(QString::fromStdString((runs_.path() / "small").string()));
    QSignalSpy finished(panel, &TrainingPanel::runFinished);
    QSignalSpy failed(panel, &TrainingPanel::runFailed);
    QVERIFY2(panel->start(), qPrintable(panel->message()));
    QTRY_VERIFY_WITH_TIMEOUT(!panel->running(), kTimeoutMs);
    QVERIFY2(panel->message().contains(QStringLiteral("1 KiB")) ||
                 panel->message().contains(QStringLiteral("budget")),
             qPrintable(panel->message()));
    qInfo("budget too small: %s", qPrintable(panel->message()));
    panel->strategy_edit()->setCurrentText(QStringLiteral("auto"));
  }

  void trainsOnGeneratedSlidesShowsTilesMemoryAndMetricsAndStops() {
    TrainingPanel* panel = window_.training();
    panel->model_edit()->setCurrentText(QStringLiteral("tiny"));
    panel->resolution_kind()->setCurrentText(QStringLiteral("level"));
    panel->resolution_value()->setValue(1);
    panel->epochs_edit()->setValue(2);
    panel->budget_edit()->setText(QStringLiteral("64MiB"));
    panel->strategy_edit()->setCurrentText(QStringLiteral("auto"));
    const auto run = runs_.path() / "run";
    panel->output_edit()->setText(QString::fromStdString(run.string()));

    StallMeter stalls;
    QSignalSpy finished(panel, &TrainingPanel::runFinished);
    QVERIFY2(panel->start(), qPrintable(panel->message()));
    QVERIFY(panel->running());
    QVERIFY(!panel->start_button()->isEnabled());
    QVERIFY(panel->stop_button()->isEnabled());

    // Tile states seen while the run goes (the grid is per segment, so sample it as it runs).
    int64_t most_states = 0, most_done = 0;
    const auto watch = QObject::connect(panel, &TrainingPanel::batchApplied, panel, [&] {
      const TileStateModel& t = panel->tiles();
      most_states = std::max(most_states, t.tiles());
      most_done = std::max(most_done, t.count(TileState::kDone));
      // Stop as soon as an epoch is shown: on these tiny slides an epoch takes a fraction of a
      // second, and a click after the test's own polling could come after the run ended.
      if (panel->metrics().epochs() >= 1) panel->stop();
    });
    QTRY_VERIFY_WITH_TIMEOUT(panel->tile_events() > 0, kTimeoutMs);
    QTRY_VERIFY_WITH_TIMEOUT(panel->metrics().epochs() >= 1 || !panel->running(), kTimeoutMs);
    QVERIFY2(panel->metrics().epochs() >= 1, qPrintable(panel->message()));
    panel->stop();
    QVERIFY(!panel->stop_button()->isEnabled() || !panel->running());
    if (finished.isEmpty()) QVERIFY(finished.wait(kTimeoutMs));
    QVERIFY(!panel->running());
    QObject::disconnect(watch);
    QVERIFY(panel->start_button()->isEnabled());

    QVERIFY(panel->summary().has_value());
    // Stopped after the current slide of epoch 2 (or, on a fast machine, the run was done first).
    QVERIFY(panel->summary()->interrupted || panel->summary()->epochs_done == 2);
    qInfo("stop: %s after %lld epoch(s)",
          panel->summary()->interrupted ? "interrupted" : "finished",
          static_cast<long long>(panel->summary()->epochs_done));
    QVERIFY(std::filesystem::exists(run / "checkpoints" / "last.h5"));
    QVERIFY(panel->checkpoint_edit()->text().endsWith(QStringLiteral(".h5")));
    QVERIFY(most_states > 0);
    QVERIFY(most_done > 0);
    QVERIFY(!panel->tiles().empty());
    QVERIFY(panel->memory_chart()->points() > 0);
    QVERIFY(panel->memory().budget() > 0);
    QVERIFY(panel->memory().predicted_peak() > 0);
    QVERIFY(panel->metrics_chart()->points() >= 1);
    QVERIFY(panel->slides_done() > 0);
    QVERIFY(!panel->log()->toPlainText().isEmpty());
    // The thumbnail is read off the UI thread and may land after a run this short.
    QTRY_VERIFY_WITH_TIMEOUT(!panel->tile_progress()->thumbnail().isNull(), kTimeoutMs);
    qInfo(
        "tile events %lld, memory points %d, category series %d, epochs %d, slides %d; "
        "largest UI-thread stall while training: %lld ms over %d ticks",
        static_cast<long long>(panel->tile_events()), panel->memory_chart()->points(),
        panel->memory_chart()->category_series(), panel->metrics().epochs(), panel->slides_done(),
        static_cast<long long>(stalls.largest_ms()), stalls.ticks());
    if (qEnvironmentVariableIntValue("TESSEL_TIMING_CHECKS") == 1) {
      QVERIFY2(stalls.largest_ms() < 100, qPrintable(QString::number(stalls.largest_ms())));
    }
  }

  // A long run stopped on its first tiles: it ends after the current slide, interrupted, with a
  // checkpoint to resume from.
  void stopEndsTheRunAfterTheCurrentSlideWithACheckpoint() {
    TrainingPanel* panel = window_.training();
    panel->epochs_edit()->setValue(200);
    const auto run = runs_.path() / "stopped";
    panel->output_edit()->setText(QString::fromStdString(run.string()));
    QSignalSpy finished(panel, &TrainingPanel::runFinished);
    QVERIFY2(panel->start(), qPrintable(panel->message()));
    QTRY_VERIFY_WITH_TIMEOUT(panel->tile_events() > 0, kTimeoutMs);
    panel->stop();
    QVERIFY(!panel->stop_button()->isEnabled());
    QVERIFY(panel->message().startsWith(QStringLiteral("Stopping")));
    QVERIFY(finished.wait(kTimeoutMs));
    QVERIFY(panel->summary()->interrupted);
    QVERIFY(panel->summary()->epochs_done < 200);
    QVERIFY(panel->message().startsWith(QStringLiteral("Stopped")));
    QVERIFY(std::filesystem::exists(run / "checkpoints" / "last.h5"));
    panel->epochs_edit()->setValue(2);
  }

  // The stopped run's folder holds last.h5, so the panel offers to resume it: Start reads
  // Resume, and the run goes on from the checkpoint's epoch (the metrics start after the epochs
  // already done) to the end; unchecked, the pipeline refuses to start afresh over the run and
  // the window says why.
  void resumesTheStoppedRunFromItsCheckpoint() {
    TrainingPanel* panel = window_.training();
    const auto run = runs_.path() / "stopped";
    QVERIFY(panel->summary().has_value() && panel->summary()->interrupted);
    const int64_t done = panel->summary()->epochs_done;
    panel->output_edit()->setText(QString::fromStdString((runs_.path() / "fresh").string()));
    QVERIFY(!panel->resume_box()->isEnabled());
    QVERIFY(!panel->resume_box()->isChecked());
    QCOMPARE(panel->start_button()->text(), QStringLiteral("Start"));
    panel->output_edit()->setText(QString::fromStdString(run.string()));
    QVERIFY(panel->resume_box()->isEnabled());
    QVERIFY(panel->resume_box()->isChecked());
    QCOMPARE(panel->start_button()->text(), QStringLiteral("Resume"));

    // Unchecked: the run folder is not overwritten; the pipeline's reason is in the window.
    panel->resume_box()->setChecked(false);
    QCOMPARE(panel->start_button()->text(), QStringLiteral("Start"));
    QSignalSpy failed(panel, &TrainingPanel::runFailed);
    QVERIFY2(panel->start(), qPrintable(panel->message()));
    QVERIFY(failed.wait(kTimeoutMs));
    QVERIFY2(panel->message().contains(QStringLiteral("--resume")), qPrintable(panel->message()));

    panel->resume_box()->setChecked(true);
    panel->epochs_edit()->setValue(static_cast<int>(done) + 2);
    QSignalSpy finished(panel, &TrainingPanel::runFinished);
    QVERIFY2(panel->start(), qPrintable(panel->message()));
    QVERIFY(panel->message().startsWith(QStringLiteral("Resuming")));
    QVERIFY(!panel->resume_box()->isEnabled());
    QVERIFY(finished.wait(kTimeoutMs));
    QVERIFY(!panel->summary()->interrupted);
    QCOMPARE(panel->summary()->epochs_done, done + 2);
    // Two epochs reported, numbered after the ones the stopped run did.
    QCOMPARE(panel->metrics().epochs(), 2);
    QCOMPARE(panel->metrics().train_loss().front().x(), static_cast<double>(done + 1));
    QCOMPARE(panel->metrics().train_loss().back().x(), static_cast<double>(done + 2));
    const QString log = panel->log()->toPlainText();
    QVERIFY2(log.contains(QStringLiteral("resuming ")) &&
                 log.contains(QStringLiteral(" at epoch %1,").arg(done + 1)),
             qPrintable(log.left(2000)));
    QVERIFY(panel->resume_box()->isEnabled());  // the folder still holds a run to go on with
    qInfo("resumed after %lld epoch(s) to %lld", static_cast<long long>(done),
          static_cast<long long>(panel->summary()->epochs_done));
    panel->epochs_edit()->setValue(2);
  }

  // For the docs: level 0 (512²) in 8 MiB, so the planner tiles each slide and the grid shows;
  // the panel is grabbed from the UI thread while tiles are running after the first epoch.
  void rendersThePanelMidRunWithTheTileGridAndMemoryChart() {
    TrainingPanel* panel = window_.training();
    auto* dock = window_.findChild<QDockWidget*>(QStringLiteral("training"));
    QVERIFY(dock != nullptr);
    window_.resizeDocks({dock}, {560}, Qt::Vertical);
    // The whole form, so this test also runs alone (the Xvfb screenshots run it and the next).
    panel->set_manifest(manifest_);
    panel->model_edit()->setCurrentText(QStringLiteral("tiny"));
    panel->resolution_kind()->setCurrentText(QStringLiteral("level"));
    panel->strategy_edit()->setCurrentText(QStringLiteral("auto"));
    panel->resolution_value()->setValue(0);
    panel->epochs_edit()->setValue(3);
    panel->budget_edit()->setText(QStringLiteral("8MiB"));
    panel->output_edit()->setText(QString::fromStdString((runs_.path() / "docs").string()));
    bool grabbed = false;
    const auto watch = QObject::connect(panel, &TrainingPanel::batchApplied, panel, [&] {
      const TileStateModel& t = panel->tiles();
      if (grabbed || !panel->running() || panel->metrics().epochs() < 1 || t.tiles() < 4 ||
          t.count(TileState::kDone) < 2 || panel->tile_progress()->thumbnail().isNull()) {
        return;
      }
      grabbed = true;
      save_screenshot(panel, QStringLiteral("training"));
    });
    QVERIFY2(panel->start(), qPrintable(panel->message()));
    QTRY_VERIFY_WITH_TIMEOUT(!panel->running(), kTimeoutMs);
    QObject::disconnect(watch);
    QVERIFY2(grabbed, qPrintable(panel->message()));
  }

  void aCheckpointsHeatmapIsOverlaidOnTheViewersSlide() {
    QSignalSpy opened(&window_, &MainWindow::slideOpened);
    window_.open_slide(
        QString::fromStdString((data_.path() / "slides" / slides_.front().file).string()));
    QVERIFY(opened.wait(kTimeoutMs));
    QSignalSpy shown(&window_, &MainWindow::heatmapShown);
    window_.show_heatmap(window_.training()->checkpoint_edit()->text());
    QVERIFY2(shown.wait(kTimeoutMs), qPrintable(window_.last_error()));
    QVERIFY(window_.slide_view()->has_heatmap());
    window_.training()->opacity_slider()->setValue(30);
    QCOMPARE(window_.slide_view()->heatmap_opacity(), 0.3);
    window_.training()->opacity_slider()->setValue(60);
    QTRY_VERIFY_WITH_TIMEOUT(window_.slide_view()->visible_tiles_loaded(), kTimeoutMs);
    save_screenshot(&window_, QStringLiteral("viewer-heatmap"));
  }

  void aHeatmapOfAMissingCheckpointIsAMessage() {
    QSignalSpy failed(&window_, &MainWindow::heatmapFailed);
    window_.show_heatmap(QStringLiteral("/nonexistent/best.h5"));
    QVERIFY(failed.wait(kTimeoutMs));
    QVERIFY2(window_.last_error().contains(QStringLiteral("best.h5")),
             qPrintable(window_.last_error()));
  }

 private:
  test::TempFolder data_, runs_;
  std::vector<io::SampleSlide> slides_;
  QString manifest_;
  MainWindow window_;
};

}  // namespace tessel::gui

QTEST_MAIN(tessel::gui::TrainingPanelTest)
#include "training_panel_test.moc"
