// The largest gap between ticks of a 5 ms timer on the UI thread while it lives: how long the
// window could not repaint or answer the user. Shared by the window tests.
#pragma once

#include <QElapsedTimer>
#include <QObject>
#include <QTimer>

#include <algorithm>

namespace tessel::gui {

class StallMeter {
 public:
  StallMeter() {
    clock_.start();
    QObject::connect(&timer_, &QTimer::timeout, [this] {
      largest_ms_ = std::max(largest_ms_, clock_.restart());
      ++ticks_;
    });
    timer_.start(5);
  }
  qint64 largest_ms() const { return largest_ms_; }
  int ticks() const { return ticks_; }

 private:
  QTimer timer_;
  QElapsedTimer clock_;
  qint64 largest_ms_ = 0;
  int ticks_ = 0;
};

}  // namespace tessel::gui
