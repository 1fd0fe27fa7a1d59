#include "gui/predictions_panel.h"

#include <QColor>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QPointer>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <exception>

#include "gui/words.h"

namespace tessel::gui {
namespace {

struct Cancelled {};

// Progress to the panel (queued to the UI thread), and Cancel at the engine's next tile.
class Progress : public pipelines::TrainObserver {
 public:
  Progress(QPointer<QLabel> label, std::shared_ptr<std::atomic<bool>> stop)
      : label_(std::move(label)), stop_(std::move(stop)) {}
  void on_slide(const pipelines::SlideProgress& s) override {
    if (*stop_) throw Cancelled{};
    if (s.done) return;
    const QString text = QObject::tr("Predicting slide %1 of %2: %3…")
                             .arg(s.index + 1)
                             .arg(s.count)
                             .arg(QString::fromStdString(s.slide));
    QMetaObject::invokeMethod(
        label_.data(),
        [label = label_, text] {
          if (label) label->setText(text);
        },
        Qt::QueuedConnection);
  }
  void on_tile(const core::TileEvent&) override {
    if (*stop_) throw Cancelled{};
  }

 private:
  QPointer<QLabel> label_;
  std::shared_ptr<std::atomic<bool>> stop_;
};

}  // namespace

std::vector<PredictionRow> prediction_rows(const pipelines::EvaluationResult& result) {
  std::vector<PredictionRow> rows;
  for (const pipelines::SlidePrediction& p : result.predictions) {
    PredictionRow row;
    row.slide = QString::fromStdString(p.slide);
    row.label = QString::fromStdString(p.label);
    const auto best = std::max_element(p.probabilities.begin(), p.probabilities.end());
    if (best != p.probabilities.end()) {
      const auto k = static_cast<size_t>(best - p.probabilities.begin());
      row.predicted = k < result.classes.size() ? QString::fromStdString(result.classes[k])
                                                : QString::number(k);
      row.probability = *best;
      // A label is a class name, or an integer index into the classes (docs/manifest.md).
      row.correct = row.label == row.predicted || row.label == QString::number(k);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

PredictionsPanel::PredictionsPanel(QWidget* parent) : QWidget(parent) {
  pool_.setMaxThreadCount(1);
  message_ = new QLabel(tr("A checkpoint's predictions for the test slides: \"Predict the test "
                           "slides\" in the Training dock."),
                        this);
  message_->setWordWrap(true);
  message_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  cancel_ = new QPushButton(tr("Cancel"), this);
  cancel_->setVisible(false);
  connect(cancel_, &QPushButton::clicked, this, &PredictionsPanel::cancel);
  table_ = new QTableWidget(0, 5, this);
  table_->setHorizontalHeaderLabels(
      {tr("Slide"), tr("Label"), tr("Predicted"), tr("Probability"), tr("Right")});
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setSortingEnabled(true);
  connect(table_, &QTableWidget::cellDoubleClicked, this, [this](int row, int) {
    if (const QTableWidgetItem* item = table_->item(row, 0)) {
      emit slideActivated(item->data(Qt::UserRole).toString());
    }
  });
  auto* top = new QHBoxLayout();
  top->addWidget(message_, 1);
  top->addWidget(cancel_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addLayout(top);
  layout->addWidget(table_, 1);
}

PredictionsPanel::~PredictionsPanel() {
  if (stop_) *stop_ = true;
  pool_.clear();
  pool_.waitForDone();
}

bool PredictionsPanel::run(const QString& checkpoint, const QString& manifest,
                           const QString& split) {
  if (busy_) {
    message_->setText(tr("Predictions are running: wait, or Cancel them first."));
    return false;
  }
  busy_ = true;
  stop_ = std::make_shared<std::atomic<bool>>(false);
  cancel_->setVisible(true);
  message_->setText(tr("Loading %1…").arg(QFileInfo(checkpoint).fileName()));
  pool_.start([this, checkpoint, manifest, split, stop = stop_] {
    Progress progress(message_, stop);
    pipelines::EvaluationRequest request;
    request.checkpoint = checkpoint.toStdString();
    request.manifest = manifest.toStdString();
    request.split = split.toStdString();
    request.observer = &progress;
    QString error;
    pipelines::EvaluationResult result;
    bool cancelled = false;
    try {
      result = pipelines::evaluate(request);
    } catch (const Cancelled&) {
      cancelled = true;
    } catch (const std::exception& e) {
      error = QString::fromStdString(e.what());
    }
    QMetaObject::invokeMethod(
        this,
        [this, result = std::move(result), error, cancelled, checkpoint, split] {
          busy_ = false;
          cancel_->setVisible(false);
          if (cancelled) {
            message_->setText(tr("Predictions cancelled."));
            emit failed(message_->text());
          } else if (!error.isEmpty()) {
            message_->setText(tr("No predictions: %1").arg(error));
            emit failed(error);
          } else {
            show_result(result, checkpoint, split);
          }
        },
        Qt::QueuedConnection);
  });
  return true;
}

bool PredictionsPanel::cancel() {
  if (!busy_ || !stop_) return false;
  *stop_ = true;
  message_->setText(tr("Cancelling at the next tile…"));
  return true;
}

void PredictionsPanel::show_result(const pipelines::EvaluationResult& result,
                                   const QString& checkpoint, const QString& split) {
  rows_ = prediction_rows(result);
  table_->setSortingEnabled(false);
  table_->setRowCount(static_cast<int>(rows_.size()));
  int right = 0;
  for (int i = 0; i < static_cast<int>(rows_.size()); ++i) {
    const PredictionRow& r = rows_[static_cast<size_t>(i)];
    auto* slide = new QTableWidgetItem(QFileInfo(r.slide).fileName());
    slide->setData(Qt::UserRole, r.slide);
    slide->setToolTip(r.slide);
    table_->setItem(i, 0, slide);
    table_->setItem(i, 1, new QTableWidgetItem(r.label));
    table_->setItem(i, 2, new QTableWidgetItem(r.predicted));
    auto* p = new QTableWidgetItem();
    p->setData(Qt::DisplayRole, std::round(r.probability * 1000) / 1000);
    table_->setItem(i, 3, p);
    auto* mark = new QTableWidgetItem(r.correct ? tr("yes") : tr("no"));
    mark->setForeground(r.correct ? QColor(20, 130, 60) : QColor(176, 0, 32));
    table_->setItem(i, 4, mark);
    right += r.correct ? 1 : 0;
  }
  table_->setSortingEnabled(true);
  const pipelines::ClassificationMetrics& m = result.metrics;
  QString summary =
      tr("%1 of the %2 split by %3: %4 right (accuracy %5, balanced accuracy %6")
          .arg(counted(static_cast<long long>(rows_.size()), tr("slide"), tr("slides")), split,
               QFileInfo(checkpoint).fileName())
          .arg(right)
          .arg(m.accuracy, 0, 'f', 2)
          .arg(m.balanced_accuracy, 0, 'f', 2);
  summary += std::isnan(m.auc) ? tr(", AUC undefined: one class only)")
                               : tr(", AUC %1)").arg(m.auc, 0, 'f', 2);
  if (result.skipped > 0) {
    summary += tr("; %1 skipped (the log says why)")
                   .arg(counted(result.skipped, tr("slide"), tr("slides")));
  }
  message_->setText(summary);
  emit finished(summary);
}

}  // namespace tessel::gui
