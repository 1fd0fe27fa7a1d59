// Screenshots of the window tests: <name>.png and a 256-colour <name>-docs.png (libvips' palette
// quantisation, small enough for docs/) in the build tree, or in $TESSEL_SCREENSHOT_DIR when set
// (the Xvfb runs write beside the offscreen ones, not over them).
// Include it (or <vips/vips8>) before Qt headers: glib names a member `signals`, a Qt macro.
#pragma once

#include <vips/vips8>

#include <QDir>
#include <QFileInfo>
#include <QGuiApplication>
#include <QImage>
#include <QTest>
#include <QWidget>

#include <cstring>
#include <vector>

namespace tessel::gui {

inline QDir screenshot_dir() {
  const QString env = qEnvironmentVariable("TESSEL_SCREENSHOT_DIR");
  const QDir dir(env.isEmpty() ? QStringLiteral(TESSEL_GUI_OUTPUT_DIR) : env);
  dir.mkpath(QStringLiteral("."));
  return dir;
}

// QVERIFY inside: call it from the test function itself, then check QTest::currentTestFailed().
inline void save_screenshot(QWidget* widget, const QString& name) {
  const QImage shot = widget->grab().toImage();
  QVERIFY(!shot.isNull());
  const QDir out = screenshot_dir();
  QVERIFY(shot.save(out.filePath(name + ".png"), "PNG", 0));  // 0: strongest compression
  const QImage rgb = shot.convertToFormat(QImage::Format_RGB888);
  std::vector<uint8_t> pixels(static_cast<size_t>(3) * rgb.width() * rgb.height());
  for (int y = 0; y < rgb.height(); ++y) {
    std::memcpy(pixels.data() + static_cast<size_t>(3) * rgb.width() * y, rgb.constScanLine(y),
                static_cast<size_t>(3) * rgb.width());
  }
  const QString small = out.filePath(name + "-docs.png");
  vips::VImage::new_from_memory(pixels.data(), pixels.size(), rgb.width(), rgb.height(), 3,
                                VIPS_FORMAT_UCHAR)
      .pngsave(small.toStdString().c_str(), vips::VImage::option()->set("palette", true));
  qInfo("screenshot (%s platform): %s (%dx%d), %s (%lld bytes)",
        qPrintable(QGuiApplication::platformName()), qPrintable(out.filePath(name + ".png")),
        shot.width(), shot.height(), qPrintable(small), QFileInfo(small).size());
}

}  // namespace tessel::gui
