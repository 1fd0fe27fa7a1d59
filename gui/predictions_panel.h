// The Predictions dock: a checkpoint's prediction for every slide of a manifest's test split
// (pipelines::evaluate on a worker thread, slide by slide with Cancel), as a table a pathologist
// reads against the labels: slide, label, predicted class, its probability, right or wrong; the
// split's accuracy, balanced accuracy and AUC above it. A double-click opens the slide.
#pragma once

#include <QLabel>
#include <QPushButton>
#include <QString>
#include <QTableWidget>
#include <QThreadPool>
#include <QWidget>

#include <atomic>
#include <memory>
#include <vector>

#include "pipelines/evaluate.h"

namespace tessel::gui {

// One table row: what the checkpoint says of a slide.
struct PredictionRow {
  QString slide;  // the path
  QString label;  // the manifest's
  QString predicted;
  double probability = 0;  // of the predicted class
  bool correct = false;
};
// The rows of an evaluation, in manifest order; the predicted class is the most probable one.
std::vector<PredictionRow> prediction_rows(const pipelines::EvaluationResult& result);

class PredictionsPanel : public QWidget {
  Q_OBJECT

 public:
  explicit PredictionsPanel(QWidget* parent = nullptr);
  ~PredictionsPanel() override;  // cancels a running evaluation and waits for it

  // Evaluates `checkpoint` on `manifest`'s `split`; returns at once (finished or failed
  // follows). False, with the message, while one runs.
  bool run(const QString& checkpoint, const QString& manifest, const QString& split = "test");
  bool cancel();
  bool busy() const { return busy_; }
  QString message() const { return message_->text(); }
  QTableWidget* table() { return table_; }
  const std::vector<PredictionRow>& rows() const { return rows_; }

 signals:
  void finished(QString summary);
  void failed(QString reason);
  void slideActivated(QString path);

 private:
  void show_result(const pipelines::EvaluationResult& result, const QString& checkpoint,
                   const QString& split);

  QLabel* message_;
  QTableWidget* table_;
  QPushButton* cancel_;
  QThreadPool pool_;
  std::shared_ptr<std::atomic<bool>> stop_;
  std::vector<PredictionRow> rows_;
  bool busy_ = false;
};

}  // namespace tessel::gui
