#include "gui/training_views.h"

#include <QChart>
#include <QPainter>

#include <algorithm>
#include <cmath>

namespace tessel::gui {

TileProgressWidget::TileProgressWidget(const TileStateModel* model, QWidget* parent)
    : QWidget(parent), model_(model) {
  setMinimumSize(240, 200);
}

void TileProgressWidget::set_thumbnail(const QImage& thumbnail) {
  thumbnail_ = thumbnail;
  update();
}

void TileProgressWidget::set_caption(const QString& slide, const QString& rate) {
  slide_ = slide;
  rate_ = rate;
  update();
}

QString TileProgressWidget::caption_line(int width) const {
  const QFontMetrics metrics = fontMetrics();
  if (rate_.isEmpty()) return metrics.elidedText(slide_, Qt::ElideMiddle, width);
  const QString rate = slide_.isEmpty() ? rate_ : QStringLiteral(" · ") + rate_;
  const int room = width - metrics.horizontalAdvance(rate);
  return (room > 0 ? metrics.elidedText(slide_, Qt::ElideMiddle, room) : QString()) + rate;
}

QColor TileProgressWidget::colour(TileState state) {
  switch (state) {
    case TileState::kPending:
      return QColor(128, 128, 128, 70);
    case TileState::kForward:
      return QColor(40, 120, 255, 170);
    case TileState::kBackward:
      return QColor(255, 140, 0, 170);
    case TileState::kDone:
      return QColor(30, 180, 80, 70);
    case TileState::kGlass:
      return QColor(180, 220, 235, 40);  // glass: computed once, the slide shows through
  }
  return {};
}

void TileProgressWidget::paintEvent(QPaintEvent*) {
  QPainter painter(this);
  painter.fillRect(rect(), palette().window());
  const int text_h = fontMetrics().height();
  const int strip_h = 16;
  const QRect area = rect().adjusted(4, 4, -4, -(8 + strip_h + 2 * text_h));
  // The image the engine sees, fitted into the area; the grid is drawn over the same rectangle.
  QSizeF image_size = thumbnail_.isNull() ? QSizeF(model_->extent().size()) : thumbnail_.size();
  if (image_size.isEmpty()) image_size = QSizeF(1, 1);
  const QSizeF fitted = image_size.scaled(area.size(), Qt::KeepAspectRatio);
  const QRectF target(area.left() + (area.width() - fitted.width()) / 2,
                      area.top() + (area.height() - fitted.height()) / 2, fitted.width(),
                      fitted.height());
  if (!thumbnail_.isNull()) {
    painter.setRenderHint(QPainter::SmoothPixmapTransform);
    painter.drawImage(target, thumbnail_);
  } else {
    painter.fillRect(target, QColor(235, 235, 235));
  }
  const QRectF extent = model_->extent();
  if (!model_->empty() && extent.width() > 0 && extent.height() > 0) {
    const double sx = target.width() / (extent.left() + extent.width());
    const double sy = target.height() / (extent.top() + extent.height());
    const auto on_screen = [&](const QRectF& r) {
      return QRectF(target.left() + r.left() * sx, target.top() + r.top() * sy, r.width() * sx,
                    r.height() * sy);
    };
    painter.setPen(QPen(QColor(255, 255, 255, 120), 0));
    for (int64_t i = 0; i < model_->tiles(); ++i) {
      const QRectF r = model_->rect(i);
      if (r.isEmpty()) continue;
      painter.setBrush(colour(model_->state(i)));
      painter.drawRect(on_screen(r));
    }
    if (model_->current_tile() >= 0) {
      painter.setBrush(Qt::NoBrush);
      painter.setPen(QPen(QColor(255, 230, 0), 2.5));
      painter.drawRect(on_screen(model_->rect(model_->current_tile())));
    }
  }
  // The segment strip: forward runs left to right, backward right to left.
  const int segments = std::max(model_->segments(), 1);
  const QRectF strip(4, area.bottom() + 6, width() - 8, strip_h);
  const double w = strip.width() / segments;
  for (int s = 0; s < segments; ++s) {
    const QRectF box(strip.left() + s * w, strip.top(), w - 2, strip_h);
    QColor fill(200, 200, 200);
    if (model_->segment_done(s, core::TileEvent::kBackward)) {
      fill = colour(TileState::kDone);
    } else if (model_->segment_done(s, core::TileEvent::kForward)) {
      fill = QColor(160, 190, 240);
    }
    if (s == model_->segment()) {
      fill = colour(model_->pass() == core::TileEvent::kForward ? TileState::kForward
                                                                : TileState::kBackward);
    }
    painter.fillRect(box, fill);
  }
  painter.setPen(palette().windowText().color());
  QString pass =
      model_->pass() == core::TileEvent::kForward ? tr("forward") : tr("backward (recompute)");
  QString line = model_->empty() ? tr("no tiles yet")
                                 : tr("segment %1/%2 · %3 · tile %4/%5")
                                       .arg(model_->segment() + 1)
                                       .arg(model_->segments())
                                       .arg(pass)
                                       .arg(model_->current_tile() + 1)
                                       .arg(model_->tiles());
  painter.drawText(QRectF(4, strip.bottom() + 2, width() - 8, text_h),
                   fontMetrics().elidedText(line, Qt::ElideRight, width() - 8));
  painter.drawText(QRectF(4, strip.bottom() + 2 + text_h, width() - 8, text_h),
                   caption_line(width() - 8));
}

void set_readable_range(QValueAxis* axis, double low, double high) {
  axis->setTickType(QValueAxis::TicksFixed);
  axis->setRange(low, std::max(high, low + 1e-9));
  axis->applyNiceNumbers();
  const double step = (axis->max() - axis->min()) / std::max(1, axis->tickCount() - 1);
  const int decimals =
      step >= 1 ? 0 : std::min(6, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  axis->setLabelFormat(QStringLiteral("%.%1f").arg(decimals));
}

namespace {

QLineSeries* line(QChart* chart, const QString& name, QColor colour, Qt::PenStyle style,
                  qreal width = 2) {
  auto* s = new QLineSeries(chart);
  s->setName(name);
  QPen pen(colour, width, style);
  s->setPen(pen);
  chart->addSeries(s);
  return s;
}

}  // namespace

MemoryChart::MemoryChart(QWidget* parent) : QChartView(parent) {
  auto* chart = new QChart();
  chart->setTitle(tr("Memory the step uses"));
  chart->legend()->setAlignment(Qt::AlignRight);
  chart->setMargins(QMargins(2, 2, 2, 2));
  live_ = line(chart, tr("in use"), QColor(40, 120, 255), Qt::SolidLine);
  peak_ = line(chart, tr("peak"), QColor(200, 40, 40), Qt::SolidLine);
  // The budget less the weights and optimizer state it also holds (live before the step).
  budget_ = line(chart, tr("budget for the step"), Qt::black, Qt::DashLine);
  predicted_ = line(chart, tr("predicted peak"), QColor(150, 0, 200), Qt::DotLine);
  // One point per training slide, not the red of "peak": the two are read against each other.
  measured_ = new QScatterSeries(chart);
  measured_->setName(tr("measured peak (per slide)"));
  measured_->setColor(QColor(20, 150, 60));
  measured_->setBorderColor(QColor(20, 150, 60));
  measured_->setMarkerSize(7);
  chart->addSeries(measured_);
  x_ = new QValueAxis(chart);
  x_->setTitleText(tr("seconds"));
  y_ = new QValueAxis(chart);
  y_->setTitleText(tr("memory, MiB"));
  set_readable_range(x_, 0, 1);
  set_readable_range(y_, 0, 1);
  chart->addAxis(x_, Qt::AlignBottom);
  chart->addAxis(y_, Qt::AlignLeft);
  for (QAbstractSeries* s : chart->series()) {
    s->attachAxis(x_);
    s->attachAxis(y_);
  }
  // Disk is not memory: its own axis, hidden until something is written there.
  disk_ = line(chart, tr("on disk"), QColor(120, 120, 120), Qt::DashDotLine);
  disk_axis_ = new QValueAxis(chart);
  disk_axis_->setTitleText(tr("disk, MiB"));
  set_readable_range(disk_axis_, 0, 1);
  chart->addAxis(disk_axis_, Qt::AlignRight);
  disk_->attachAxis(x_);
  disk_->attachAxis(disk_axis_);
  disk_axis_->setVisible(false);
  disk_->setVisible(false);
  setChart(chart);
  setRenderHint(QPainter::Antialiasing);
  setMinimumSize(320, 200);
}

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

QList<QPointF> in_mib(const QVector<QPointF>& points) {
  QList<QPointF> out;
  out.reserve(points.size());
  for (const QPointF& p : points) out.append(QPointF(p.x(), p.y() / kMiB));
  return out;
}

// Each training slide's prediction holds from its start to the next slide's, the last one's to
// `end`.
QList<QPointF> steps_in_mib(const QVector<QPointF>& points, double end) {
  QList<QPointF> out;
  for (qsizetype i = 0; i < points.size(); ++i) {
    if (i > 0) out.append(QPointF(points[i].x(), points[i - 1].y() / kMiB));
    out.append(QPointF(points[i].x(), points[i].y() / kMiB));
  }
  if (!points.isEmpty()) out.append(QPointF(std::max(end, points.back().x()), out.back().y()));
  return out;
}

}  // namespace

void MemoryChart::refresh(const MemorySeries& series) {
  live_->replace(in_mib(series.live()));
  peak_->replace(in_mib(series.peak()));
  for (const auto& [name, points] : series.by_category()) {
    auto it = categories_.find(name);
    if (it == categories_.end()) {
      static const QColor kColours[] = {
          QColor(0, 150, 136),  QColor(255, 152, 0),  QColor(121, 85, 72), QColor(233, 30, 99),
          QColor(96, 125, 139), QColor(139, 195, 74), QColor(63, 81, 181), QColor(255, 87, 34)};
      const QColor c = kColours[categories_.size() % std::size(kColours)];
      QLineSeries* s = line(chart(), QString::fromStdString(name), c, Qt::SolidLine, 1);
      s->attachAxis(x_);
      s->attachAxis(y_);
      it = categories_.emplace(name, s).first;
    }
    it->second->replace(in_mib(points));
  }
  const double t_end = std::max(series.last_seconds(), 1.0);
  if (series.step_budget() > 0) {
    const double mib = static_cast<double>(series.step_budget()) / kMiB;
    budget_->replace(QList<QPointF>{{0, mib}, {t_end, mib}});
  } else {
    budget_->clear();
  }
  predicted_->replace(steps_in_mib(series.predicted(), t_end));
  measured_->replace(in_mib(series.measured()));
  const bool disk = series.largest_disk() > 0;
  disk_->setVisible(disk);
  disk_axis_->setVisible(disk);
  disk_->replace(in_mib(series.disk()));
  set_readable_range(disk_axis_, 0,
                     std::max(1.0, static_cast<double>(series.largest_disk()) / kMiB * 1.1));
  set_readable_range(x_, 0, t_end);
  set_readable_range(y_, 0, std::max(1.0, static_cast<double>(series.largest()) / kMiB * 1.1));
}

int MemoryChart::points() const { return static_cast<int>(live_->count()); }

bool MemoryChart::shows_disk() const { return disk_axis_->isVisible(); }

MetricsChart::MetricsChart(QWidget* parent) : QChartView(parent) {
  auto* chart = new QChart();
  chart->setTitle(tr("Metrics per epoch"));
  chart->legend()->setAlignment(Qt::AlignRight);
  chart->setMargins(QMargins(2, 2, 2, 2));
  train_loss_ = line(chart, tr("train loss"), QColor(40, 120, 255), Qt::SolidLine);
  val_loss_ = line(chart, tr("val loss"), QColor(200, 40, 40), Qt::SolidLine);
  val_balanced_ = line(chart, tr("val balanced acc."), QColor(30, 160, 80), Qt::DashLine);
  val_auc_ = line(chart, tr("val AUC"), QColor(150, 0, 200), Qt::DashLine);
  for (QLineSeries* s : {train_loss_, val_loss_, val_balanced_, val_auc_}) s->setPointsVisible();
  x_ = new QValueAxis(chart);
  x_->setTitleText(tr("epoch"));
  x_->setLabelFormat(QStringLiteral("%d"));
  // Whole epochs from the first: 1, 2, 3 … or 1, 6, 11 … on a long run.
  x_->setTickType(QValueAxis::TicksDynamic);
  x_->setTickAnchor(1);
  x_->setRange(1, 2);
  x_->setTickInterval(1);
  loss_axis_ = new QValueAxis(chart);
  loss_axis_->setTitleText(tr("loss"));
  set_readable_range(loss_axis_, 0, 0.1);
  metric_axis_ = new QValueAxis(chart);
  metric_axis_->setTitleText(tr("accuracy, AUC"));
  metric_axis_->setRange(0, 1);
  metric_axis_->setTickCount(6);
  metric_axis_->setLabelFormat(QStringLiteral("%.1f"));
  chart->addAxis(x_, Qt::AlignBottom);
  chart->addAxis(loss_axis_, Qt::AlignLeft);
  chart->addAxis(metric_axis_, Qt::AlignRight);
  for (QLineSeries* s : {train_loss_, val_loss_}) {
    s->attachAxis(x_);
    s->attachAxis(loss_axis_);
  }
  for (QLineSeries* s : {val_balanced_, val_auc_}) {
    s->attachAxis(x_);
    s->attachAxis(metric_axis_);
  }
  setChart(chart);
  setRenderHint(QPainter::Antialiasing);
  setMinimumSize(320, 200);
}

void MetricsChart::refresh(const MetricsSeries& series) {
  train_loss_->replace(QList<QPointF>(series.train_loss().begin(), series.train_loss().end()));
  val_loss_->replace(QList<QPointF>(series.val_loss().begin(), series.val_loss().end()));
  val_balanced_->replace(
      QList<QPointF>(series.val_balanced_accuracy().begin(), series.val_balanced_accuracy().end()));
  val_auc_->replace(QList<QPointF>(series.val_auc().begin(), series.val_auc().end()));
  const int last = std::max(2, series.epochs());
  x_->setRange(1, last);
  // At most about ten labels: an interval of 1, 2 or 5 × 10ⁿ epochs.
  int interval = 1;
  for (int step = 1; (last - 1) / interval > 10; step *= 10) {
    for (int m : {1, 2, 5}) {
      interval = m * step;
      if ((last - 1) / interval <= 10) break;
    }
  }
  x_->setTickInterval(interval);
  // A large first epoch would flatten every later one to zero: its loss is above the axis, and
  // the title says so.
  const LossScale scale = series.loss_scale();
  set_readable_range(loss_axis_, 0, scale.top);
  QString title = tr("Metrics per epoch");
  if (!scale.above.empty()) {
    QStringList above;
    for (const auto& [epoch, loss] : scale.above) {
      above << tr("epoch %1: %2").arg(epoch).arg(loss, 0, 'g', 3);
    }
    title += tr(" (loss above the axis: %1)").arg(above.join(QStringLiteral(", ")));
  }
  chart()->setTitle(title);
}

int MetricsChart::points() const { return static_cast<int>(train_loss_->count()); }

double MetricsChart::loss_axis_top() const { return loss_axis_->max(); }

QString MetricsChart::title() const { return chart()->title(); }

}  // namespace tessel::gui
