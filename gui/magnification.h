// The viewer in a microscope's units, from the slide's microns per pixel (mpp): the
// magnification a zoom shows and the presets that set it, and the cursor's position in µm.
// Pure functions.
#pragma once

#include <QPointF>
#include <QString>

#include <array>
#include <optional>

namespace tessel::gui {

// The objectives a pathologist switches between: View ▸ Magnification and keys 1 … 5.
inline constexpr std::array<double, 5> kMagnificationPresets = {1, 5, 10, 20, 40};

// The usual convention, one screen pixel = 10 / magnification µm: 40× ≈ 0.25 µm/px,
// 20× ≈ 0.5 µm/px. Both give the zoom as level-0 pixels per screen pixel (the ViewState's).
double downsample_for_magnification(double magnification, double mpp);
double magnification_for_downsample(double downsample, double mpp);

// The status bar's cursor readout at `level0` (level-0 pixels): "x 548.9 µm, y 728.5 µm
// (1100, 1460 px)"; without mpp the pixels alone, labelled "x 1100 px, y 1460 px (no mpp)".
// `mpp_y` defaults to `mpp_x`.
QString cursor_readout(QPointF level0, std::optional<double> mpp_x,
                       std::optional<double> mpp_y = std::nullopt);

// The status bar's zoom: with mpp the magnification it matches ("≈ 20× · level 1"); without,
// the slide's pixels per screen pixel as a percentage ("zoom 575% (no mpp) · level 0": a
// magnification would be made up).
QString zoom_readout(double downsample, std::optional<double> mpp, int level);

}  // namespace tessel::gui
