// The training views: the current slide's thumbnail with the running segment's tile grid and a
// segment strip, the memory chart, and the per-epoch metrics chart. Each draws one of the models
// in training_models.h; refresh() is called at most once per drained batch.
#pragma once

#include <QChartView>
#include <QImage>
#include <QLabel>
#include <QLineSeries>
#include <QScatterSeries>
#include <QValueAxis>
#include <QWidget>

#include <map>
#include <string>

#include "gui/training_models.h"

namespace tessel::gui {

class TileProgressWidget : public QWidget {
  Q_OBJECT

 public:
  explicit TileProgressWidget(const TileStateModel* model, QWidget* parent = nullptr);

  void set_thumbnail(const QImage& thumbnail);  // null: a plain background
  // "slide 2/4 · tumor-003.tif", "12.5 tiles/s · ETA 0:42" under the grid.
  void set_caption(const QString& slide, const QString& rate);
  const QImage& thumbnail() const { return thumbnail_; }
  // The caption as drawn in `width` pixels: the slide elided in the middle, the rate and ETA
  // whole after it. Empty when there is no caption (no run going).
  QString caption_line(int width) const;
  static QColor colour(TileState state);

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  const TileStateModel* model_;
  QImage thumbnail_;
  QString slide_, rate_;
};

// A value axis from `low` to at least `high` at round ticks, labelled with as many decimals as
// the ticks need to read apart (a MiB axis of an empty chart is not "0 0 0 1 1").
void set_readable_range(QValueAxis* axis, double low, double high);

class MemoryChart : public QChartView {
  Q_OBJECT

 public:
  explicit MemoryChart(QWidget* parent = nullptr);
  void refresh(const MemorySeries& series);
  int points() const;  // in the live series
  int category_series() const { return static_cast<int>(categories_.size()); }

  // The disk axis on the right, shown while there are bytes on disk.
  bool shows_disk() const;

 private:
  QLineSeries *live_, *peak_, *budget_, *predicted_, *disk_;
  QScatterSeries* measured_;
  std::map<std::string, QLineSeries*> categories_;
  QValueAxis *x_, *y_, *disk_axis_;
};

class MetricsChart : public QChartView {
  Q_OBJECT

 public:
  explicit MetricsChart(QWidget* parent = nullptr);
  void refresh(const MetricsSeries& series);
  int points() const;  // in the training-loss series
  double loss_axis_top() const;
  // The chart's title: "Metrics per epoch", with the losses above the axis when it is clipped.
  QString title() const;

 private:
  QLineSeries *train_loss_, *val_loss_, *val_balanced_, *val_auc_;
  QValueAxis *x_, *loss_axis_, *metric_axis_;
};

}  // namespace tessel::gui
