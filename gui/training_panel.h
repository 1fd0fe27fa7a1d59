// The training panel: the main config keys with validation messages (the same YAML files as
// `tessel train --config`), Start / Stop, and the live views: tile progress over the slide's
// thumbnail, memory chart, metrics chart, log. When the output folder already holds a run
// (checkpoints/last.h5), Start becomes Resume: the run continues from that checkpoint, as
// `tessel train --resume` does, with the run's own config.yaml: while Resume is checked the
// fields a checkpoint depends on (manifest, model, batch norm, resolution, batch) show the run's
// values and are locked, and a form that differs from the run in the others (epochs, learning
// rate, budget, strategy) says so and asks before the run starts. The run is a TrainingRun
// (worker thread); the panel only applies its batched events to the models and repaints. Also
// asks for heatmaps of a checkpoint over the viewer's slide (computed by the main window) with an
// opacity slider.
//
// Before Start the Plan row says what the form's run will cost: the plan's predicted peak
// memory and an estimate of an epoch's time (gui/run_estimate.h), made on a worker thread a
// moment after the form last changed; "—" and the reason (the planner's, for a budget too small)
// when no plan can be made. Resume shows the whole run: the earlier epochs read back from the
// run folder's metrics.csv; the memory chart and the log go on from where the run stopped (or,
// for a run this window did not show, the log starts with the run's train.log).
#pragma once

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QGroupBox>
#include <QHash>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSlider>
#include <QSpinBox>
#include <QThreadPool>
#include <QTimer>
#include <QWidget>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gui/elided_label.h"
#include "gui/prompts.h"
#include "gui/run_estimate.h"
#include "gui/training_models.h"
#include "gui/training_run.h"
#include "gui/training_views.h"
#include "pipelines/train_config.h"

namespace tessel::gui {

class TrainingPanel : public QWidget {
  Q_OBJECT

 public:
  explicit TrainingPanel(QWidget* parent = nullptr);
  ~TrainingPanel() override;

  // The form's settings before a config is loaded: the demo's (sample_data/demo.yaml): vgg-mini
  // with a max-pool head at 8 µm per pixel, so a first run on a cohort of slides finishes in
  // minutes on a laptop's CPU (the demo's 16 slides: an epoch in about half a minute on 2 cores).
  static pipelines::TrainConfig default_config();
  // This machine's FLOP rate for the run's network on its device (the config's `device`, model,
  // norm and head) for the estimate, measured once (gui/run_estimate.h) and kept in QSettings
  // under this key.
  static QString flop_rate_key(const pipelines::TrainConfig& config);

  // The form as a config: the loaded file's other keys kept, the form's keys applied; while
  // resuming, the run's config.yaml with the form's changes (resume_changes()). Empty with
  // message() saying why when the config is not valid.
  std::optional<pipelines::TrainConfig> config();
  void set_config(const pipelines::TrainConfig& config);  // fills the form
  // Relative paths in the file are taken against its folder (manifest, init_weights and a model
  // file: or the nearest folder above it that holds them, as sample_data/demo.yaml, written for
  // `tessel train` run from the repository, names sample_data/manifest.csv); the form shows them
  // absolute. False: message() says why.
  // A run's own config.yaml (its folder holds checkpoints/) is that run: the output is its
  // folder, never a folder nested in it, and Resume is offered.
  bool load_config(const QString& path);
  bool save_config(const QString& path);
  // The folder of the last run started from the panel, kept in QSettings under kLastRunKey.
  // restore_last_run(), at the app's start: when it still holds checkpoints/last.h5, the form is
  // that run (its config.yaml, every field) with Resume checked, and a message says so. False:
  // no such run.
  static constexpr const char* kLastRunKey = "training/last_run";
  bool restore_last_run();
  // The same for a given run folder (a project's last run): false when it holds no last.h5.
  bool offer_run(const QString& folder);
  // The output field: where Start writes the run (a project's next runs/runN).
  void set_output(const QString& folder);
  QString output_folder() const;
  // The manifest field; while resuming, the one used once Resume is unchecked.
  void set_manifest(const QString& csv);
  // A network file as the model: an .h5 as it is; an .onnx imported to NAME.h5 beside it first
  // (replacing one there). False: not imported (or resuming: the model is the run's), message()
  // says why; else message() says what.
  bool use_network(const QString& path);

  // Resumes when resume_box() is checked (it can be only when the output folder holds
  // checkpoints/last.h5), asking first when the form differs from the run's config. False: the
  // config is not valid (message() says why), the change was declined, or a run is going.
  bool start();
  void stop();  // at the next tile, with a checkpoint of the slides finished
  bool running() const { return run_.running(); }

  // The questions the panel asks (resume with changes); nullptr: dialogs. Not owned.
  void set_prompts(Prompts* prompts) { prompts_ = prompts; }
  // Resume is checked (and possible): Start continues the output folder's run.
  bool resuming() const { return resume_available_ && resume_->isChecked(); }
  // While resuming: the output folder's config.yaml, the run's output being that folder; empty
  // when it could not be read (message() says why).
  const std::optional<pipelines::TrainConfig>& run_config() const { return run_config_; }
  // While resuming: the form's fields that differ from run_config(), as "key: run → form".
  QStringList resume_changes() const;

  const QString& message() const { return message_; }
  // At most three lines of the message, the whole in its tooltip.
  ElidedLabel* message_label() { return message_label_; }
  // The Plan row: predicted peak and epoch time, "planning…", or "— reason" (the tooltip: the
  // details).
  ElidedLabel* plan_label() { return plan_label_; }
  // The last estimate shown, empty while planning or when none could be made (plan_label()
  // says why). estimateShown follows every update of the Plan row.
  const std::optional<RunEstimate>& estimate() const { return estimate_; }
  double flops_per_second() const { return flops_per_second_; }  // 0: not measured yet
  const TileStateModel& tiles() const { return tiles_; }
  const MemorySeries& memory() const { return memory_; }
  const MetricsSeries& metrics() const { return metrics_; }
  MemoryChart* memory_chart() { return memory_chart_; }
  MetricsChart* metrics_chart() { return metrics_chart_; }
  QLabel* verdict_label() { return verdict_label_; }  // judge_run's sentence
  TileProgressWidget* tile_progress() { return tile_progress_; }
  QPlainTextEdit* log() { return log_; }
  int64_t tile_events() const { return tile_events_; }  // received since Start
  int slides_done() const { return slides_done_; }
  const std::optional<pipelines::TrainSummary>& summary() const { return summary_; }

  // Form fields, for tests and the main window.
  QLineEdit* manifest_edit() { return manifest_; }
  QComboBox* model_edit() { return model_; }
  QComboBox* resolution_kind() { return resolution_kind_; }
  QDoubleSpinBox* resolution_value() { return resolution_value_; }
  QSpinBox* epochs_edit() { return epochs_; }
  QDoubleSpinBox* lr_edit() { return lr_; }
  QSpinBox* batch_edit() { return batch_; }
  QLineEdit* budget_edit() { return budget_; }
  QComboBox* strategy_edit() { return strategy_; }
  QComboBox* norm_edit() { return norm_; }
  // The config's `pool`: avg, max or attention (the attention-MIL head, docs/models.md; its other
  // keys come from a loaded config). Locked while resuming, as the model is.
  QComboBox* head_edit() { return head_; }
  QLineEdit* output_edit() { return output_; }
  QPushButton* start_button() { return start_button_; }
  QPushButton* stop_button() { return stop_button_; }
  QCheckBox* resume_box() { return resume_; }
  QLabel* resume_note() { return resume_note_; }  // what is locked, and what differs
  QLineEdit* checkpoint_edit() { return checkpoint_; }
  QSlider* opacity_slider() { return opacity_; }
  // The heatmap controls (checkpoint, Heatmap of the viewer's slide, Predict the test slides,
  // opacity, outlines, legend), taken out of the panel for a dock of their own (MainWindow):
  // they are the viewer's, and below the form they were below the fold.
  QWidget* take_heatmap_box();
  QDoubleSpinBox* outline_threshold() { return outline_threshold_; }
  // The heatmap's class and a turbo colour bar 0 … 1 (set by the main window).
  void set_heatmap_legend(const QString& class_name);

 signals:
  void runStarted();
  void runFinished(QString summary);
  void runFailed(QString message);
  void batchApplied();  // after each drained batch of events
  void heatmapRequested(QString checkpoint);
  void heatmapOpacityChanged(double opacity);
  void heatmapOutlineRequested(double threshold);
  void predictionsRequested(QString checkpoint);
  void message_changed(QString message);
  void estimateShown();

 private:
  // The form's fields (the output folder aside) and the config behind the keys it does not show.
  struct FormState {
    pipelines::TrainConfig base;
    QString manifest, model, norm, head, resolution_kind;
    double resolution = 0;
    QString budget, strategy;
    int epochs = 1;
    double lr = 0;
    int batch = 1;
  };
  // A field of the form that differs from the run's config, and its override.
  struct Change {
    QString key, run, form;
    std::string override;
  };
  static FormState form_of(const pipelines::TrainConfig& config);
  // The form as a config, or why not in `error` (config() shows it as the message).
  std::optional<pipelines::TrainConfig> make_config(QString* error) const;
  // The Plan row: planned a moment after the form's last change (not while a run goes).
  void schedule_estimate();
  // `measure`: time this machine if its FLOP rate is not known yet (not while a run goes).
  void start_estimate(bool measure = true);
  void show_estimate(const RunEstimate& estimate);
  // Resuming `folder`: the earlier epochs from its metrics.csv; the memory chart and the log
  // kept when they show that run, else cleared and the log started with its train.log.
  void show_run_history(const QString& folder);
  void on_run_ended();  // the progress line cleared
  FormState read_form() const;
  void write_form(const FormState& form);
  void write_locked(const FormState& form);  // the fields locked while resuming, and the base
  std::vector<Change> changes() const;
  // Locks the form to the output folder's run while resuming: every field shows the run's
  // config.yaml, so that only what the user changes afterwards is a change Resume asks about;
  // unlocks (the locked fields as they were) when not. `reload`: the run's config.yaml again,
  // though the folder is the same.
  void sync_resume(bool reload = false);
  void show_resume_note();
  Prompts& prompts() { return prompts_ != nullptr ? *prompts_ : dialog_prompts(); }
  void show_message(const QString& message, bool error);
  void apply(const TrainingEvents& batch);
  void on_slide(const pipelines::SlideProgress& slide);
  void refresh_metrics();  // the chart and the verdict under it
  void update_buttons();
  // The Model button: asks for a network file, and whether to replace an earlier import.
  void choose_network();
  void update_resume();  // the output folder's last.h5 enables (and, when it appears, checks) it
  void load_thumbnail(const std::string& slide_name);

  TrainingRun run_;
  TileStateModel tiles_;
  MemorySeries memory_;
  MetricsSeries metrics_;
  pipelines::TrainConfig base_;  // the loaded file; keys the form does not show come from it
  Prompts* prompts_ = nullptr;
  // Resuming: the folder whose config.yaml the form is locked to, that config (or why not), and
  // the locked fields as they were before, for when Resume is unchecked.
  QString locked_folder_;
  std::optional<pipelines::TrainConfig> run_config_;
  QString run_config_error_;
  std::optional<FormState> before_resume_;
  QList<QWidget*> locked_;  // the fields a checkpoint depends on

  QLineEdit *manifest_, *budget_, *output_, *checkpoint_;
  QComboBox *model_, *resolution_kind_, *strategy_, *norm_, *head_;
  QDoubleSpinBox *resolution_value_, *lr_;
  QSpinBox *epochs_, *batch_;
  QPushButton *start_button_, *stop_button_;
  QCheckBox* resume_;
  bool resume_available_ = false;
  QLabel *legend_, *resume_note_;
  ElidedLabel *message_label_, *plan_label_;
  QSlider* opacity_;
  QGroupBox* heatmap_box_;
  QDoubleSpinBox* outline_threshold_;
  TileProgressWidget* tile_progress_;
  MemoryChart* memory_chart_;
  MetricsChart* metrics_chart_;
  QLabel* verdict_label_;
  QPlainTextEdit* log_;
  QString message_;
  QString last_warning_;  // the run's latest warning (a skipped slide says why)

  QThreadPool thumbnails_;
  QHash<QString, QString> slide_paths_;  // file name → path, from the manifest at Start
  QHash<QString, QImage> thumbnail_cache_;
  QString current_slide_;
  QString current_name_;  // the running slide's file name
  std::chrono::steady_clock::time_point slide_start_, run_start_;
  int64_t slide_tiles_done_ = 0;
  int64_t tile_events_ = 0;
  int slides_done_ = 0;
  int64_t slides_left_ = 0;  // in the run, the running slide included; 0: not known yet
  std::optional<pipelines::TrainSummary> summary_;
  // The run folder the charts and the log show (a run that ended here), and the seconds its
  // memory chart had reached: a resumed run's samples go on from there.
  QString charts_run_, running_folder_;
  double memory_offset_s_ = 0;
  // Slides of an epoch by phase, as the run reports them, for the ETA of a resumed run too.
  int64_t train_count_ = 0, val_count_ = 0;

  // The Plan row's estimate: debounced, on its own thread; an estimate started later makes an
  // earlier one stale (cancelled, its result dropped).
  QTimer estimate_timer_;
  QThreadPool estimates_;
  std::shared_ptr<RunEstimator> estimator_;
  std::shared_ptr<std::atomic<bool>> estimate_cancelled_;
  quint64 estimate_serial_ = 0;
  std::optional<RunEstimate> estimate_;
  double flops_per_second_ = 0;
  int epochs_for_estimate_ = 1;
};

}  // namespace tessel::gui
