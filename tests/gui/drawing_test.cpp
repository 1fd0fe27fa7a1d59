// The viewer's drawing tools as pure geometry: the ruler's length in µm (px, labelled, without
// mpp), and ROIs (a rectangle from two corners, when a click closes a polygon, their area) written
// as GeoJSON that io/roi.h, which training uses, reads back.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTest>

#include <limits>
#include <vector>

#include "gui/heatmap_overlay.h"
#include "gui/roi_geojson.h"
#include "gui/ruler.h"
#include "io/roi.h"

namespace tessel::gui {

class DrawingTest : public QObject {
  Q_OBJECT

 private slots:
  // A 3-4-5 triangle: 500 level-0 px is 250 µm at 0.5 µm/px.
  void theRulersLengthIsInMicronsFromTheMpp() {
    RulerLength length = ruler_length(QPointF(100, 200), QPointF(400, 600), 0.5);
    QCOMPARE(length.value, 250.0);
    QCOMPARE(length.label(), QStringLiteral("250.0 µm"));
    // From 1000 µm on, in mm.
    length = ruler_length(QPointF(0, 0), QPointF(3000, 4000), 0.5);
    QCOMPARE(length.label(), QStringLiteral("2.50 mm"));
    // Pixels that are not square: the vertical part at mpp_y.
    length = ruler_length(QPointF(0, 0), QPointF(30, 20), 0.5, 1.0);
    QCOMPARE(length.value, 25.0);
  }

  void withoutMppTheRulerMeasuresLabelledLevel0Pixels() {
    const RulerLength length = ruler_length(QPointF(0, 0), QPointF(300, 400), std::nullopt);
    QCOMPARE(length.value, 500.0);
    QCOMPARE(length.label(), QStringLiteral("500 px (no mpp)"));
    QCOMPARE(ruler_length(QPointF(0, 0), QPointF(3, 4), 0.0).label(),
             QStringLiteral("5 px (no mpp)"));
  }

  void aRectangleIsItsFourCornersWhicheverCornersWereDragged() {
    const QPolygonF expected(
        {QPointF(10, 20), QPointF(110, 20), QPointF(110, 70), QPointF(10, 70)});
    QCOMPARE(rectangle_roi(QPointF(10, 20), QPointF(110, 70)), expected);
    QCOMPARE(rectangle_roi(QPointF(110, 20), QPointF(10, 70)), expected);
    QCOMPARE(polygon_area(expected), 5000.0);
  }

  void aClickNearTheFirstPointClosesAPolygonOfThreeOrMore() {
    const QPolygonF two({QPointF(0, 0), QPointF(100, 0)});
    QVERIFY(!closes_polygon(two, QPointF(1, 1), 8));
    const QPolygonF three({QPointF(0, 0), QPointF(100, 0), QPointF(100, 100)});
    QVERIFY(closes_polygon(three, QPointF(5, 5), 8));
    QVERIFY(!closes_polygon(three, QPointF(6, 6), 8));
  }

  void pointsOnOneLineHaveNoArea() {
    QCOMPARE(polygon_area(QPolygonF({QPointF(0, 0), QPointF(5, 5), QPointF(10, 10)})), 0.0);
    QCOMPARE(polygon_area(QPolygonF({QPointF(0, 0), QPointF(5, 5)})), 0.0);
    // Either orientation.
    QCOMPARE(polygon_area(QPolygonF({QPointF(0, 0), QPointF(0, 10), QPointF(10, 0)})), 50.0);
  }

  void pointsOutsideTheSlideAreMovedOntoIt() {
    const QPolygonF moved =
        clamped(QPolygonF({QPointF(-5, 10), QPointF(300, 260)}), QRectF(0, 0, 300, 250));
    QCOMPARE(moved, QPolygonF({QPointF(0, 10), QPointF(300, 250)}));
  }

  // QuPath's layout (FeatureCollection, Polygon features, objectType annotation), rings closed,
  // and what training reads back: the same polygons and their bounding box.
  void roisAreWrittenAsGeoJsonThatTrainingReadsBack() {
    const std::vector<QPolygonF> rois{
        rectangle_roi(QPointF(100.5, 200), QPointF(900, 1200.25)),
        QPolygonF({QPointF(1000, 1500), QPointF(1800.123, 1600), QPointF(1300, 2500)})};
    const QByteArray text = roi_geojson(rois);
    const QJsonObject document = QJsonDocument::fromJson(text).object();
    QCOMPARE(document["type"].toString(), QStringLiteral("FeatureCollection"));
    const QJsonArray features = document["features"].toArray();
    QCOMPARE(features.size(), 2);
    const QJsonObject feature = features[1].toObject();
    QCOMPARE(feature["type"].toString(), QStringLiteral("Feature"));
    QCOMPARE(feature["properties"].toObject()["objectType"].toString(),
             QStringLiteral("annotation"));
    QCOMPARE(feature["properties"].toObject()["name"].toString(), QStringLiteral("ROI 2"));
    const QJsonObject geometry = feature["geometry"].toObject();
    QCOMPARE(geometry["type"].toString(), QStringLiteral("Polygon"));
    const QJsonArray ring = geometry["coordinates"].toArray()[0].toArray();
    QCOMPARE(ring.size(), 4);  // 3 corners and the first again
    QCOMPARE(ring[0], ring[3]);
    QCOMPARE(ring[1].toArray()[0].toDouble(), 1800.12);  // to 0.01 px

    const io::RegionOfInterest roi = io::parse_roi(text.toStdString(), "drawn", 2220, 2967);
    QCOMPARE(roi.polygons.size(), size_t{2});
    QCOMPARE(roi.polygons[0].exterior.size(), size_t{5});
    QCOMPARE(roi.polygons[0].exterior[2].x, 900.0);
    QCOMPARE(roi.polygons[0].exterior[2].y, 1200.25);
    QCOMPARE(roi.polygons[1].exterior[2].x, 1300.0);
    // Outward to whole pixels: x 100–1801, y 200–2500.
    QCOMPARE(roi.bbox.x.begin, int64_t{100});
    QCOMPARE(roi.bbox.x.end, int64_t{1801});
    QCOMPARE(roi.bbox.y.begin, int64_t{200});
    QCOMPARE(roi.bbox.y.end, int64_t{2500});
  }

  // A heatmap's threshold drawn as outlines (issue 53): each region of cells at or above it, along
  // the cells' edges in level-0 pixels, corners only; regions touching at a corner apart; a hole
  // not outlined; glass (NaN) never in.
  void aHeatmapsThresholdIsOutlinedRegionByRegion() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const auto overlay = [](int w, int h, std::vector<float> scores) {
      HeatmapOverlay o;
      o.image = QImage(w, h, QImage::Format_ARGB32);
      o.level0 = QRectF(0, 0, 10.0 * w, 10.0 * h);
      o.scores = std::move(scores);
      return o;
    };
    const HeatmapOverlay o = overlay(6, 5, {0.2F, 0.2F, 0.2F, 0.2F, 0.2F, 0.2F,  //
                                            0.2F, 0.9F, 0.5F, 0.2F, 0.2F, 0.2F,  //
                                            0.2F, 0.9F, 0.2F, 0.2F, 0.9F, 0.2F,  //
                                            0.2F, 0.2F, 0.2F, 0.9F, 0.2F, 0.2F,  //
                                            nan,  nan,  nan,  nan,  nan,  nan});
    const std::vector<QPolygonF> outlines = threshold_outlines(o, 0.5F);
    QCOMPARE(outlines.size(), size_t{3});
    const QList<QPointF> l = {{10, 10}, {30, 10}, {30, 20}, {20, 20}, {20, 30}, {10, 30}};
    QCOMPARE(outlines[0].size(), l.size());
    for (const QPointF& p : l)
      QVERIFY2(outlines[0].contains(p), qPrintable(QString::number(p.x())));
    QCOMPARE(outlines[1].size(), 4);
    QCOMPARE(outlines[1].boundingRect(), QRectF(40, 20, 10, 10));
    QCOMPARE(outlines[2].boundingRect(), QRectF(30, 30, 10, 10));
    QVERIFY(threshold_outlines(o, 0.95F).empty());

    // A ring of eight cells around a low one: one outline, the square; the hole is not one.
    const HeatmapOverlay ring = overlay(3, 3, {1, 1, 1, 1, 0, 1, 1, 1, 1});
    const std::vector<QPolygonF> square = threshold_outlines(ring, 0.5F);
    QCOMPARE(square.size(), size_t{1});
    QCOMPARE(square[0].size(), 4);
    QCOMPARE(square[0].boundingRect(), QRectF(0, 0, 30, 30));
  }
};

}  // namespace tessel::gui

QTEST_MAIN(tessel::gui::DrawingTest)
#include "drawing_test.moc"
