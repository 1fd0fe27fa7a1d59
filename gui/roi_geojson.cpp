#include "gui/roi_geojson.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QJsonParseError>
#include <QLineF>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

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
  std::vector<Annotation> named;
  for (size_t i = 0; i < rois.size(); ++i) {
    named.push_back({rois[i], QStringLiteral("ROI %1").arg(i + 1), {}});
  }
  return annotations_geojson(named);
}

QByteArray annotations_geojson(const std::vector<Annotation>& annotations) {
  QJsonArray features;
  for (const Annotation& a : annotations) {
    QJsonArray ring;
    for (const QPointF& p : a.polygon) ring.append(point(p));
    // GeoJSON's rings are closed: RFC 7946 §3.1.6.
    if (!a.polygon.isEmpty() && !a.polygon.isClosed()) ring.append(point(a.polygon.front()));
    QJsonArray rings;  // not QJsonArray{ring}: that copies `ring` instead of nesting it
    rings.append(ring);
    const QJsonObject geometry{{"type", "Polygon"}, {"coordinates", rings}};
    QJsonObject properties{{"objectType", "annotation"}, {"name", a.name}};
    if (!a.classification.isEmpty()) {
      properties.insert(
          QStringLiteral("classification"),
          QJsonObject{{"name", a.classification}, {"color", QJsonArray{255, 214, 0}}});
    }
    features.append(
        QJsonObject{{"type", "Feature"}, {"geometry", geometry}, {"properties", properties}});
  }
  return QJsonDocument(QJsonObject{{"type", "FeatureCollection"}, {"features", features}})
      .toJson(QJsonDocument::Indented);
}

namespace {

// A ring's points, open; empty when a coordinate is not a pair of numbers.
QPolygonF ring_of(const QJsonArray& ring) {
  QPolygonF polygon;
  for (const QJsonValue& v : ring) {
    const QJsonArray xy = v.toArray();
    if (xy.size() < 2 || !xy[0].isDouble() || !xy[1].isDouble()) return {};
    polygon << QPointF(xy[0].toDouble(), xy[1].toDouble());
  }
  if (polygon.size() > 1 && polygon.front() == polygon.back()) polygon.removeLast();
  return polygon;
}

QString class_of(const QJsonObject& properties) {
  const QJsonValue c = properties.value(QStringLiteral("classification"));
  if (c.isString()) return c.toString();
  return c.toObject().value(QStringLiteral("name")).toString();
}

// One feature's polygons (a Polygon's outline, each of a MultiPolygon's) into `out`.
void add_feature(const QJsonObject& feature, ParsedAnnotations& out) {
  const QJsonObject geometry = feature.contains(QStringLiteral("geometry"))
                                   ? feature.value(QStringLiteral("geometry")).toObject()
                                   : feature;
  const QJsonObject properties = feature.value(QStringLiteral("properties")).toObject();
  const QString type = geometry.value(QStringLiteral("type")).toString();
  QJsonArray polygons;
  if (type == QLatin1String("Polygon")) {
    polygons.append(geometry.value(QStringLiteral("coordinates")));
  } else if (type == QLatin1String("MultiPolygon")) {
    polygons = geometry.value(QStringLiteral("coordinates")).toArray();
  } else {
    ++out.skipped;
    return;
  }
  for (const QJsonValue& rings : polygons) {
    const QJsonArray r = rings.toArray();
    const QPolygonF outline = r.isEmpty() ? QPolygonF() : ring_of(r[0].toArray());
    if (!(polygon_area(outline) > 0)) {
      ++out.skipped;
      continue;
    }
    out.holes_dropped += static_cast<int>(r.size()) - 1;
    QString name = properties.value(QStringLiteral("name")).toString();
    if (name.isEmpty()) name = QStringLiteral("Annotation %1").arg(out.annotations.size() + 1);
    out.annotations.push_back({outline, name, class_of(properties)});
  }
}

}  // namespace

ParsedAnnotations parse_annotations(const QByteArray& geojson, const QString& source) {
  QJsonParseError error;
  const QJsonDocument doc = QJsonDocument::fromJson(geojson, &error);
  if (doc.isNull()) {
    throw Error(source.toStdString() + " is not JSON: " + error.errorString().toStdString() +
                " at byte " + std::to_string(error.offset));
  }
  const QJsonObject root = doc.object();
  const QString type = root.value(QStringLiteral("type")).toString();
  ParsedAnnotations out;
  if (type == QLatin1String("FeatureCollection")) {
    for (const QJsonValue& f : root.value(QStringLiteral("features")).toArray()) {
      add_feature(f.toObject(), out);
    }
  } else if (type == QLatin1String("Feature") || type == QLatin1String("Polygon") ||
             type == QLatin1String("MultiPolygon")) {
    add_feature(root, out);
  } else {
    throw Error(source.toStdString() +
                " is not GeoJSON annotations (a FeatureCollection of polygons, as QuPath "
                "exports them)");
  }
  return out;
}

QString area_text(const QPolygonF& polygon, std::optional<double> mpp_x,
                  std::optional<double> mpp_y) {
  const double px = polygon_area(polygon);
  if (!mpp_x) return QStringLiteral("%L1 px² (no mpp)").arg(px, 0, 'f', 0);
  const double um2 = px * *mpp_x * mpp_y.value_or(*mpp_x);
  if (um2 < 1e4) return QStringLiteral("%L1 µm²").arg(um2, 0, 'f', 0);
  const double mm2 = um2 / 1e6;
  return QStringLiteral("%1 mm²").arg(mm2, 0, 'f', mm2 < 1 ? 3 : mm2 < 100 ? 2 : 1);
}

}  // namespace tessel::gui
