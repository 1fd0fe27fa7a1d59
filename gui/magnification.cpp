#include "gui/magnification.h"

#include <cmath>

namespace tessel::gui {

double downsample_for_magnification(double magnification, double mpp) {
  return 10.0 / magnification / mpp;
}

double magnification_for_downsample(double downsample, double mpp) {
  return 10.0 / (downsample * mpp);
}

QString cursor_readout(QPointF level0, std::optional<double> mpp_x, std::optional<double> mpp_y) {
  // The pixel the cursor is in, not the nearest corner.
  const auto px_x = static_cast<long long>(std::floor(level0.x()));
  const auto px_y = static_cast<long long>(std::floor(level0.y()));
  if (!mpp_x || !(*mpp_x > 0)) {
    return QStringLiteral("x %1 px, y %2 px (no mpp)").arg(px_x).arg(px_y);
  }
  const double my = mpp_y && *mpp_y > 0 ? *mpp_y : *mpp_x;
  return QStringLiteral("x %1 µm, y %2 µm (%3, %4 px)")
      .arg(level0.x() * *mpp_x, 0, 'f', 1)
      .arg(level0.y() * my, 0, 'f', 1)
      .arg(px_x)
      .arg(px_y);
}

QString zoom_readout(double downsample, std::optional<double> mpp, int level) {
  if (mpp && *mpp > 0) {
    const double m = magnification_for_downsample(downsample, *mpp);
    return QStringLiteral("≈ %1× · level %2").arg(m, 0, 'g', m < 10 ? 2 : 3).arg(level);
  }
  return QStringLiteral("zoom %1% (no mpp) · level %2")
      .arg(std::round(100.0 / downsample), 0, 'f', 0)
      .arg(level);
}

}  // namespace tessel::gui
