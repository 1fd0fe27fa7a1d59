// Terminal progress for long runs: on a terminal, one status line redrawn in place (epoch, slide,
// pass, tiles done/total, tiles/s, the memory the step uses, live and peak, against the budget,
// ETA); otherwise (cluster logs, pipes) a plain log line per slide. Listens to the pipeline's
// events.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "pipelines/train.h"

namespace tessel::app {

class ProgressPrinter : public pipelines::TrainObserver {
 public:
  explicit ProgressPrinter(bool terminal);
  ~ProgressPrinter() override;
  void on_tile(const core::TileEvent& e) override;
  void on_memory(const core::MemorySample& m) override;
  void on_slide(const pipelines::SlideProgress& s) override;
  void on_epoch(const pipelines::EpochReport& e) override;

 private:
  void redraw(bool force);
  void clear_line();

  bool terminal_;
  std::mutex mutex_;
  pipelines::SlideProgress slide_;
  core::TileEvent tile_;
  int64_t tiles_done_ = 0;
  int64_t tiles_total_ = 0;  // forward + backward tiles of all segments of the current slide
  int64_t live_bytes_ = 0, peak_bytes_ = 0;
  std::chrono::steady_clock::time_point slide_start_, last_draw_;
  std::chrono::steady_clock::time_point run_start_ = std::chrono::steady_clock::now();
  int64_t slides_done_ = 0;
  bool line_open_ = false;
};

}  // namespace tessel::app
