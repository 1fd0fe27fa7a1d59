// Viewport ↔ level mapping (which level a zoom reads, which of its tiles the screen shows, when
// they are drawn smoothly) and the scale bar's round lengths, the magnification presets' zooms
// and the cursor readout.
#include <QTest>

#include "gui/magnification.h"
#include "gui/scale_bar.h"
#include "gui/viewport.h"

namespace tessel::gui {

namespace {

// A 4-level pyramid like an Aperio slide's: downsamples 1, 4, 16, 32 (the last not exact).
std::vector<io::Level> pyramid() {
  return {{40000, 30000, 1.0}, {10000, 7500, 4.0}, {2500, 1875, 16.0}, {1240, 930, 32.26}};
}

}  // namespace

class ViewportTest : public QObject {
  Q_OBJECT

 private slots:
  void readsTheCoarsestLevelThatIsNotCoarserThanTheScreen() {
    const std::vector<io::Level> levels = pyramid();
    QCOMPARE(level_for_downsample(levels, 0.25), 0);
    QCOMPARE(level_for_downsample(levels, 1.0), 0);
    QCOMPARE(level_for_downsample(levels, 3.9), 0);
    QCOMPARE(level_for_downsample(levels, 4.0), 1);
    QCOMPARE(level_for_downsample(levels, 15.0), 1);
    QCOMPARE(level_for_downsample(levels, 20.0), 2);
    // 32.26 is within 1% of 32: that level, not a blurred enlargement of level 2.
    QCOMPARE(level_for_downsample(levels, 32.0), 3);
    QCOMPARE(level_for_downsample(levels, 1000.0), 3);
  }

  void screenAndLevel0CoordinatesMapBothWays() {
    const ViewState view{QPointF(5000, 3000), 8.0};
    const QSize size(800, 600);
    QCOMPARE(to_screen(view, size, view.center), QPointF(400, 300));
    QCOMPARE(to_level0(view, size, QPointF(0, 0)), QPointF(5000 - 400 * 8, 3000 - 300 * 8));
    const QPointF p(1234.5, 987.25);
    const QPointF back = to_level0(view, size, to_screen(view, size, p));
    QVERIFY(qAbs(back.x() - p.x()) < 1e-9 && qAbs(back.y() - p.y()) < 1e-9);
    QCOMPARE(level0_rect(view, size), QRectF(1800, 600, 6400, 4800));
  }

  void fittingShowsTheWholeSlideWithAMargin() {
    const double d = fit_downsample(40000, 30000, QSize(800, 400));
    QVERIFY(40000 / d <= 800 && 30000 / d <= 400);
    QVERIFY(30000 / d > 0.9 * 400);
  }

  void visibleTilesCoverTheScreenNearestTheCentreFirst() {
    const std::vector<io::Level> levels = pyramid();
    // Level 1 (downsample 4) shown at downsample 4: 1 screen px per level px.
    const QRectF rect = level0_rect({QPointF(4 * 1000, 4 * 1000), 4.0}, QSize(512, 512));
    const std::vector<TileKey> tiles = visible_tiles(levels[1], 1, rect, 256);
    // Level pixels [744, 1256): columns and rows 2..4.
    QCOMPARE(tiles.size(), size_t{9});
    QCOMPARE(tiles.front(), (TileKey{1, 3, 3}));
    for (const TileKey& t : tiles) {
      QCOMPARE(t.level, 1);
      QVERIFY(t.column >= 2 && t.column <= 4 && t.row >= 2 && t.row <= 4);
    }
  }

  void visibleTilesStopAtTheLevelsEdges() {
    const std::vector<io::Level> levels = pyramid();
    // Far past the bottom-right corner of level 3 (1240 × 930: 5 × 4 tiles).
    const QRectF rect(-100000, -100000, 300000, 300000);
    const std::vector<TileKey> tiles = visible_tiles(levels[3], 3, rect, 256);
    QCOMPARE(tiles.size(), size_t{20});
    const QRect last = tile_rect(levels[3], {3, 4, 3}, 256);
    QCOMPARE(last, QRect(1024, 768, 1240 - 1024, 930 - 768));
    QCOMPARE(tile_level0_rect(levels[1], {1, 1, 0}, 256), QRectF(1024, 0, 1024, 1024));
  }

  // Above native resolution (a screen pixel smaller than a level-0 pixel) bilinear, as below it;
  // level 0's pixels one to one are not filtered.
  void tilesAreDrawnSmoothlyAboveAndBelowNativeResolutionButNotAtIt() {
    QVERIFY(smooth_tiles(0.25));
    QVERIFY(smooth_tiles(0.5));
    QVERIFY(smooth_tiles(0.999));
    QVERIFY(!smooth_tiles(1.0));
    QVERIFY(!smooth_tiles(10.0 / 20 / 0.5));  // 20× on a 0.5 µm slide
    QVERIFY(smooth_tiles(1.5));
    QVERIFY(smooth_tiles(16.0));
  }

  void scaleBarPicksTheLongestRoundLengthThatFits() {
    // 0.5 µm per px at 1:1, 200 px wide at most: 100 µm fits exactly.
    ScaleBar bar = scale_bar(0.5, 1.0, 200);
    QCOMPARE(bar.label(), QStringLiteral("100 µm"));
    QCOMPARE(bar.length_px, 200.0);
    // Downsample 16: 200 px is 1600 µm; 1 mm (not 2) fits, 125 px.
    bar = scale_bar(0.5, 16.0, 200);
    QCOMPARE(bar.label(), QStringLiteral("1 mm"));
    QCOMPARE(bar.length_px, 125.0);
    // Magnified 4× a 0.25 µm slide: 100 px is 6.25 µm → 5 µm.
    bar = scale_bar(0.25, 0.25, 100);
    QCOMPARE(bar.label(), QStringLiteral("5 µm"));
    QCOMPARE(bar.length_px, 80.0);
    // 200 px at downsample 1.5 with 0.5 µm: 150 µm → 100 µm; never under 40% of the room.
    bar = scale_bar(0.5, 1.5, 200);
    QCOMPARE(bar.label(), QStringLiteral("100 µm"));
    QVERIFY(bar.length_px >= 0.4 * 200);
  }

  // 10 / mpp: a 0.25 µm slide is 40× at its own pixels; 20× shows half of them.
  void magnificationPresetsFollowTheSlidesMpp() {
    QCOMPARE(downsample_for_magnification(40, 0.25), 1.0);
    QCOMPARE(downsample_for_magnification(20, 0.25), 2.0);
    QCOMPARE(downsample_for_magnification(1, 0.25), 40.0);
    QCOMPARE(downsample_for_magnification(20, 0.5), 1.0);
    QCOMPARE(downsample_for_magnification(40, 0.5), 0.5);  // magnified past the scan
    QCOMPARE(magnification_for_downsample(2.0, 0.25), 20.0);
    QCOMPARE(magnification_for_downsample(8.0, 0.25), 5.0);
  }

  void cursorReadoutIsInMicronsAndPixelsOrLabelledPixelsWithoutMpp() {
    QCOMPARE(zoom_readout(0.5, 0.25, 0), QStringLiteral("≈ 80× · level 0"));
    QCOMPARE(zoom_readout(8, 0.25, 2), QStringLiteral("≈ 5× · level 2"));
    QCOMPARE(zoom_readout(0.174, std::nullopt, 0), QStringLiteral("zoom 575% (no mpp) · level 0"));
    QCOMPARE(cursor_readout(QPointF(1100.6, 1460.6), 0.5),
             QStringLiteral("x 550.3 µm, y 730.3 µm (1100, 1460 px)"));
    QCOMPARE(cursor_readout(QPointF(100, 200), 0.25, 0.5),
             QStringLiteral("x 25.0 µm, y 100.0 µm (100, 200 px)"));
    QCOMPARE(cursor_readout(QPointF(1100.9, 3.2), std::nullopt),
             QStringLiteral("x 1100 px, y 3 px (no mpp)"));
  }

  void scaleBarWithoutMppMeasuresLevel0Pixels() {
    const ScaleBar bar = scale_bar(std::nullopt, 8.0, 150);
    QCOMPARE(bar.label(), QStringLiteral("1000 px (no mpp)"));
    QCOMPARE(bar.length_px, 125.0);
  }
};

}  // namespace tessel::gui

QTEST_MAIN(tessel::gui::ViewportTest)
#include "viewport_test.moc"
