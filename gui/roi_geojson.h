// Regions of interest drawn on the viewer, in level-0 pixels: a rectangle from two corners, when
// a click closes a polygon, and the shapes as QuPath-compatible GeoJSON, which io/roi.h reads
// back (a manifest's `roi` column trains on its bounding box). Pure functions.
#pragma once

#include <QByteArray>
#include <QPointF>
#include <QPolygonF>
#include <QRectF>

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

}  // namespace tessel::gui
