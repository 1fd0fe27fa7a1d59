// The viewer's ruler: a line between two level-0 points measured in µm from the slide's microns
// per pixel (mpp), or in level-0 pixels, labelled as such, when the slide has none. Pure
// functions.
#pragma once

#include <QPointF>
#include <QString>

#include <optional>

namespace tessel::gui {

struct RulerLength {
  double value = 0;       // in `unit`
  QString unit;           // "µm", "mm" or "px"
  QString label() const;  // "123.4 µm", "1.23 mm", "250 px (no mpp)"
};

// The length from `from` to `to` (level-0 pixels): µm (mm from 1000 µm on) with `mpp_x`, where
// `mpp_y` (default `mpp_x`) scales the vertical part; level-0 px without mpp.
RulerLength ruler_length(QPointF from, QPointF to, std::optional<double> mpp_x,
                         std::optional<double> mpp_y = std::nullopt);

}  // namespace tessel::gui
