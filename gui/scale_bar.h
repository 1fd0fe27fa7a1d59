// The viewer's scale bar: the longest round length (1, 2 or 5 × 10ⁿ) that fits in a given width
// on screen, in µm or mm when the slide has microns per pixel, else in level-0 pixels.
#pragma once

#include <QString>

#include <optional>

namespace tessel::gui {

struct ScaleBar {
  double length_px = 0;   // on screen
  double value = 0;       // in `unit`
  QString unit;           // "µm", "mm" or "px"
  QString label() const;  // "500 µm", "2 mm", "1000 px (no mpp)"
};

// `mpp`: microns per level-0 pixel (none: the bar measures level-0 pixels); `downsample`: level-0
// pixels per screen pixel; the bar is at most `max_length_px` long and at least
// 40% of it.
ScaleBar scale_bar(std::optional<double> mpp, double downsample, double max_length_px);

}  // namespace tessel::gui
