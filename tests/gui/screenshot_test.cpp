// Renders the main window offscreen with a real slide zoomed in, its tissue overlay on and a
// dataset listed, and saves it as viewer.png in the build tree (docs/viewer.png is one of these).
#include <vips/vips8>

#include <QDir>
#include <QFileInfo>
#include <QSignalSpy>
#include <QTest>

#include <cstring>
#include <vector>

#include "gui/main_window.h"
#include "io/vips.h"
#include "tests/io/shared_slides.h"
#include "tests/io/temp_folder.h"

namespace tessel::gui {

class ScreenshotTest : public QObject {
  Q_OBJECT

 private slots:
  void rendersTheViewerWithATissueOverlayAndADataset() {
    io::start_vips();
    constexpr int kTimeoutMs = 30000;
    MainWindow window;
    window.resize(1024, 760);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));

    test::TempFolder folder;
    const auto csv = folder.write(
        "dataset.csv", "slide,label,split\n" + test::shared_slide("cmu-1-small-region.svs") +
                           ",tumor,train\n" + test::shared_slide("tcga-cr-7395-01a-01-ts1.svs") +
                           ",normal,val\n" + "missing-case.svs,tumor,val\n" +
                           test::shared_slide("unreadable.svs") + ",normal,val\n");
    QSignalSpy loaded(window.dataset(), &DatasetPanel::manifestLoaded);
    window.open_manifest(QString::fromStdString(csv.string()));
    QVERIFY(loaded.wait(kTimeoutMs));

    QSignalSpy opened(&window, &MainWindow::slideOpened);
    window.open_slide(QString::fromStdString(test::shared_slide("cmu-1-small-region.svs")));
    QVERIFY(opened.wait(kTimeoutMs));
    SlideView* view = window.slide_view();
    view->zoom_by(1.6);
    window.tissue_action()->setChecked(true);
    QTRY_VERIFY_WITH_TIMEOUT(view->visible_tiles_loaded() && !window.dataset()->busy(), kTimeoutMs);

    const QImage shot = window.grab().toImage();
    QVERIFY(!shot.isNull());
    const QString path = QDir(QStringLiteral(TESSEL_GUI_OUTPUT_DIR)).filePath("viewer.png");
    QVERIFY(shot.save(path, "PNG", 0));  // quality 0: PNG's strongest compression
    // The same as a 256-colour PNG (libvips' palette quantisation): small enough for docs/.
    const QImage rgb = shot.convertToFormat(QImage::Format_RGB888);
    std::vector<uint8_t> pixels(static_cast<size_t>(3) * rgb.width() * rgb.height());
    for (int y = 0; y < rgb.height(); ++y) {
      std::memcpy(pixels.data() + static_cast<size_t>(3) * rgb.width() * y, rgb.constScanLine(y),
                  static_cast<size_t>(3) * rgb.width());
    }
    const QString small = QDir(QStringLiteral(TESSEL_GUI_OUTPUT_DIR)).filePath("viewer-docs.png");
    vips::VImage::new_from_memory(pixels.data(), pixels.size(), rgb.width(), rgb.height(), 3,
                                  VIPS_FORMAT_UCHAR)
        .pngsave(small.toStdString().c_str(), vips::VImage::option()->set("palette", true));
    qInfo("screenshot: %s (%dx%d, %lld bytes), %s (%lld bytes)", qPrintable(path), shot.width(),
          shot.height(), QFileInfo(path).size(), qPrintable(small), QFileInfo(small).size());
    // The slide area is not the empty background: tiles were drawn.
    const QImage centre = view->grab().toImage();
    const QColor c = centre.pixelColor(centre.width() / 2, centre.height() / 2);
    QVERIFY(c != QColor(58, 60, 64));
  }
};

}  // namespace tessel::gui

QTEST_MAIN(tessel::gui::ScreenshotTest)
#include "screenshot_test.moc"
