// The training views drawn for a reader (issue 22, "Honest progress"): axes that read apart
// when a chart is empty or its values small, "peak" and "measured peak" in colours of their own,
// and an ETA that stays whole under a long slide name.
#include <QChart>
#include <QLineSeries>
#include <QScatterSeries>
#include <QTest>
#include <QValueAxis>

#include <set>

#include "gui/training_views.h"

namespace tessel::gui {

namespace {

// The labels a value axis draws: its ticks formatted with its label format.
QStringList labels_of(const QValueAxis* axis) {
  QList<double> ticks;
  if (axis->tickType() == QValueAxis::TicksDynamic) {
    for (double v = axis->tickAnchor(); v <= axis->max() + 1e-9; v += axis->tickInterval()) {
      if (v >= axis->min() - 1e-9) ticks.append(v);
    }
  } else {
    for (int i = 0; i < axis->tickCount(); ++i) {
      ticks.append(axis->min() + (axis->max() - axis->min()) * i / (axis->tickCount() - 1));
    }
  }
  const QByteArray format = axis->labelFormat().toLatin1();
  QStringList labels;
  for (double v : ticks) {
    labels << (format.contains('d') ? QString::asprintf(format.constData(), static_cast<int>(v))
                                    : QString::asprintf(format.constData(), v));
  }
  return labels;
}

void verify_readable(const QChart* chart) {
  for (const QAbstractAxis* a : chart->axes()) {
    const auto* axis = qobject_cast<const QValueAxis*>(a);
    QVERIFY(axis != nullptr);
    const QStringList labels = labels_of(axis);
    QVERIFY2(labels.size() >= 2, qPrintable(axis->titleText()));
    const std::set<QString> distinct(labels.begin(), labels.end());
    QVERIFY2(distinct.size() == static_cast<size_t>(labels.size()),
             qPrintable(axis->titleText() + QStringLiteral(": ") + labels.join(QLatin1Char(' '))));
    QVERIFY2(!axis->titleText().isEmpty(), "every axis says what it counts");
  }
}

QColor colour_of(const QChart* chart, const QString& name) {
  for (QAbstractSeries* s : chart->series()) {
    if (s->name() != name) continue;
    if (const auto* points = qobject_cast<QScatterSeries*>(s)) return points->color();
    return qobject_cast<QXYSeries*>(s)->pen().color();
  }
  return {};
}

}  // namespace

class TrainingViewsTest : public QObject {
  Q_OBJECT

 private slots:
  void emptyChartsHaveAxesThatReadApart() {
    MemoryChart memory;
    memory.refresh(MemorySeries());
    verify_readable(memory.chart());
    MetricsChart metrics;
    metrics.refresh(MetricsSeries());
    verify_readable(metrics.chart());
  }

  // A few MiB over a few seconds, and a long run's epochs.
  void smallValuesAndLongRunsReadApartToo() {
    MemorySeries series;
    core::MemorySample sample;
    sample.live = 3 << 20;
    sample.peak = 4 << 20;
    series.add(0.2, sample);
    series.add(2.7, sample);
    MemoryChart memory;
    memory.refresh(series);
    verify_readable(memory.chart());
    MetricsSeries epochs;
    for (int64_t e = 1; e <= 57; ++e) {
      pipelines::EpochReport report;
      report.epoch = e;
      report.train_loss = 0.02;
      epochs.add(report);
    }
    MetricsChart metrics;
    metrics.refresh(epochs);
    verify_readable(metrics.chart());
    QVERIFY(labels_of(qobject_cast<QValueAxis*>(metrics.chart()->axes(Qt::Horizontal).front()))
                .size() <= 12);
  }

  void peakAndMeasuredPeakHaveTheirOwnColours() {
    MemoryChart memory;
    std::set<QRgb> colours;
    for (const QString& name :
         {QStringLiteral("in use"), QStringLiteral("peak"), QStringLiteral("budget for the step"),
          QStringLiteral("predicted peak"), QStringLiteral("measured peak (per slide)")}) {
      const QColor c = colour_of(memory.chart(), name);
      QVERIFY2(c.isValid(), qPrintable(name));
      colours.insert(c.rgb());
    }
    QCOMPARE(colours.size(), size_t{5});
  }

  // Disk bytes on the memory axis read as a blown budget (issue 53): they have their own axis,
  // shown only when there are some.
  void diskIsDrawnOnItsOwnAxis() {
    MemorySeries series;
    core::MemorySample sample;
    sample.live = 100 << 20;
    sample.peak = 120 << 20;
    sample.budget = 200 << 20;
    sample.by_category = {{"host", 10 << 20}, {"disk", 0}};
    series.add(1, sample);
    MemoryChart memory;
    memory.refresh(series);
    QVERIFY(!memory.shows_disk());
    sample.by_category["disk"] = int64_t{5000} << 20;
    series.add(2, sample);
    memory.refresh(series);
    QVERIFY(memory.shows_disk());
    verify_readable(memory.chart());
    const auto* left = qobject_cast<QValueAxis*>(memory.chart()->axes(Qt::Vertical).front());
    QVERIFY2(left->max() < 1000, "5000 MiB on disk does not stretch the memory axis");
  }

  // A first epoch's loss of 40 against 0.7 after it: the axis is the later epochs', and the
  // title names the loss above it.
  void aLargeFirstEpochIsClippedWithANote() {
    MetricsSeries epochs;
    for (int64_t e = 1; e <= 5; ++e) {
      pipelines::EpochReport report;
      report.epoch = e;
      report.train_loss = e == 1 ? 40.0 : 0.8 - 0.05 * static_cast<double>(e);
      epochs.add(report);
    }
    MetricsChart metrics;
    metrics.refresh(epochs);
    QVERIFY2(metrics.loss_axis_top() < 2, qPrintable(QString::number(metrics.loss_axis_top())));
    QVERIFY2(metrics.title().contains(QStringLiteral("epoch 1: 40")), qPrintable(metrics.title()));
    verify_readable(metrics.chart());
  }

  void theEtaStaysWholeUnderALongSlideName() {
    TileStateModel tiles;
    TileProgressWidget widget(&tiles);
    const QString rate = QStringLiteral("2.5 tiles/s · ETA ~1:23:45");
    widget.set_caption(
        QStringLiteral("epoch 3/10 · train 12/16 · a-very-long-slide-name-from-a-scanner-export-"
                       "TCGA-XX-0000-01Z-00-DX1.0123456789ABCDEF.svs"),
        rate);
    const int width = 240;
    const QString line = widget.caption_line(width);
    QVERIFY2(line.endsWith(rate), qPrintable(line));
    QVERIFY2(widget.fontMetrics().horizontalAdvance(line) <= width, qPrintable(line));
    QVERIFY(line.contains(QChar(0x2026)));  // the slide elided
    widget.set_caption({}, {});
    QVERIFY(widget.caption_line(width).isEmpty());
  }
};

}  // namespace tessel::gui

QTEST_MAIN(tessel::gui::TrainingViewsTest)
#include "training_views_test.moc"
