#include "gui/slide_document.h"

#include <exception>

#include "core/error.h"
#include "io/thumbnail.h"

namespace tessel::gui {

QImage to_qimage(const io::RgbImage& image) {
  QImage out(static_cast<int>(image.width), static_cast<int>(image.height), QImage::Format_RGB32);
  for (int y = 0; y < out.height(); ++y) {
    auto* line = reinterpret_cast<QRgb*>(out.scanLine(y));
    const uint8_t* p = image.pixels.data() + 3 * static_cast<size_t>(y) * image.width;
    for (int x = 0; x < out.width(); ++x, p += 3) line[x] = qRgb(p[0], p[1], p[2]);
  }
  return out;
}

QImage tissue_overlay_image(const io::TissueMask& mask) {
  // Glass dimmed, tissue left in its true colours, its outline in green: a stain's hues are what
  // a pathologist judges the mask by, so they are not tinted.
  QImage out(static_cast<int>(mask.width), static_cast<int>(mask.height),
             QImage::Format_ARGB32_Premultiplied);
  const QRgb glass = qPremultiply(qRgba(15, 25, 55, 110));
  const QRgb edge = qPremultiply(qRgba(0, 210, 70, 240));
  const int w = out.width(), h = out.height();
  // Tissue within 1 pixel of glass (or of the image border) is the outline: 2 pixels wide.
  const auto tissue = [&](int x, int y) {
    return x >= 0 && y >= 0 && x < w && y < h && mask.at(x, y);
  };
  for (int y = 0; y < h; ++y) {
    auto* line = reinterpret_cast<QRgb*>(out.scanLine(y));
    for (int x = 0; x < w; ++x) {
      if (!mask.at(x, y)) {
        line[x] = glass;
        continue;
      }
      bool border = false;
      for (int dy = -1; dy <= 1 && !border; ++dy) {
        for (int dx = -1; dx <= 1 && !border; ++dx) border = !tissue(x + dx, y + dy);
      }
      line[x] = border ? edge : 0;
    }
  }
  return out;
}

SlideDocument open_slide_document(const std::filesystem::path& path) {
  auto slide = std::make_shared<const io::Slide>(path);
  SlideDocument doc;
  const io::RgbImage overview = io::thumbnail(*slide, kOverviewSidePx);
  doc.overview = to_qimage(overview);
  try {
    const io::Level& base = slide->level(0);
    io::TissueMaskOptions options;
    options.max_side_px = std::max(overview.width, overview.height);
    const io::TissueMask mask =
        io::tissue_mask(overview, base.width, base.height, slide->mpp_x(), options);
    doc.tissue = tissue_overlay_image(mask);
    doc.tissue_note = QString::fromStdString(io::to_string(mask));
  } catch (const std::exception& e) {
    doc.tissue_note = QStringLiteral("no tissue mask: %1").arg(QString::fromStdString(e.what()));
  }
  doc.slide = std::move(slide);
  return doc;
}

}  // namespace tessel::gui
