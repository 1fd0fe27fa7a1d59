#include "gui/roi_geojson.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineF>

#include <algorithm>
#include <cmath>

namespace tessel::gui {

namespace {

double hundredths(double v) { return std::round(v * 100) / 100; }

QJsonArray point(QPointF p) { return {hundredths(p.x()), hundredths(p.y())}; }

}  // namespace

QPolygonF rectangle_roi(QPointF a, QPointF b) {
  const QRectF r = QRectF(a, b).normalized();
  return QPolygonF({r.topLeft(), r.topRight(), r.bottomRight(), r.bottomLeft()});
}

bool closes_polygon(const QPolygonF& points, QPointF click, double tolerance) {
  return points.size() >= 3 && QLineF(points.front(), click).length() <= tolerance;
}

double polygon_area(const QPolygonF& polygon) {
  if (polygon.size() < 3) return 0;
  double twice = 0;
  for (qsizetype i = 0; i < polygon.size(); ++i) {
    const QPointF& p = polygon[i];
    const QPointF& q = polygon[(i + 1) % polygon.size()];
    twice += p.x() * q.y() - q.x() * p.y();
  }
  return std::abs(twice) / 2;
}

QPolygonF clamped(const QPolygonF& polygon, const QRectF& bounds) {
  QPolygonF out;
  for (const QPointF& p : polygon) {
    out << QPointF(std::clamp(p.x(), bounds.left(), bounds.right()),
                   std::clamp(p.y(), bounds.top(), bounds.bottom()));
  }
  return out;
}

QByteArray roi_geojson(const std::vector<QPolygonF>& rois) {
  QJsonArray features;
  for (size_t i = 0; i < rois.size(); ++i) {
    QJsonArray ring;
    for (const QPointF& p : rois[i]) ring.append(point(p));
    // GeoJSON's rings are closed: RFC 7946 §3.1.6.
    if (!rois[i].isEmpty() && !rois[i].isClosed()) ring.append(point(rois[i].front()));
    QJsonArray rings;  // not QJsonArray{ring}: that copies `ring` instead of nesting it
    rings.append(ring);
    const QJsonObject geometry{{"type", "Polygon"}, {"coordinates", rings}};
    const QJsonObject properties{{"objectType", "annotation"},
                                 {"name", QStringLiteral("ROI %1").arg(i + 1)}};
    features.append(
        QJsonObject{{"type", "Feature"}, {"geometry", geometry}, {"properties", properties}});
  }
  return QJsonDocument(QJsonObject{{"type", "FeatureCollection"}, {"features", features}})
      .toJson(QJsonDocument::Indented);
}

}  // namespace tessel::gui
