// Renders the main window offscreen with a real slide zoomed in, its tissue overlay on, a ruler
// and a polygon ROI drawn, and a dataset listed, and saves it as viewer.png in the build tree
// (docs/viewer.png is one of these).
// libvips (through glib, for tests/gui/screenshots.h) before Qt: Qt defines `signals`.
#include <vips/vips8>

#include <QDir>
#include <QFileInfo>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTest>

#include "gui/main_window.h"
#include "io/vips.h"
#include "tests/gui/screenshots.h"
#include "tests/io/shared_slides.h"
#include "tests/io/temp_folder.h"

namespace tessel::gui {

class ScreenshotTest : public QObject {
  Q_OBJECT

 private slots:
  void rendersTheViewerWithATissueOverlayARulerAnRoiAndADataset() {
    // Opened files go to File ▸ Open Recent in QSettings: a test's own, never the user's.
    QStandardPaths::setTestModeEnabled(true);
    // Annotations are kept per slide in the app's data folder: none from an earlier run.
    QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation)).removeRecursively();
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
    // A polygon ROI around the gland at the bottom and a ruler across the tissue above it, placed
    // by their share of the view (Tools ▸ Polygon ROI left chosen, as after drawing).
    const auto at = [view](double x, double y) {
      return to_level0(view->view(), view->size(), QPointF(x * view->width(), y * view->height()));
    };
    view->add_roi(QPolygonF(
        {at(0.50, 0.66), at(0.63, 0.62), at(0.68, 0.80), at(0.58, 0.93), at(0.46, 0.84)}));
    view->set_ruler(QLineF(at(0.41, 0.35), at(0.64, 0.27)));
    window.tool_actions()[3]->trigger();
    QVERIFY(view->rois().size() == 1 && view->ruler());
    QTRY_VERIFY_WITH_TIMEOUT(view->visible_tiles_loaded() && !window.dataset()->busy(), kTimeoutMs);

    save_screenshot(&window, QStringLiteral("viewer"));
    if (QTest::currentTestFailed()) return;
    // The slide area is not the empty background: tiles were drawn.
    const QImage centre = view->grab().toImage();
    const QColor c = centre.pixelColor(centre.width() / 2, centre.height() / 2);
    QVERIFY(c != QColor(58, 60, 64));
  }
};

}  // namespace tessel::gui

QTEST_MAIN(tessel::gui::ScreenshotTest)
#include "screenshot_test.moc"
