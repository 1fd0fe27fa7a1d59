// The heatmaps asked for, computed one at a time on a worker thread in the order asked: the one
// running shows its progress (the segment and tile the engine is at, and the time so far), the
// ones waiting are listed, and Cancel stops the running one at the engine's next tile (nothing is
// written then: make_heatmap writes its files only at the end). A request is never dropped
// silently: it runs, is cancelled, or fails with a message.
#pragma once

#include <QElapsedTimer>
#include <QObject>
#include <QString>
#include <QStringList>
#include <QThreadPool>
#include <QTimer>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

#include "gui/heatmap_overlay.h"

namespace tessel::gui {

struct HeatmapJob {
  QString checkpoint, slide, out_dir;
  std::optional<double> base_mpp;  // entered in the viewer for a slide without one
  quint64 serial = 0;              // the viewer's slide when asked (MainWindow's serial)
};

// Where the running heatmap is, written by the worker and read by the UI thread.
struct HeatmapProgress {
  std::atomic<int> segment{-1};  // -1: opening the slide and planning
  std::atomic<int64_t> tile{0}, tiles{0};
  std::atomic<int64_t> tiles_done{0};
  std::atomic<bool> cancel{false};
};

class HeatmapQueue : public QObject {
  Q_OBJECT

 public:
  explicit HeatmapQueue(QObject* parent = nullptr);
  ~HeatmapQueue() override;  // cancels the running heatmap and waits for it

  void add(HeatmapJob job);  // runs it now, or after the ones before it
  // The running heatmap stops at the engine's next tile (cancelled follows); the waiting ones
  // stay. False when none runs.
  bool cancel();
  void cancel_all();  // the running one and every waiting one

  bool busy() const { return running_.has_value(); }
  const std::optional<HeatmapJob>& running() const { return running_; }
  const std::deque<HeatmapJob>& waiting() const { return waiting_; }
  // "Heatmap of slide.svs: segment 2 · tile 14/40 · 0:12" (or "opening the slide and planning"),
  // and "· 2 waiting" after it; empty when idle.
  QString status() const;
  int64_t tiles_done() const;  // of the running heatmap
  const HeatmapProgress* progress() const { return running_ ? progress_.get() : nullptr; }

 signals:
  void changed();  // started, progressed, waiting list changed, or idle
  void finished(HeatmapJob job, HeatmapOverlay overlay);
  void failed(HeatmapJob job, QString reason);
  void cancelled(HeatmapJob job);

 private:
  void start_next();
  void done();

  std::deque<HeatmapJob> waiting_;
  std::optional<HeatmapJob> running_;
  std::shared_ptr<HeatmapProgress> progress_;
  QElapsedTimer clock_;
  QTimer poll_;  // progress read at 5 Hz while one runs
  QThreadPool pool_;
};

}  // namespace tessel::gui
