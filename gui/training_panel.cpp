// LibTorch-free headers only before Qt's: Qt defines `slots` as a macro.
#include "gui/training_panel.h"

#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QLinearGradient>
#include <QMessageBox>
#include <QPainter>
#include <QSettings>
#include <QSignalBlocker>
#include <QSplitter>
#include <QVBoxLayout>

#include <exception>

#include "gui/elided_label.h"
#include "gui/heatmap_overlay.h"
#include "gui/slide_document.h"
#include "gui/wheel_guard.h"
#include "gui/words.h"
#include "io/durable.h"
#include "io/manifest.h"
#include "pipelines/import_network.h"

namespace tessel::gui {

namespace {

constexpr int kEstimateDebounceMs = 400;
constexpr qint64 kLogTailBytes = 1 << 20;  // of a resumed run's train.log

QString duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) {
    return QStringLiteral("%1:%2:%3")
        .arg(s / 3600)
        .arg(s / 60 % 60, 2, 10, QLatin1Char('0'))
        .arg(s % 60, 2, 10, QLatin1Char('0'));
  }
  return QStringLiteral("%1:%2").arg(s / 60).arg(s % 60, 2, 10, QLatin1Char('0'));
}

// A relative input path of a config file: against the file's folder, else the nearest folder
// above it that holds it (a project's root, as sample_data/demo.yaml is written); neither: the
// file's folder, so the message names a path that can be checked.
std::filesystem::path resolve_input(const std::filesystem::path& path,
                                    const std::filesystem::path& folder) {
  if (path.empty() || path.is_absolute()) return path;
  std::error_code error;
  for (std::filesystem::path dir = folder;; dir = dir.parent_path()) {
    if (std::filesystem::exists(dir / path, error)) return (dir / path).lexically_normal();
    if (dir == dir.parent_path()) break;
  }
  return (folder / path).lexically_normal();
}

// The last `bytes` of a text file, from its first whole line.
QString read_tail(const std::filesystem::path& path, qint64 bytes) {
  QFile file(QString::fromStdString(path.string()));
  if (!file.open(QIODevice::ReadOnly)) return {};
  const qint64 start = std::max<qint64>(0, file.size() - bytes);
  file.seek(start);
  QByteArray text = file.readAll();
  if (start > 0) text = text.mid(text.indexOf('\n') + 1);
  while (text.endsWith('\n')) text.chop(1);
  return QString::fromUtf8(text);
}

pipelines::TrainConfig resolve_paths(pipelines::TrainConfig c, const std::filesystem::path& file) {
  const std::filesystem::path folder = std::filesystem::absolute(file).parent_path();
  c.manifest = resolve_input(c.manifest, folder);
  c.init_weights = resolve_input(c.init_weights, folder);
  if (c.model.ends_with(".h5")) c.model = resolve_input(c.model, folder).string();
  if (!c.output.empty() && c.output.is_relative())
    c.output = (folder / c.output).lexically_normal();
  return c;
}

}  // namespace

TrainingPanel::TrainingPanel(QWidget* parent) : QWidget(parent) {
  thumbnails_.setMaxThreadCount(1);

  manifest_ = new QLineEdit(this);
  manifest_->setPlaceholderText(tr("dataset CSV"));
  auto* browse = new QPushButton(tr("…"), this);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Manifest"), {},
                                                      tr("Manifests (*.csv);;All files (*)"));
    if (!path.isEmpty()) manifest_->setText(path);
  });
  auto* manifest_row = new QHBoxLayout();
  manifest_row->addWidget(manifest_);
  manifest_row->addWidget(browse);
  model_ = new QComboBox(this);
  model_->setEditable(true);
  model_->addItems({QStringLiteral("vgg-mini"), QStringLiteral("tiny"), QStringLiteral("resnet18"),
                    QStringLiteral("resnet34"), QStringLiteral("resnet50"),
                    QStringLiteral("darknet19")});
  model_->setToolTip(tr("A built-in network, or a checkpoint that holds one (NET.h5)"));
  // A network of one's own: a checkpoint that holds one, or an ONNX file imported next to it
  // (docs/models.md).
  auto* browse_model = new QPushButton(tr("…"), this);
  browse_model->setToolTip(tr("Choose a network file: NET.h5, or NET.onnx to import"));
  connect(browse_model, &QPushButton::clicked, this, [this] { choose_network(); });
  auto* model_row = new QHBoxLayout();
  model_row->addWidget(model_, 1);
  model_row->addWidget(browse_model);
  norm_ = new QComboBox(this);
  norm_->addItems({QStringLiteral("frozen"), QStringLiteral("batch"), QStringLiteral("group")});
  norm_->setToolTip(
      tr("The built-in ResNets' and darknet19's batch norms: frozen (running statistics, as "
         "whole-slide systems train), batch (training mode, statistics over the whole slide, "
         "exact; slower, docs/barriers.md) or group norm"));
  head_ = new QComboBox(this);
  head_->addItems({QStringLiteral("avg"), QStringLiteral("max"), QStringLiteral("attention")});
  head_->setToolTip(
      tr("How the slide's features become one prediction: a global average or max pool, or "
         "attention (attention-MIL over the whole slide, exact; heatmaps show where it looked; "
         "docs/models.md)"));
  resolution_kind_ = new QComboBox(this);
  resolution_kind_->addItems(
      {QStringLiteral("level"), QStringLiteral("mpp"), QStringLiteral("magnification")});
  resolution_value_ = new QDoubleSpinBox(this);
  resolution_value_->setDecimals(3);
  resolution_value_->setRange(0, 1000);
  connect(resolution_kind_, &QComboBox::currentTextChanged, this, [this](const QString& kind) {
    resolution_value_->setDecimals(kind == QLatin1String("level") ? 0
                                   : kind == QLatin1String("mpp") ? 3
                                                                  : 2);
  });
  resolution_value_->setDecimals(0);
  auto* resolution_row = new QHBoxLayout();
  resolution_row->addWidget(resolution_kind_);
  resolution_row->addWidget(resolution_value_, 1);
  budget_ = new QLineEdit(this);
  strategy_ = new QComboBox(this);
  strategy_->setEditable(true);
  strategy_->addItems({QStringLiteral("auto"), QStringLiteral("none"), QStringLiteral("grid"),
                       QStringLiteral("rows"), QStringLiteral("rows-shared")});
  epochs_ = new QSpinBox(this);
  epochs_->setRange(1, 100000);
  lr_ = new QDoubleSpinBox(this);
  lr_->setDecimals(6);
  lr_->setRange(0, 10);
  lr_->setSingleStep(1e-4);
  batch_ = new QSpinBox(this);
  batch_->setRange(1, 100000);
  output_ = new QLineEdit(this);

  auto* form = new QFormLayout();
  form->addRow(tr("Manifest"), manifest_row);
  form->addRow(tr("Model"), model_row);
  form->addRow(tr("Batch norm"), norm_);
  form->addRow(tr("Head"), head_);
  form->addRow(tr("Resolution"), resolution_row);
  form->addRow(tr("Memory budget"), budget_);
  form->addRow(tr("Strategy"), strategy_);
  form->addRow(tr("Epochs"), epochs_);
  form->addRow(tr("Learning rate"), lr_);
  form->addRow(tr("Batch (slides)"), batch_);
  form->addRow(tr("Output folder"), output_);
  plan_label_ = new ElidedLabel(3, this);
  plan_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  form->addRow(tr("Plan"), plan_label_);

  auto* load = new QPushButton(tr("Load…"), this);
  auto* save = new QPushButton(tr("Save…"), this);
  start_button_ = new QPushButton(tr("Start"), this);
  stop_button_ = new QPushButton(tr("Stop"), this);
  stop_button_->setToolTip(
      tr("Stops at the next tile and writes a checkpoint of the slides finished: the slide in "
         "progress is trained again on Resume"));
  connect(load, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Training config"), {},
                                                      tr("Configs (*.yaml *.yml *.json)"));
    if (!path.isEmpty()) load_config(path);
  });
  connect(save, &QPushButton::clicked, this, [this] {
    const QString path =
        QFileDialog::getSaveFileName(this, tr("Training config"), {}, tr("Configs (*.yaml *.yml)"));
    if (!path.isEmpty()) save_config(path);
  });
  connect(start_button_, &QPushButton::clicked, this, [this] { start(); });
  connect(stop_button_, &QPushButton::clicked, this, &TrainingPanel::stop);
  auto* buttons = new QHBoxLayout();
  for (QPushButton* b : {load, save, start_button_, stop_button_}) buttons->addWidget(b);
  resume_ = new QCheckBox(tr("Resume from the output folder's checkpoints/last.h5"), this);
  resume_->setToolTip(
      tr("The output folder holds a run: continue it where it stopped (weights, optimizer, "
         "epoch and slide). Unchecked, choose another output folder."));
  connect(resume_, &QCheckBox::toggled, this, [this] {
    sync_resume();
    update_buttons();
  });
  connect(output_, &QLineEdit::textChanged, this, &TrainingPanel::update_resume);
  resume_note_ = new QLabel(this);
  resume_note_->setWordWrap(true);
  resume_note_->hide();
  locked_ = {manifest_,         browse, model_, browse_model, norm_, head_, resolution_kind_,
             resolution_value_, batch_};
  // The fields a resumed run may change: the note says which differ from the run as they do.
  connect(budget_, &QLineEdit::textChanged, this, &TrainingPanel::show_resume_note);
  connect(strategy_, &QComboBox::currentTextChanged, this, &TrainingPanel::show_resume_note);
  connect(epochs_, &QSpinBox::valueChanged, this, &TrainingPanel::show_resume_note);
  connect(lr_, &QDoubleSpinBox::valueChanged, this, &TrainingPanel::show_resume_note);

  message_label_ = new ElidedLabel(3, this);
  message_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  // The Plan row follows the form, a moment after its last change.
  estimator_ = std::make_shared<RunEstimator>();
  estimates_.setMaxThreadCount(1);
  estimate_timer_.setSingleShot(true);
  estimate_timer_.setInterval(kEstimateDebounceMs);
  connect(&estimate_timer_, &QTimer::timeout, this, [this] { start_estimate(); });
  for (QLineEdit* edit : {manifest_, budget_, output_}) {
    connect(edit, &QLineEdit::textChanged, this, &TrainingPanel::schedule_estimate);
  }
  for (QComboBox* box : {model_, norm_, head_, resolution_kind_, strategy_}) {
    connect(box, &QComboBox::currentTextChanged, this, &TrainingPanel::schedule_estimate);
  }
  connect(resolution_value_, &QDoubleSpinBox::valueChanged, this,
          &TrainingPanel::schedule_estimate);
  connect(epochs_, &QSpinBox::valueChanged, this, &TrainingPanel::schedule_estimate);
  connect(resume_, &QCheckBox::toggled, this, &TrainingPanel::schedule_estimate);

  // Heatmaps of a checkpoint over the viewer's slide.
  checkpoint_ = new QLineEdit(this);
  checkpoint_->setPlaceholderText(tr("checkpoint .h5"));
  auto* heatmap_button = new QPushButton(tr("Heatmap of the viewer's slide"), this);
  connect(heatmap_button, &QPushButton::clicked, this,
          [this] { emit heatmapRequested(checkpoint_->text()); });
  opacity_ = new QSlider(Qt::Horizontal, this);
  opacity_->setRange(0, 100);
  opacity_->setValue(60);
  connect(opacity_, &QSlider::valueChanged, this,
          [this](int value) { emit heatmapOpacityChanged(value / 100.0); });
  legend_ = new QLabel(this);
  // The heatmap's regions at or above a score, outlined as annotations (kept with the slide's,
  // exported with them as GeoJSON).
  outline_threshold_ = new QDoubleSpinBox(this);
  outline_threshold_->setRange(0, 1);
  outline_threshold_->setSingleStep(0.05);
  outline_threshold_->setDecimals(2);
  outline_threshold_->setValue(0.5);
  auto* outline_button = new QPushButton(tr("Outline as annotations"), this);
  outline_button->setToolTip(
      tr("Draw the outline of every region whose score is at least this as an annotation"));
  connect(outline_button, &QPushButton::clicked, this,
          [this] { emit heatmapOutlineRequested(outline_threshold_->value()); });
  auto* outline_row = new QHBoxLayout();
  outline_row->addWidget(outline_threshold_);
  outline_row->addWidget(outline_button, 1);
  heatmap_box_ = new QGroupBox(tr("Heatmap"), this);
  auto* heatmap_form = new QFormLayout(heatmap_box_);
  heatmap_form->addRow(tr("Checkpoint"), checkpoint_);
  auto* predict_button = new QPushButton(tr("Predict the test slides"), this);
  predict_button->setToolTip(
      tr("This checkpoint's prediction for every slide of the manifest's test split, against "
         "its label (the Predictions dock)"));
  connect(predict_button, &QPushButton::clicked, this,
          [this] { emit predictionsRequested(checkpoint_->text()); });
  auto* heatmap_buttons = new QHBoxLayout();
  heatmap_buttons->addWidget(heatmap_button);
  heatmap_buttons->addWidget(predict_button);
  heatmap_form->addRow(heatmap_buttons);
  heatmap_form->addRow(tr("Opacity"), opacity_);
  heatmap_form->addRow(tr("Score ≥"), outline_row);
  heatmap_form->addRow(legend_);
  set_heatmap_legend({});

  auto* left = new QWidget(this);
  auto* left_layout = new QVBoxLayout(left);
  left_layout->setContentsMargins(0, 0, 0, 0);
  left_layout->addLayout(form);
  left_layout->addLayout(buttons);
  left_layout->addWidget(resume_);
  left_layout->addWidget(resume_note_);
  left_layout->addWidget(message_label_);
  left_layout->addWidget(heatmap_box_);
  left_layout->addStretch(1);

  tile_progress_ = new TileProgressWidget(&tiles_, this);
  memory_chart_ = new MemoryChart(this);
  metrics_chart_ = new MetricsChart(this);
  log_ = new QPlainTextEdit(this);
  log_->setReadOnly(true);
  log_->setMaximumBlockCount(5000);  // a long run's log stays cheap to append to
  log_->setLineWrapMode(QPlainTextEdit::NoWrap);
  auto* views = new QWidget(this);
  auto* grid = new QGridLayout(views);
  grid->setContentsMargins(0, 0, 0, 0);
  grid->addWidget(tile_progress_, 0, 0);
  grid->addWidget(memory_chart_, 0, 1);
  grid->addWidget(metrics_chart_, 1, 0);
  grid->addWidget(log_, 1, 1);
  // What the epochs say, in words, under the numbers (judge_run).
  verdict_label_ = new QLabel(this);
  verdict_label_->setWordWrap(true);
  verdict_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  grid->addWidget(verdict_label_, 2, 0, 1, 2);
  grid->setColumnStretch(0, 2);
  grid->setColumnStretch(1, 3);

  auto* splitter = new QSplitter(Qt::Horizontal, this);
  splitter->addWidget(left);
  splitter->addWidget(views);
  splitter->setStretchFactor(1, 1);
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(splitter);

  connect(&run_, &TrainingRun::events, this, &TrainingPanel::apply);
  connect(&run_, &TrainingRun::finished, this, [this](const pipelines::TrainSummary& s) {
    summary_ = s;
    const QString text =
        tr("%1 after %2, %3 in %4 s; best epoch %5; run folder %6%7")
            .arg(s.interrupted ? tr("Stopped (checkpoint written)") : tr("Finished"))
            .arg(counted(s.epochs_done, tr("epoch"), tr("epochs")))
            .arg(counted(s.steps, tr("step"), tr("steps")))
            .arg(s.seconds, 0, 'f', 1)
            .arg(s.best_epoch)
            .arg(QString::fromStdString(s.run_dir.string()))
            .arg(s.skipped_slides > 0
                     ? tr("; %1 skipped").arg(counted(s.skipped_slides, tr("slide"), tr("slides")))
                     : QString()) +
        (last_warning_.isEmpty() ? QString() : tr(". Warning: %1").arg(last_warning_));
    show_message(text, !last_warning_.isEmpty());
    const auto best = s.run_dir / "checkpoints" / "best.h5";
    const auto last = s.run_dir / "checkpoints" / "last.h5";
    checkpoint_->setText(
        QString::fromStdString((std::filesystem::exists(best) ? best : last).string()));
    update_resume();
    sync_resume(/*reload=*/true);  // a resumed run's config.yaml holds the changes made
    charts_run_ = running_folder_;
    on_run_ended();
    update_buttons();
    emit runFinished(text);
  });
  connect(&run_, &TrainingRun::failed, this, [this](const QString& reason) {
    show_message(tr("Training failed: %1").arg(reason), true);
    charts_run_.clear();
    on_run_ended();
    update_resume();
    update_buttons();
    emit runFailed(reason);
  });

  set_config(default_config());
  update_buttons();
  guard_wheel(this);
}

TrainingPanel::~TrainingPanel() {
  thumbnails_.clear();
  thumbnails_.waitForDone();
  if (estimate_cancelled_) *estimate_cancelled_ = true;
  estimates_.clear();
  estimates_.waitForDone();
}

pipelines::TrainConfig TrainingPanel::default_config() {
  // A quick first run on the user's own slides: the first demo's settings (bench/NOTES.md: vgg-mini
  // at 8 µm per pixel reached validation accuracy 1.0 in epoch 4 of the dense task). Level 0 (the
  // config file's default) is a whole slide at full resolution: hours an epoch on a CPU.
  pipelines::TrainConfig c;
  c.model = "vgg-mini";
  c.pool = "max";
  c.mpp = 8.0;
  c.epochs = 10;
  c.schedule = "cosine";
  c.flips = true;
  c.rotations = true;
  c.color_jitter = 0.05;
  c.budget = "2GiB";
  return c;
}

QString TrainingPanel::flop_rate_key(const pipelines::TrainConfig& config) {
  return QStringLiteral("training/flops_per_second/") +
         QString::fromStdString(config.device + "/" + config.model + "/" + config.norm + "/" +
                                config.pool);
}

void TrainingPanel::set_heatmap_legend(const QString& class_name) {
  QImage bar = turbo_bar(160, 12);
  QPixmap legend(220, 30);
  legend.fill(Qt::transparent);
  QPainter p(&legend);
  p.drawImage(QPoint(10, 0), bar);
  p.setPen(palette().windowText().color());
  p.drawText(QRect(0, 13, 20, 16), Qt::AlignCenter, QStringLiteral("0"));
  p.drawText(QRect(160, 13, 20, 16), Qt::AlignCenter, QStringLiteral("1"));
  p.drawText(QRect(30, 13, 130, 16), Qt::AlignCenter,
             class_name.isEmpty() ? tr("score")
             : class_name.startsWith(QLatin1String("attention"))
                 ? tr("%1 / max").arg(class_name)
                 : tr("score of %1").arg(class_name));
  p.end();
  legend_->setPixmap(legend);
}

TrainingPanel::FormState TrainingPanel::form_of(const pipelines::TrainConfig& c) {
  FormState f;
  f.base = c;
  f.manifest = QString::fromStdString(c.manifest.string());
  f.model = QString::fromStdString(c.model);
  f.norm = QString::fromStdString(c.norm);
  f.head = QString::fromStdString(c.pool);
  if (c.mpp) {
    f.resolution_kind = QStringLiteral("mpp");
    f.resolution = *c.mpp;
  } else if (c.magnification) {
    f.resolution_kind = QStringLiteral("magnification");
    f.resolution = *c.magnification;
  } else {
    f.resolution_kind = QStringLiteral("level");
    f.resolution = c.level.value_or(0);
  }
  f.budget = QString::fromStdString(c.budget);
  f.strategy = QString::fromStdString(c.strategy);
  f.epochs = static_cast<int>(c.epochs);
  f.lr = c.lr;
  f.batch = static_cast<int>(c.batch);
  return f;
}

TrainingPanel::FormState TrainingPanel::read_form() const {
  FormState f;
  f.base = base_;
  f.manifest = manifest_->text();
  f.model = model_->currentText();
  f.norm = norm_->currentText();
  f.head = head_->currentText();
  f.resolution_kind = resolution_kind_->currentText();
  f.resolution = resolution_value_->value();
  f.budget = budget_->text();
  f.strategy = strategy_->currentText();
  f.epochs = epochs_->value();
  f.lr = lr_->value();
  f.batch = batch_->value();
  return f;
}

void TrainingPanel::write_form(const FormState& f) {
  write_locked(f);
  budget_->setText(f.budget);
  strategy_->setCurrentText(f.strategy);
  epochs_->setValue(f.epochs);
  lr_->setValue(f.lr);
}

void TrainingPanel::write_locked(const FormState& f) {
  base_ = f.base;
  manifest_->setText(f.manifest);
  model_->setCurrentText(f.model);
  norm_->setCurrentText(f.norm);
  head_->setCurrentText(f.head);
  resolution_kind_->setCurrentText(f.resolution_kind);
  resolution_value_->setValue(f.resolution);
  batch_->setValue(f.batch);
}

void TrainingPanel::set_config(const pipelines::TrainConfig& c) {
  // A config set while resuming replaces the form Resume would go back to; the run's lock is
  // taken again below (update_resume) when the output folder still holds the run.
  locked_folder_.clear();
  before_resume_.reset();
  run_config_.reset();
  for (QWidget* w : locked_) w->setEnabled(true);
  write_form(form_of(c));
  output_->setText(QString::fromStdString(c.output.string()));
  update_resume();
}

std::optional<pipelines::TrainConfig> TrainingPanel::config() {
  QString error;
  std::optional<pipelines::TrainConfig> c = make_config(&error);
  if (!c) show_message(error, true);
  return c;
}

std::optional<pipelines::TrainConfig> TrainingPanel::make_config(QString* error) const {
  if (resuming()) {
    // The run's config.yaml as it is, but for the changes the form makes to it: the fields a
    // checkpoint depends on are never read from the form.
    if (!run_config_) {
      *error = run_config_error_;
      return std::nullopt;
    }
    std::vector<std::string> overrides;
    for (const Change& c : changes()) overrides.push_back(c.override);
    overrides.push_back("output=" + output_->text().toStdString());
    try {
      return pipelines::parse_train_config(
          run_config_->to_yaml(),
          (std::filesystem::path(locked_folder_.toStdString()) / "config.yaml").string(),
          overrides);
    } catch (const std::exception& e) {
      *error = QString::fromStdString(e.what());
      return std::nullopt;
    }
  }
  // The base config without its resolution (the form sets exactly one), then the form's keys
  // as the CLI's key=value overrides: the same parser, the same messages.
  pipelines::TrainConfig base = base_;
  if (head_->currentText() != QLatin1String("attention")) {
    // The attention head's keys belong to it: another head takes them at their defaults.
    const pipelines::TrainConfig defaults;
    base.attention_hidden = defaults.attention_hidden;
    base.attention_gated = defaults.attention_gated;
    base.attention_branches = defaults.attention_branches;
    base.attention_dropout = defaults.attention_dropout;
  }
  base.mpp.reset();
  base.level.reset();
  base.magnification.reset();
  const QString kind = resolution_kind_->currentText();
  const std::string resolution =
      kind == QLatin1String("level")
          ? "level=" + std::to_string(static_cast<int>(resolution_value_->value()))
          : kind.toStdString() + "=" + QString::number(resolution_value_->value()).toStdString();
  std::vector<std::string> overrides = {
      "manifest=" + manifest_->text().toStdString(),
      "model=" + model_->currentText().toStdString(),
      "norm=" + norm_->currentText().toStdString(),
      "pool=" + head_->currentText().toStdString(),
      resolution,
      "budget=" + budget_->text().toStdString(),
      "strategy=" + strategy_->currentText().toStdString(),
      "epochs=" + std::to_string(epochs_->value()),
      "lr=" + QString::number(lr_->value(), 'g', 8).toStdString(),
      "batch=" + std::to_string(batch_->value()),
      "output=" + output_->text().toStdString(),
  };
  try {
    return pipelines::parse_train_config(base.to_yaml(), "the training panel", overrides);
  } catch (const std::exception& e) {
    *error = QString::fromStdString(e.what());
    return std::nullopt;
  }
}

std::vector<TrainingPanel::Change> TrainingPanel::changes() const {
  std::vector<Change> out;
  if (!run_config_) return out;
  const pipelines::TrainConfig& r = *run_config_;
  const auto add = [&out](const char* key, const QString& run, const QString& form,
                          const QString& value) {
    if (run != form)
      out.push_back({QString::fromLatin1(key), run, form, key + ("=" + value.toStdString())});
  };
  add("epochs", QString::number(r.epochs), QString::number(epochs_->value()),
      QString::number(epochs_->value()));
  // As the spin box shows it: a rate it cannot show exactly (1e-7 at 6 decimals) is not a change.
  const QString run_lr = QString::number(r.lr, 'f', lr_->decimals());
  const QString form_lr = QString::number(lr_->value(), 'f', lr_->decimals());
  if (run_lr != form_lr) {
    out.push_back({QStringLiteral("lr"), QString::number(r.lr, 'g', 8),
                   QString::number(lr_->value(), 'g', 8),
                   "lr=" + QString::number(lr_->value(), 'g', 8).toStdString()});
  }
  add("budget", QString::fromStdString(r.budget), budget_->text(), budget_->text());
  add("strategy", QString::fromStdString(r.strategy), strategy_->currentText(),
      strategy_->currentText());
  return out;
}

QStringList TrainingPanel::resume_changes() const {
  QStringList list;
  if (!resuming()) return list;
  for (const Change& c : changes()) {
    list << QStringLiteral("%1: %2 → %3").arg(c.key, c.run, c.form);
  }
  return list;
}

void TrainingPanel::sync_resume(bool reload) {
  const QString folder = resuming() ? output_->text() : QString();
  if (folder == locked_folder_ && !reload) {
    show_resume_note();
    return;
  }
  if (folder != locked_folder_) {
    // Leaving a run (unchecked, or another folder): the locked fields as they were before; the
    // others as the user left them.
    if (!locked_folder_.isEmpty() && before_resume_) write_locked(*before_resume_);
    if (folder.isEmpty()) before_resume_.reset();
    locked_folder_ = folder;
  }
  run_config_.reset();
  run_config_error_.clear();
  if (!folder.isEmpty()) {
    if (!before_resume_) before_resume_ = read_form();
    const auto yaml = std::filesystem::path(folder.toStdString()) / "config.yaml";
    try {
      pipelines::TrainConfig c = pipelines::load_train_config(yaml);
      // The folder resumed, wherever the run was started from (as `tessel train --resume`).
      c.output = folder.toStdString();
      run_config_ = c;
      // Every field as the run has it: epochs, budget and the others the form had before (the
      // defaults, after a restart) are not changes anyone made. What the user changes from here
      // on, the note lists and Resume asks about.
      write_form(form_of(c));
    } catch (const std::exception& e) {
      run_config_error_ =
          tr("Cannot resume the run in %1: %2").arg(folder, QString::fromStdString(e.what()));
      show_message(run_config_error_, true);
    }
  }
  for (QWidget* w : locked_) w->setEnabled(folder.isEmpty());
  show_resume_note();
}

void TrainingPanel::show_resume_note() {
  if (!resuming() || !run_config_) {
    resume_note_->hide();
    return;
  }
  QString note =
      tr("Resuming keeps the run's config.yaml: manifest, model, batch norm, head, "
         "resolution and batch are the run's.");
  const QStringList changed = resume_changes();
  if (!changed.isEmpty()) {
    note += QLatin1Char(' ') + tr("The form differs from it in %1 (asked at Resume).")
                                   .arg(changed.join(QStringLiteral("; ")));
  }
  resume_note_->setText(note);
  resume_note_->setStyleSheet(changed.isEmpty() ? QString() : QStringLiteral("color: #8a5a00;"));
  resume_note_->show();
}

bool TrainingPanel::load_config(const QString& path) {
  try {
    const std::filesystem::path file = path.toStdString();
    pipelines::TrainConfig c = resolve_paths(pipelines::load_train_config(file), file);
    // A run's own config.yaml names the folder it was started with, relative to where that was
    // (runs/run2): taken against the file's folder it nested a new run inside the old one.
    const std::filesystem::path folder = std::filesystem::absolute(file).parent_path();
    std::error_code error;
    if (std::filesystem::is_directory(folder / "checkpoints", error)) c.output = folder;
    set_config(c);
    show_message(tr("Loaded %1").arg(path), false);
    return true;
  } catch (const std::exception& e) {
    show_message(QString::fromStdString(e.what()), true);
    return false;
  }
}

QWidget* TrainingPanel::take_heatmap_box() {
  heatmap_box_->parentWidget()->layout()->removeWidget(heatmap_box_);
  heatmap_box_->setTitle(QString());  // the dock's title says it
  return heatmap_box_;
}

bool TrainingPanel::restore_last_run() {
  return offer_run(QSettings().value(QLatin1String(kLastRunKey)).toString());
}

void TrainingPanel::set_output(const QString& folder) { output_->setText(folder); }

QString TrainingPanel::output_folder() const { return output_->text().trimmed(); }

bool TrainingPanel::offer_run(const QString& folder) {
  std::error_code error;
  if (folder.isEmpty() ||
      !std::filesystem::exists(
          std::filesystem::path(folder.toStdString()) / "checkpoints" / "last.h5", error)) {
    return false;
  }
  output_->setText(folder);  // update_resume: Resume checked, the form the run's
  if (!resuming()) return false;
  show_message(tr("The last run, in %1: Resume continues it where it stopped.").arg(folder), false);
  return true;
}

bool TrainingPanel::save_config(const QString& path) {
  const auto c = config();
  if (!c) return false;
  try {
    // Through a partial file, fsync and a rename: a full disk says so, the old file stays whole.
    io::write_file_atomically(path.toStdString(), c->to_yaml(), "the config");
  } catch (const std::exception& e) {
    show_message(QString::fromStdString(e.what()), true);
    return false;
  }
  base_ = *c;
  show_message(tr("Saved %1").arg(path), false);
  return true;
}

void TrainingPanel::set_manifest(const QString& csv) {
  if (!locked_folder_.isEmpty() && before_resume_) {
    before_resume_->manifest = csv;
    return;
  }
  manifest_->setText(csv);
}

void TrainingPanel::choose_network() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Network"), {},
                                                    tr("Networks (*.h5 *.onnx);;All files (*)"));
  if (path.isEmpty()) return;
  const QFileInfo onnx(path);
  const QString out = onnx.dir().filePath(onnx.completeBaseName() + QStringLiteral(".h5"));
  if (path.endsWith(QLatin1String(".onnx"), Qt::CaseInsensitive) && QFileInfo::exists(out) &&
      QMessageBox::question(this, tr("Import network"),
                            tr("%1 exists. Replace it with the network imported from %2?")
                                .arg(out, onnx.fileName())) != QMessageBox::Yes) {
    return;
  }
  // On the UI thread: an import takes about a second (resnet50: 1.4 s), under a busy cursor.
  QGuiApplication::setOverrideCursor(Qt::WaitCursor);
  const bool ok = use_network(path);
  QGuiApplication::restoreOverrideCursor();
  if (path.endsWith(QLatin1String(".onnx"), Qt::CaseInsensitive)) {
    if (ok) {
      QMessageBox::information(this, tr("Network imported"), message_);
    } else {
      QMessageBox::warning(this, tr("Network not imported"), message_);
    }
  }
}

bool TrainingPanel::use_network(const QString& path) {
  if (!locked_folder_.isEmpty()) {
    message_ = tr("A resumed run keeps its model: uncheck Resume to train another.");
    return false;
  }
  if (!path.endsWith(QLatin1String(".onnx"), Qt::CaseInsensitive)) {
    model_->setCurrentText(path);
    message_.clear();
    return true;
  }
  const QFileInfo onnx(path);
  const QString out = onnx.dir().filePath(onnx.completeBaseName() + QStringLiteral(".h5"));
  try {
    const pipelines::ImportReport report =
        pipelines::import_onnx_file(path.toStdString(), out.toStdString());
    model_->setCurrentText(out);
    message_ = QString::fromStdString(report.summary);
    return true;
  } catch (const std::exception& e) {
    message_ = QString::fromStdString(e.what());
    return false;
  }
}

bool TrainingPanel::start() {
  if (run_.running()) return false;
  const auto c = config();
  if (!c) return false;
  const bool resume = resuming();
  const QStringList changed = resume_changes();
  // Nothing is written before the user agreed: the pipeline rewrites config.yaml on resume.
  if (resume && !changed.isEmpty() &&
      !prompts().confirm(
          this, tr("Resume with changes"),
          tr("The form differs from the run's config.yaml in %1:\n\n%2\n\nResume with these "
             "changes? config.yaml is updated with them once the run's checkpoint has accepted "
             "the config.")
              .arg(locked_folder_, changed.join(QLatin1Char('\n'))))) {
    show_message(tr("Not resumed: the form differs from the run's config.yaml (%1).")
                     .arg(changed.join(QStringLiteral("; "))),
                 false);
    return false;
  }
  tiles_.reset();
  if (resume) {
    show_run_history(locked_folder_);
  } else {
    memory_.clear();
    metrics_.clear();
    log_->clear();
    memory_offset_s_ = 0;
  }
  charts_run_.clear();
  running_folder_ = QString::fromStdString(c->output.string());
  // Offered again when the app starts next (restore_last_run).
  QSettings().setValue(QLatin1String(kLastRunKey),
                       QString::fromStdString(std::filesystem::absolute(c->output).string()));
  summary_.reset();
  tile_events_ = 0;
  slides_done_ = 0;
  slides_left_ = 0;
  // Until the run's phases say how many: the estimate's counts.
  train_count_ = estimate_ ? estimate_->train_slides : 0;
  val_count_ = estimate_ ? estimate_->val_slides : 0;
  slide_tiles_done_ = 0;
  current_slide_.clear();
  current_name_.clear();
  last_warning_.clear();
  tile_progress_->set_thumbnail({});
  tile_progress_->set_caption({}, {});
  memory_chart_->refresh(memory_);
  refresh_metrics();
  run_start_ = slide_start_ = std::chrono::steady_clock::now();
  // The slides' paths for their thumbnails: the pipeline reports file names.
  slide_paths_.clear();
  const std::filesystem::path csv = c->manifest;
  thumbnails_.start([this, csv] {
    try {
      const io::Manifest manifest = io::load_manifest(csv);
      QHash<QString, QString> paths;
      for (const auto& e : manifest.entries) {
        paths.insert(QString::fromStdString(e.slide.filename().string()),
                     QString::fromStdString(e.slide.string()));
      }
      QMetaObject::invokeMethod(
          this,
          [this, paths] {
            slide_paths_ = paths;
            // The first slide may have started before the manifest was read.
            if (!current_name_.isEmpty() && tile_progress_->thumbnail().isNull()) {
              load_thumbnail(current_name_.toStdString());
            }
          },
          Qt::QueuedConnection);
    } catch (const std::exception&) {
      // The pipeline reports an unusable manifest itself.
    }
  });
  // A plan the form's last change still waits for is made now (the run shows it as it goes),
  // without timing this machine while the run takes it.
  if (estimate_timer_.isActive()) start_estimate(/*measure=*/false);
  run_.start(*c, resume);
  show_message((resume ? tr("Resuming the run in %1…") : tr("Training into %1…"))
                   .arg(QString::fromStdString(c->output.string())),
               false);
  update_buttons();
  emit runStarted();
  return true;
}

void TrainingPanel::stop() {
  if (!run_.running()) return;
  run_.stop();
  show_message(tr("Stopping at the next tile (a checkpoint is written)…"), false);
  update_buttons();
}

void TrainingPanel::show_run_history(const QString& folder) {
  const std::filesystem::path run = folder.toStdString();
  metrics_.clear();
  for (const pipelines::EpochReport& e : read_metrics_csv(run / "metrics.csv")) metrics_.add(e);
  if (charts_run_ == folder) {
    // The run this panel showed last: its memory samples and log lines go on.
    memory_offset_s_ = memory_.last_seconds();
    return;
  }
  memory_.clear();
  memory_offset_s_ = 0;
  log_->clear();
  const QString earlier = read_tail(run / "train.log", kLogTailBytes);
  if (!earlier.isEmpty()) log_->appendPlainText(earlier);
}

void TrainingPanel::on_run_ended() {
  // The last batch has been applied: no rate or ETA of a run that no longer goes.
  tile_progress_->set_caption({}, {});
  slides_left_ = 0;
  schedule_estimate();
}

void TrainingPanel::schedule_estimate() {
  if (run_.running()) return;
  // What the row shows no longer holds for the form: planned again when it settles.
  estimate_.reset();
  if (estimate_cancelled_) *estimate_cancelled_ = true;
  plan_label_->set_full_text(tr("planning…"));
  plan_label_->setStyleSheet({});
  estimate_timer_.start();
}

void TrainingPanel::start_estimate(bool measure) {
  estimate_timer_.stop();
  if (estimate_cancelled_) *estimate_cancelled_ = true;
  const quint64 serial = ++estimate_serial_;
  estimate_.reset();
  QString error;
  const std::optional<pipelines::TrainConfig> c = make_config(&error);
  if (c && c->manifest.empty()) error = tr("choose a manifest to plan the run");
  if (!c || c->manifest.empty()) {
    plan_label_->set_full_text(tr("— %1").arg(error));
    plan_label_->setStyleSheet(QStringLiteral("color: #8a5a00;"));
    emit estimateShown();
    return;
  }
  plan_label_->set_full_text(tr("planning…"));
  plan_label_->setStyleSheet({});
  const QString key = flop_rate_key(*c);
  const double cached_rate = QSettings().value(key).toDouble();
  epochs_for_estimate_ = static_cast<int>(c->epochs);
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  estimate_cancelled_ = cancelled;
  estimates_.start(
      [this, serial, config = *c, cancelled, estimator = estimator_, cached_rate, key, measure] {
        std::optional<RunEstimate> result;
        QString failure;
        double rate = cached_rate;
        try {
          result = estimator->estimate(config, cancelled.get());
          // Measured once per machine and device (a timed conv, about 0.1 s), then read back.
          if (rate <= 0 && measure && !*cancelled) rate = measure_flops_per_second(config);
        } catch (const std::exception& e) {
          failure = QString::fromStdString(e.what());
        }
        if (*cancelled) return;
        QMetaObject::invokeMethod(
            this,
            [this, serial, result, failure, rate, cached_rate, key] {
              if (serial != estimate_serial_) return;
              if (rate > 0 && cached_rate <= 0) QSettings().setValue(key, rate);
              flops_per_second_ = rate;
              if (result) {
                show_estimate(*result);
              } else {
                plan_label_->set_full_text(tr("— %1").arg(failure));
                plan_label_->setStyleSheet(QStringLiteral("color: #b00020;"));
              }
              emit estimateShown();
            },
            Qt::QueuedConnection);
      });
}

void TrainingPanel::show_estimate(const RunEstimate& e) {
  estimate_ = e;
  const QString budget = e.budget_bytes > 0
                             ? tr("of the %1 budget").arg(format_bytes(e.budget_bytes))
                             : tr("(no budget)");
  QString text = tr("peak %1 %2").arg(format_bytes(e.peak_bytes), budget);
  QString details = tr("The plan's predicted peak for the largest slide (%1 × %2 px at the run's "
                       "resolution): %3 %4.")
                        .arg(e.peak_width)
                        .arg(e.peak_height)
                        .arg(format_bytes(e.peak_bytes), budget);
  if (flops_per_second_ > 0) {
    const double epoch_s = e.epoch_seconds(flops_per_second_);
    const auto rounded = [](double seconds) {
      return seconds < 1 ? TrainingPanel::tr("< 1 s") : duration(seconds);
    };
    text += tr(" · an epoch ≈ %1, %2 ≈ %3 (estimate)")
                .arg(rounded(epoch_s))
                .arg(counted(epochs_for_estimate_, tr("epoch"), tr("epochs")))
                .arg(rounded(epoch_s * epochs_for_estimate_));
    details +=
        QLatin1Char('\n') +
        tr("An epoch: %1, a training step each, and %2, a "
           "forward each: %3 GFLOP by the planner's count, at %4 GFLOP/s measured on this "
           "machine with a timed convolution. An estimate: reading slides, small tiles and the "
           "optimizer add to it.")
            .arg(counted(e.train_slides, tr("train slide"), tr("train slides")))
            .arg(counted(e.val_slides, tr("validation slide"), tr("validation slides")))
            .arg(e.epoch_flops() / 1e9, 0, 'f', 1)
            .arg(flops_per_second_ / 1e9, 0, 'f', 1);
  } else {
    text += tr(" · the epoch's time once this machine's speed is measured (after the run)");
  }
  if (!e.skipped.empty()) {
    text += tr(" · %1 cannot be opened and will be skipped")
                .arg(counted(static_cast<long long>(e.skipped.size()), tr("slide"), tr("slides")));
    for (const std::string& why : e.skipped) {
      details += QLatin1Char('\n') + QString::fromStdString(why);
    }
  }
  plan_label_->set_full_text(text);
  plan_label_->setToolTip(text + QLatin1Char('\n') + details);
  plan_label_->setStyleSheet(e.skipped.empty() ? QString() : QStringLiteral("color: #8a5a00;"));
}

void TrainingPanel::update_buttons() {
  start_button_->setEnabled(!run_.running());
  start_button_->setText(resuming() ? tr("Resume") : tr("Start"));
  stop_button_->setEnabled(run_.running() && !run_.stopping());
  resume_->setEnabled(resume_available_ && !run_.running());
}

void TrainingPanel::update_resume() {
  const QString output = output_->text();
  std::error_code error;
  const bool available =
      !output.isEmpty() &&
      std::filesystem::exists(
          std::filesystem::path(output.toStdString()) / "checkpoints" / "last.h5", error);
  // Checked when a run appears there: the pipeline refuses to start afresh over it.
  const bool appeared = available != resume_available_;
  resume_available_ = available;
  if (appeared) {
    const QSignalBlocker blocker(resume_);
    resume_->setChecked(available);
  }
  sync_resume();
  update_buttons();
}

void TrainingPanel::show_message(const QString& message, bool error) {
  message_ = message;
  message_label_->set_full_text(message);
  message_label_->setStyleSheet(error ? QStringLiteral("color: #b00020;") : QString());
  emit message_changed(message);
}

void TrainingPanel::apply(const TrainingEvents& batch) {
  bool memory_changed = false, metrics_changed = false;
  for (const TrainingEvent& event : batch.events) {
    if (const auto* tile = std::get_if<core::TileEvent>(&event)) {
      tiles_.apply(*tile);
      ++tile_events_;
      if (tile->done) ++slide_tiles_done_;
    } else if (const auto* m = std::get_if<TimedMemorySample>(&event)) {
      memory_.add(memory_offset_s_ + m->seconds, m->sample);
      memory_changed = true;
    } else if (const auto* s = std::get_if<pipelines::SlideProgress>(&event)) {
      on_slide(*s);
      memory_changed = true;
    } else if (const auto* e = std::get_if<pipelines::EpochReport>(&event)) {
      metrics_.add(*e);
      metrics_changed = true;
    }
  }
  if (!batch.log.isEmpty()) {
    log_->appendPlainText(batch.log.join(QLatin1Char('\n')));
    // Warnings (a slide skipped: unreadable, or no plan fits the budget) show in the window too.
    for (const QString& line : batch.log) {
      if (line.contains(QLatin1String(" warning ")) || line.contains(QLatin1String(" error "))) {
        last_warning_ = line.section(QLatin1Char(' '), 2);
        show_message(last_warning_, true);
      }
    }
  }
  if (memory_changed) memory_chart_->refresh(memory_);
  if (metrics_changed) refresh_metrics();
  const auto now = std::chrono::steady_clock::now();
  const double slide_seconds = std::chrono::duration<double>(now - slide_start_).count();
  const double run_seconds = std::chrono::duration<double>(now - run_start_).count();
  // A rate over the slide's first instants is noise (a tile done 10 µs in read as 100,000
  // tiles/s): it shows once the slide has run half a second.
  QString rate =
      slide_seconds >= 0.5
          ? tr("%1 tiles/s").arg(static_cast<double>(slide_tiles_done_) / slide_seconds, 0, 'f', 1)
          : tr("– tiles/s");
  if (slides_done_ > 0 && slides_left_ > 0) {
    // The slides this part of the run has done set the pace for the ones left (the running one
    // less its time so far).
    const double left = run_seconds / slides_done_ * static_cast<double>(slides_left_);
    rate += tr(" · ETA ~%1").arg(duration(std::max(0.0, left - slide_seconds)));
  }
  tile_progress_->set_caption(current_slide_, rate);
  emit batchApplied();
}

void TrainingPanel::refresh_metrics() {
  metrics_chart_->refresh(metrics_);
  const RunVerdict verdict = judge_run(metrics_);
  verdict_label_->setText(metrics_.epochs() == 0 ? QString() : verdict.text);
  const bool bad = verdict.kind != RunVerdict::kLearning && verdict.kind != RunVerdict::kTooEarly;
  verdict_label_->setStyleSheet(bad ? QStringLiteral("color: #b00020;") : QString());
}

void TrainingPanel::on_slide(const pipelines::SlideProgress& s) {
  memory_.add_slide(memory_.last_seconds(), s);
  if (!s.done && s.budget_bytes > 0 && s.predicted_peak_bytes > s.budget_bytes) {
    last_warning_ = tr("%1: the plan needs %2, more than the %3 budget; raise the budget or let "
                       "the strategy be auto so the slide is tiled")
                        .arg(QString::fromStdString(s.slide), format_bytes(s.predicted_peak_bytes),
                             format_bytes(s.budget_bytes));
    show_message(last_warning_, true);
  }
  if (s.done) {
    ++slides_done_;
    return;
  }
  // Slides left in the run: this phase's from this one, the validation after a train phase, and
  // the epochs after this one (a resumed run starts mid-run).
  (s.phase == "train" ? train_count_ : val_count_) = s.count;
  slides_left_ = (s.count - s.index) + (s.phase == "train" ? val_count_ : 0) +
                 (s.epochs - s.epoch) * (train_count_ + val_count_);
  tiles_.reset();
  slide_tiles_done_ = 0;
  slide_start_ = std::chrono::steady_clock::now();
  current_slide_ = tr("epoch %1/%2 · %3 %4/%5 · %6")
                       .arg(s.epoch)
                       .arg(s.epochs)
                       .arg(QString::fromStdString(s.phase))
                       .arg(s.index + 1)
                       .arg(s.count)
                       .arg(QString::fromStdString(s.slide));
  current_name_ = QString::fromStdString(s.slide);
  load_thumbnail(s.slide);
}

void TrainingPanel::load_thumbnail(const std::string& slide_name) {
  const QString name = QString::fromStdString(slide_name);
  const auto cached = thumbnail_cache_.constFind(name);
  if (cached != thumbnail_cache_.constEnd()) {
    tile_progress_->set_thumbnail(*cached);
    return;
  }
  tile_progress_->set_thumbnail({});
  const QString path = slide_paths_.value(name);
  if (path.isEmpty()) return;
  thumbnails_.start([this, name, path] {
    try {
      const QImage overview = open_slide_document(path.toStdString()).overview;
      QMetaObject::invokeMethod(
          this,
          [this, name, overview] {
            thumbnail_cache_.insert(name, overview);
            if (current_name_ == name) tile_progress_->set_thumbnail(overview);
          },
          Qt::QueuedConnection);
    } catch (const std::exception&) {
      // No thumbnail: the grid is drawn on a plain background; the pipeline logs the slide.
    }
  });
}

}  // namespace tessel::gui
