// Regions of interest drawn on the viewer, in level-0 pixels: a rectangle from two corners, when
// a click closes a polygon, and the shapes as QuPath-compatible GeoJSON, which io/roi.h reads
// back (a manifest's `roi` column trains on the polygons), with their names and classes, and read
// back here (annotations kept per slide, imported from QuPath). Pure functions.
#pragma once

#include <QByteArray>
#include <QPointF>
#include <QPolygonF>
#include <QRectF>
#include <QString>

#include <optional>
#include <vector>

namespace tessel::gui {

// The rectangle with corners `a` and `b` (any two opposite ones) as its 4 corners, clockwise on
// screen from the top left.
QPolygonF rectangle_roi(QPointF a, QPointF b);

// True when a click at `click` closes a polygon being drawn through `points` (same units, e.g.
// screen pixels, so the tolerance does not change with the zoom): there are at least 3 points
// and the click is within `tolerance` of the first.
bool closes_polygon(const QPolygonF& points, QPointF click, double tolerance);

// The area enclosed (shoelace formula, whatever the orientation); 0 for fewer than 3 points. A
// shape without area is no region: a click that never became a drag, points on one line.
double polygon_area(const QPolygonF& polygon);

// Every point moved into `bounds` (the slide), so that a saved ROI never lies outside it.
QPolygonF clamped(const QPolygonF& polygon, const QRectF& bounds);

// A FeatureCollection with one Polygon Feature per ROI, as QuPath exports annotations: level-0
// pixel coordinates to 0.01 px, each ring closed (its first point repeated at the end),
// properties objectType "annotation" and name "ROI n". Indented JSON text.
QByteArray roi_geojson(const std::vector<QPolygonF>& rois);

// An annotation as a pathologist keeps it: its outline, a name, and a class (QuPath's
// classification: "Tumor", "Stroma"; empty for none).
struct Annotation {
  QPolygonF polygon;  // level-0 pixels, open (the first point not repeated)
  QString name;
  QString classification;
  bool operator==(const Annotation&) const = default;
};

// As roi_geojson, with each annotation's name and its class as QuPath's classification
// {"name", "color"}.
QByteArray annotations_geojson(const std::vector<Annotation>& annotations);

struct ParsedAnnotations {
  std::vector<Annotation> annotations;
  int holes_dropped = 0;  // rings inside polygons: the viewer keeps outlines only
  int skipped = 0;        // features that are not polygons (points, lines) or have no area
};

// QuPath GeoJSON (a FeatureCollection, a Feature or a bare geometry; Polygon and MultiPolygon
// features, each polygon of a MultiPolygon one annotation) with properties.name and
// properties.classification.name (or a bare string). Throws tessel::Error naming `source` when
// it is not JSON or not GeoJSON.
ParsedAnnotations parse_annotations(const QByteArray& geojson, const QString& source);

// The area as a pathologist reads it: "0.425 mm²", "12.50 mm²" from the mpp (µm² below
// 0.01 mm²), or level-0 px² labelled "(no mpp)" without one.
QString area_text(const QPolygonF& polygon, std::optional<double> mpp_x,
                  std::optional<double> mpp_y);

}  // namespace tessel::gui
