// One training run on a worker thread: pipelines::train with an observer whose events are
// buffered under a mutex and handed to the UI thread in batches (a 50 ms timer on the UI thread
// drains the buffer; tile events come thousands a second, the UI repaints at most 20 times a
// second). spdlog lines of the run reach the UI the same way. Stop = the pipeline's stop_now
// flag: the run ends at the engine's next tile event, and last.h5 holds the position before the
// slide in progress (trained again on resume). The pipeline writes train.log through its own
// sink for the run only (pipelines::RunLogFile); the sink that forwards lines here is removed
// when the run ends too.
#pragma once

#include <QObject>
#include <QString>
#include <QStringList>
#include <QTimer>

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <variant>
#include <vector>

#include "pipelines/train.h"

namespace tessel::gui {

struct TimedMemorySample {
  double seconds = 0;  // since the run started
  core::MemorySample sample;
};
using TrainingEvent = std::variant<core::TileEvent, TimedMemorySample, pipelines::SlideProgress,
                                   pipelines::EpochReport>;

// What the worker produced since the last drain, in the order it happened (a slide's start must
// reset the tile grid before that slide's tiles are applied).
struct TrainingEvents {
  std::vector<TrainingEvent> events;
  QStringList log;
  bool empty() const { return events.empty() && log.isEmpty(); }
};

class TrainingRun : public QObject {
  Q_OBJECT

 public:
  static constexpr int kDrainMs = 50;

  explicit TrainingRun(QObject* parent = nullptr);
  ~TrainingRun() override;  // stops a run still going and waits for it

  // Returns at once; events(), then finished() or failed() follow on the UI thread.
  void start(const pipelines::TrainConfig& config, bool resume = false);
  void stop();  // at the next tile, with a checkpoint of the slides finished
  bool running() const { return running_; }
  bool stopping() const { return stop_; }

  // Called by the observer and the log sink on the worker thread.
  void push(const core::TileEvent& e);
  void push(const core::MemorySample& m);
  void push(const pipelines::SlideProgress& s);
  void push(const pipelines::EpochReport& e);
  void push_log(QString line);

 signals:
  void events(const tessel::gui::TrainingEvents& batch);
  void finished(const tessel::pipelines::TrainSummary& summary);
  void failed(QString message);

 private:
  void drain();
  void done();  // on the UI thread after the worker returned

  std::thread worker_;
  std::atomic<bool> stop_{false};
  bool running_ = false;
  QTimer timer_;
  std::mutex mutex_;
  TrainingEvents pending_;
  std::chrono::steady_clock::time_point start_;
  std::shared_ptr<void> log_sink_;  // spdlog sink, removed when the run ends
};

}  // namespace tessel::gui

Q_DECLARE_METATYPE(tessel::gui::TrainingEvents)
Q_DECLARE_METATYPE(tessel::pipelines::TrainSummary)
