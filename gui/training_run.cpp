#include "gui/training_run.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>

namespace tessel::gui {

namespace {

class Forwarder : public pipelines::TrainObserver {
 public:
  explicit Forwarder(TrainingRun* run) : run_(run) {}
  void on_tile(const core::TileEvent& e) override { run_->push(e); }
  void on_memory(const core::MemorySample& m) override { run_->push(m); }
  void on_slide(const pipelines::SlideProgress& s) override { run_->push(s); }
  void on_epoch(const pipelines::EpochReport& e) override { run_->push(e); }

 private:
  TrainingRun* run_;
};

// spdlog lines into the run's buffer (spdlog may log from any thread; the buffer is locked).
class LogSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit LogSink(TrainingRun* run) : run_(run) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t text;
    formatter_->format(msg, text);
    QString line = QString::fromUtf8(text.data(), static_cast<qsizetype>(text.size()));
    while (line.endsWith(QLatin1Char('\n'))) line.chop(1);
    run_->push_log(std::move(line));
  }
  void flush_() override {}

 private:
  TrainingRun* run_;
};

}  // namespace

// One sink in the default logger, installed once, that forwards to the running run's sink:
// spdlog's logger sink list is not safe to change while other threads log; a dist_sink's
// add_sink/remove_sink take its own lock.
static std::shared_ptr<spdlog::sinks::dist_sink_mt> run_log_sinks() {
  static const auto sinks = [] {
    auto d = std::make_shared<spdlog::sinks::dist_sink_mt>();
    spdlog::default_logger()->sinks().push_back(d);
    return d;
  }();
  return sinks;
}

TrainingRun::TrainingRun(QObject* parent) : QObject(parent) {
  run_log_sinks();  // installed on the UI thread before any run's worker starts
  qRegisterMetaType<TrainingEvents>();
  qRegisterMetaType<pipelines::TrainSummary>();
  timer_.setInterval(kDrainMs);
  connect(&timer_, &QTimer::timeout, this, &TrainingRun::drain);
}

TrainingRun::~TrainingRun() {
  stop_ = true;
  if (worker_.joinable()) worker_.join();
  if (log_sink_) {
    run_log_sinks()->remove_sink(std::static_pointer_cast<spdlog::sinks::sink>(log_sink_));
  }
}

void TrainingRun::start(const pipelines::TrainConfig& config, bool resume) {
  if (running_) return;
  if (worker_.joinable()) worker_.join();
  running_ = true;
  stop_ = false;
  pending_ = TrainingEvents();
  start_ = std::chrono::steady_clock::now();
  auto sink = std::make_shared<LogSink>(this);
  sink->set_pattern("%H:%M:%S %l %v");
  run_log_sinks()->add_sink(sink);
  log_sink_ = sink;
  timer_.start();
  worker_ = std::thread([this, config, resume] {
    Forwarder observer(this);
    pipelines::TrainRequest request;
    request.config = config;
    request.resume = resume;
    request.stop = &stop_;
    request.stop_now = &stop_;
    request.observer = &observer;
    try {
      const pipelines::TrainSummary summary = pipelines::train(request);
      QMetaObject::invokeMethod(
          this,
          [this, summary] {
            done();
            emit finished(summary);
          },
          Qt::QueuedConnection);
    } catch (const std::exception& e) {
      const QString reason = QString::fromStdString(e.what());
      QMetaObject::invokeMethod(
          this,
          [this, reason] {
            done();
            emit failed(reason);
          },
          Qt::QueuedConnection);
    }
  });
}

void TrainingRun::stop() {
  if (running_) stop_ = true;
}

void TrainingRun::done() {
  if (worker_.joinable()) worker_.join();
  timer_.stop();
  if (log_sink_) {
    run_log_sinks()->remove_sink(std::static_pointer_cast<spdlog::sinks::sink>(log_sink_));
    log_sink_.reset();
  }
  drain();  // the last events before the summary
  running_ = false;
}

void TrainingRun::drain() {
  TrainingEvents batch;
  {
    std::lock_guard lock(mutex_);
    std::swap(batch, pending_);
  }
  if (!batch.empty()) emit events(batch);
}

void TrainingRun::push(const core::TileEvent& e) {
  std::lock_guard lock(mutex_);
  pending_.events.emplace_back(e);
}

void TrainingRun::push(const core::MemorySample& m) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::lock_guard lock(mutex_);
  pending_.events.emplace_back(TimedMemorySample{seconds, m});
}

void TrainingRun::push(const pipelines::SlideProgress& s) {
  std::lock_guard lock(mutex_);
  pending_.events.emplace_back(s);
}

void TrainingRun::push(const pipelines::EpochReport& e) {
  std::lock_guard lock(mutex_);
  pending_.events.emplace_back(e);
}

void TrainingRun::push_log(QString line) {
  std::lock_guard lock(mutex_);
  pending_.log.append(std::move(line));
}

}  // namespace tessel::gui
