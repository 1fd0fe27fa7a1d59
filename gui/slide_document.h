// A slide as the GUI holds it: the open io::Slide (shared with the tile loader's workers), its
// overview image and its tissue mask as an overlay. Made off the UI thread: opening and the
// overview read a whole level.
#pragma once

#include <QImage>
#include <QString>

#include <filesystem>
#include <memory>

#include "io/slide.h"
#include "io/tissue.h"

namespace tessel::gui {

struct SlideDocument {
  std::shared_ptr<const io::Slide> slide;
  QImage overview;      // the whole slide, longest side kOverviewSidePx
  QImage tissue;        // the mask as translucent green over tissue, overview-sized; null if none
  QString tissue_note;  // what the mask found (io::to_string), or why there is none
};

constexpr int kOverviewSidePx = 1024;

// Opens `path` and reads its overview and tissue mask. Throws tessel::Error naming the file when
// it cannot be opened or read; a failed tissue mask only leaves `tissue` null.
SlideDocument open_slide_document(const std::filesystem::path& path);

QImage to_qimage(const io::RgbImage& image);              // RGB32 copy
QImage tissue_overlay_image(const io::TissueMask& mask);  // ARGB32, transparent on glass

}  // namespace tessel::gui
