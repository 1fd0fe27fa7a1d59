#include "gui/heatmap_queue.h"

#include <QFileInfo>

#include <exception>
#include <utility>

namespace tessel::gui {
namespace {

// Thrown from the engine's tile events when the running heatmap is cancelled; not a
// std::exception, so that no handler on the way takes it for a slide that cannot be read.
struct Cancelled {};

// The engine's tiles counted into the shared progress, and the cancel flag honoured as each tile
// finishes (and once the slide is open, before planning and the first tile).
class ProgressObserver : public pipelines::TrainObserver {
 public:
  explicit ProgressObserver(HeatmapProgress* progress) : progress_(progress) {}
  void on_tile(const core::TileEvent& e) override {
    if (!e.done) {
      progress_->segment = e.segment;
      progress_->tile = e.tile;
      progress_->tiles = e.tiles;
      return;
    }
    ++progress_->tiles_done;
    if (progress_->cancel) throw Cancelled{};
  }
  void on_slide(const pipelines::SlideProgress& /*slide*/) override {
    if (progress_->cancel) throw Cancelled{};
  }

 private:
  HeatmapProgress* progress_;
};

QString minutes_seconds(qint64 ms) {
  const qint64 s = ms / 1000;
  return QStringLiteral("%1:%2").arg(s / 60).arg(s % 60, 2, 10, QLatin1Char('0'));
}

}  // namespace

HeatmapQueue::HeatmapQueue(QObject* parent) : QObject(parent) {
  pool_.setMaxThreadCount(1);
  poll_.setInterval(200);
  connect(&poll_, &QTimer::timeout, this, &HeatmapQueue::changed);
}

HeatmapQueue::~HeatmapQueue() {
  cancel_all();
  pool_.waitForDone();
}

void HeatmapQueue::add(HeatmapJob job) {
  waiting_.push_back(std::move(job));
  if (running_) {
    emit changed();
    return;
  }
  start_next();
}

bool HeatmapQueue::cancel() {
  if (!running_) return false;
  progress_->cancel = true;
  emit changed();
  return true;
}

void HeatmapQueue::cancel_all() {
  waiting_.clear();
  if (!cancel()) emit changed();
}

int64_t HeatmapQueue::tiles_done() const { return progress_ ? progress_->tiles_done.load() : 0; }

QString HeatmapQueue::status() const {
  if (!running_) return {};
  QString text = tr("Heatmap of %1: ").arg(QFileInfo(running_->slide).fileName());
  if (progress_->cancel) {
    text += tr("cancelling at the next tile");
  } else if (progress_->segment < 0) {
    text += tr("opening the slide and planning");
  } else {
    text += tr("segment %1 · tile %2/%3")
                .arg(progress_->segment + 1)
                .arg(progress_->tile + 1)
                .arg(progress_->tiles);
  }
  text += QStringLiteral(" · ") + minutes_seconds(clock_.elapsed());
  if (!waiting_.empty())
    text += tr(" · %n more waiting", nullptr, static_cast<int>(waiting_.size()));
  return text;
}

void HeatmapQueue::start_next() {
  if (running_ || waiting_.empty()) {
    emit changed();
    return;
  }
  running_ = std::move(waiting_.front());
  waiting_.pop_front();
  progress_ = std::make_shared<HeatmapProgress>();
  clock_.start();
  poll_.start();
  pool_.start([this, job = *running_, progress = progress_] {
    ProgressObserver observer(progress.get());
    HeatmapOrder order{job.checkpoint.toStdString(), job.slide.toStdString(),
                       job.out_dir.toStdString(), job.base_mpp, &observer};
    // Each outcome is handed to the UI thread, which starts the next heatmap.
    try {
      HeatmapOverlay overlay = compute_heatmap_overlay(order);
      QMetaObject::invokeMethod(
          this,
          [this, job, overlay = std::move(overlay)] {
            done();
            emit finished(job, overlay);
            start_next();
          },
          Qt::QueuedConnection);
    } catch (const Cancelled&) {
      QMetaObject::invokeMethod(
          this,
          [this, job] {
            done();
            emit cancelled(job);
            start_next();
          },
          Qt::QueuedConnection);
    } catch (const std::exception& e) {
      QMetaObject::invokeMethod(
          this,
          [this, job, reason = QString::fromStdString(e.what())] {
            done();
            emit failed(job, reason);
            start_next();
          },
          Qt::QueuedConnection);
    }
  });
  emit changed();
}

void HeatmapQueue::done() {
  running_.reset();
  poll_.stop();
}

}  // namespace tessel::gui
