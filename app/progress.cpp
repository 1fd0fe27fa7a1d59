#include "app/progress.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <iostream>

#include "core/plan/plan.h"

namespace tessel::app {
namespace {

using Clock = std::chrono::steady_clock;

std::string duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(text, sizeof text, "%lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  }
  return text;
}

}  // namespace

ProgressPrinter::ProgressPrinter(bool terminal) : terminal_(terminal) {}

ProgressPrinter::~ProgressPrinter() { clear_line(); }

void ProgressPrinter::clear_line() {
  if (line_open_) {
    std::cerr << "\r\033[K" << std::flush;
    line_open_ = false;
  }
}

void ProgressPrinter::on_tile(const core::TileEvent& e) {
  std::lock_guard lock(mutex_);
  tile_ = e;
  if (e.done) ++tiles_done_;
  redraw(false);
}

void ProgressPrinter::on_memory(const core::MemorySample& m) {
  std::lock_guard lock(mutex_);
  // What the step uses, as the budget bounds it: above the bytes live when it began (the weights,
  // the optimizer's state and the run's own tensors are below).
  live_bytes_ = std::max<int64_t>(0, m.live - m.baseline);
  peak_bytes_ = std::max(peak_bytes_, m.peak - m.baseline);
}

void ProgressPrinter::on_slide(const pipelines::SlideProgress& s) {
  std::lock_guard lock(mutex_);
  slide_ = s;
  if (!s.done) {
    slide_start_ = Clock::now();
    tiles_done_ = 0;
    return;
  }
  ++slides_done_;
  clear_line();
  if (s.phase == "train") {
    spdlog::info(
        "epoch {}/{} · {} {}/{} {} · {}×{} px · loss {:.4f} · {:.1f} s · {} tiles · peak "
        "{} (predicted {})",
        s.epoch, s.epochs, s.phase, s.index + 1, s.count, s.slide, s.width, s.height, s.loss,
        s.seconds, s.tiles,
        s.measured_peak_bytes >= 0 ? core::format_bytes(s.measured_peak_bytes) : "?",
        // On the measurement's basis: less the weights and optimizer state live before the step.
        core::format_bytes(s.predicted_peak_bytes - s.fixed_bytes));
  } else {
    spdlog::debug("epoch {}/{} · {} {}/{} {} · loss {:.4f} · {:.1f} s", s.epoch, s.epochs, s.phase,
                  s.index + 1, s.count, s.slide, s.loss, s.seconds);
  }
}

void ProgressPrinter::on_epoch(const pipelines::EpochReport& /*e*/) {
  std::lock_guard lock(mutex_);
  clear_line();
}

void ProgressPrinter::redraw(bool force) {
  if (!terminal_) return;
  const auto now = Clock::now();
  if (!force && now - last_draw_ < std::chrono::milliseconds(200)) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - slide_start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(tiles_done_) / elapsed : 0;
  // ETA of the run from the mean slide time so far.
  const double run_elapsed = std::chrono::duration<double>(now - run_start_).count();
  const int64_t slides_left =
      (slide_.epochs - slide_.epoch) * (slide_.count + 1) + (slide_.count - slide_.index);
  std::string eta = slides_done_ > 0 ? duration(run_elapsed / static_cast<double>(slides_done_) *
                                                static_cast<double>(slides_left))
                                     : "?";
  char line[400];
  std::snprintf(line, sizeof line,
                "epoch %lld/%lld · %s %lld/%lld %s · %s seg %d tile %lld/%lld · %.1f tiles/s · "
                "step memory %s (peak %s / budget %s) · ETA ~%s",
                static_cast<long long>(slide_.epoch), static_cast<long long>(slide_.epochs),
                slide_.phase.c_str(), static_cast<long long>(slide_.index + 1),
                static_cast<long long>(slide_.count), slide_.slide.c_str(),
                tile_.pass == core::TileEvent::kForward ? "forward" : "backward", tile_.segment,
                static_cast<long long>(tile_.tile + 1), static_cast<long long>(tile_.tiles), rate,
                core::format_bytes(live_bytes_).c_str(), core::format_bytes(peak_bytes_).c_str(),
                slide_.budget_bytes > 0 ? core::format_bytes(slide_.budget_bytes).c_str() : "-",
                eta.c_str());
  std::cerr << "\r\033[K" << line << std::flush;
  line_open_ = true;
}

}  // namespace tessel::app
