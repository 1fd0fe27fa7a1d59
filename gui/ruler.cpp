#include "gui/ruler.h"

#include <cmath>

namespace tessel::gui {

QString RulerLength::label() const {
  // Without mpp, said so: a bare "px" reads as a length on the tissue (as the scale bar's).
  if (unit == QLatin1String("px")) return QStringLiteral("%1 px (no mpp)").arg(value, 0, 'f', 0);
  if (unit == QLatin1String("mm")) return QStringLiteral("%1 mm").arg(value, 0, 'f', 2);
  return QStringLiteral("%1 µm").arg(value, 0, 'f', 1);
}

RulerLength ruler_length(QPointF from, QPointF to, std::optional<double> mpp_x,
                         std::optional<double> mpp_y) {
  const double dx = to.x() - from.x(), dy = to.y() - from.y();
  if (!mpp_x || !(*mpp_x > 0)) return {std::hypot(dx, dy), QStringLiteral("px")};
  const double my = mpp_y && *mpp_y > 0 ? *mpp_y : *mpp_x;
  const double um = std::hypot(dx * *mpp_x, dy * my);
  if (um >= 1000) return {um / 1000, QStringLiteral("mm")};
  return {um, QStringLiteral("µm")};
}

}  // namespace tessel::gui
