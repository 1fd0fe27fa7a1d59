#include "gui/scale_bar.h"

#include <cmath>

namespace tessel::gui {

QString ScaleBar::label() const {
  // Without mpp, said so: a bare "px" next to a slide reads as a length on the tissue.
  if (unit == QLatin1String("px")) return QStringLiteral("%1 px (no mpp)").arg(value);
  return QStringLiteral("%1 %2").arg(value).arg(unit);
}

ScaleBar scale_bar(std::optional<double> mpp, double downsample, double max_length_px) {
  // Units (µm or level-0 px) per screen pixel.
  const double per_px = downsample * (mpp && *mpp > 0 ? *mpp : 1.0);
  const double max_units = max_length_px * per_px;
  if (!(max_units > 0) || !std::isfinite(max_units)) return {};
  double step = std::pow(10.0, std::floor(std::log10(max_units)));
  for (const double m : {5.0, 2.0, 1.0}) {
    if (m * step <= max_units * (1 + 1e-9)) {
      step *= m;
      break;
    }
  }
  ScaleBar bar;
  bar.length_px = step / per_px;
  if (mpp && *mpp > 0) {
    if (step >= 1000) {
      bar.value = step / 1000;
      bar.unit = QStringLiteral("mm");
    } else {
      bar.value = step;
      bar.unit = QStringLiteral("µm");
    }
  } else {
    bar.value = step;
    bar.unit = QStringLiteral("px");
  }
  return bar;
}

}  // namespace tessel::gui
