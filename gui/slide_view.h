// The slide viewer: pans and zooms across pyramid levels, drawing tiles of the level that matches
// the zoom (read by a TileLoader off the UI thread, kept in a byte-bounded TileCache), with the
// overview and any cached coarser tiles underneath until they arrive, an optional tissue overlay,
// a heatmap overlay with its legend, an mpp-aware scale bar (the file's mpp, or one entered for
// the open slide), magnification presets from the mpp, the slide position under the cursor
// (cursorMoved) for a readout, and the drawing tools: a ruler and rectangle and polygon regions
// of interest (ROIs), in level-0 pixels.
#pragma once

#include <QImage>
#include <QLineF>
#include <QPixmap>
#include <QPoint>
#include <QPolygonF>
#include <QUndoStack>
#include <QWidget>

#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "gui/roi_geojson.h"
#include "gui/scale_bar.h"
#include "gui/slide_document.h"
#include "gui/tile_cache.h"
#include "gui/tile_loader.h"
#include "gui/viewport.h"

namespace tessel::gui {

class SlideView : public QWidget {
  Q_OBJECT

 public:
  static constexpr int kTileSizePx = 256;
  static constexpr int64_t kCacheBytes = 192LL << 20;
  static constexpr double kMinDownsample = 0.25;  // 4× past level 0's pixels
  // A click within this many screen pixels of a polygon's first point closes it; a ruler or a
  // rectangle shorter than it is a click, not a drag, and is dropped.
  static constexpr double kCloseDistancePx = 8;

  explicit SlideView(QWidget* parent = nullptr);
  ~SlideView() override;

  // Shows `doc` fitted to the widget; a null slide clears the view.
  void set_document(SlideDocument doc);
  void clear();
  bool has_slide() const { return doc_.slide != nullptr; }
  const SlideDocument& document() const { return doc_; }

  // Shown instead of the slide, e.g. why it could not be opened; empty hides it.
  void set_message(const QString& message);
  const QString& message() const { return message_; }

  const ViewState& view() const { return view_; }
  void set_view(ViewState view);  // clamped to the slide and to [kMinDownsample, fit × 2]
  void zoom_by(double factor, QPointF anchor_screen);  // factor > 1 zooms in, anchor stays put
  void zoom_by(double factor);                         // about the centre
  void pan_by(QPointF screen_delta);
  void fit();
  void center_on(QPointF level0);

  // Microns per level-0 pixel: the one set with set_mpp for this open slide, else the file's;
  // none when neither. The scale bar, magnification, ruler (and the window's cursor readout) use
  // it. Forgotten when another slide opens: it is not written anywhere (a manifest's `mpp`
  // column gives a slide's mpp to training).
  std::optional<double> mpp() const;
  std::optional<double> mpp_y() const;  // the file's vertical mpp, or the one set
  void set_mpp(double mpp);             // > 0, with a slide open; else ignored
  bool mpp_was_set() const { return entered_mpp_.has_value(); }
  // The scale bar drawn in the bottom left (gui/scale_bar.h).
  ScaleBar shown_scale_bar() const;

  // The magnification shown, 10 / (mpp × downsample) (gui/magnification.h); none without mpp.
  std::optional<double> magnification() const;
  // Zooms to `magnification` about the view's centre (clamped as set_view); no-op without mpp.
  void set_magnification(double magnification);

  int current_level() const { return level_; }
  QRectF visible_level0_rect() const { return level0_rect(view_, size()); }
  // Visible tiles of the current level not yet in the cache (failed ones do not count).
  int pending_tiles() const { return pending_; }
  bool visible_tiles_loaded() const { return has_slide() && pending_ == 0; }
  const TileCache& cache() const { return cache_; }
  const TileLoader* loader() const { return loader_.get(); }
  int failed_tiles() const { return static_cast<int>(failed_.size()); }

  void set_tissue_visible(bool visible);
  bool tissue_visible() const { return tissue_visible_; }
  // What the tissue overlay's colours mean (outlined tissue, dimmed glass), drawn in the top
  // right below any heatmap legend while the overlay shows; empty otherwise. Widget pixels.
  QRect tissue_legend_rect() const;

  // A score map over the slide: `image` (one pixel per cell, alpha where there is no cell) drawn
  // over `level0` at `opacity`, with a legend (the colour bar 0 … 1 and "score of
  // `class_name`") in the top-right corner; a null image removes it. Cleared when another slide
  // opens. A new heatmap is shown; set_heatmap_visible hides it (and its legend) and keeps it.
  void set_heatmap(const QImage& image, QRectF level0, const QString& class_name = {});
  void set_heatmap_opacity(double opacity);
  void set_heatmap_visible(bool visible);
  bool has_heatmap() const { return !heatmap_.isNull(); }
  bool heatmap_visible() const { return has_heatmap() && heatmap_visible_; }
  double heatmap_opacity() const { return heatmap_opacity_; }
  // Where the legend is drawn (empty without a heatmap shown), in widget pixels.
  QRect heatmap_legend_rect() const;

  // What a left-button drag or click does: pan (the default); measure with the ruler (drag);
  // draw a rectangle ROI (drag) or a polygon ROI (click its corners; a double-click, or a click
  // on its first point, closes it). Esc cancels a drawing in progress, and with none removes
  // the ruler. The middle button pans with any tool; the wheel always zooms.
  enum class Tool { kPan, kRuler, kRectangle, kPolygon };
  Q_ENUM(Tool)
  void set_tool(Tool tool);  // cancels a drawing in progress
  Tool tool() const { return tool_; }

  // The ruler's line in level-0 pixels, while it is dragged and after, until Esc, the next one
  // or another slide; its length in µm (px, labelled, without mpp) is drawn beside it.
  const std::optional<QLineF>& ruler() const { return ruler_; }
  void set_ruler(QLineF level0);
  void clear_ruler();
  QString ruler_label() const;  // "123.4 µm" (gui/ruler.h); empty without a ruler

  // The annotations (ROIs) on the slide, oldest first: level-0 pixels inside the slide, each with
  // an area, a name ("Annotation n" when drawn) and a class. Every change but
  // load_annotations is one step of undo_stack(); another slide starts them (and the stack)
  // empty, and the window loads that slide's.
  const std::vector<Annotation>& annotations() const { return annotations_; }
  std::vector<QPolygonF> rois() const;    // their outlines
  void add_roi(const QPolygonF& level0);  // clamped to the slide; one without area is ignored
  void clear_rois();                      // all removed (undoable)
  // Replaces them, as one undoable step named `what` ("Delete Annotation 2"); each clamped to
  // the slide, those without area dropped.
  void set_annotations(std::vector<Annotation> annotations, const QString& what);
  // The slide's saved annotations, as they were: not a step to undo.
  void load_annotations(std::vector<Annotation> annotations);
  QUndoStack* undo_stack() { return &undo_; }
  // A ruler or rectangle being dragged or a polygon being clicked.
  bool drawing() const;
  void cancel_drawing();
  const QPolygonF& polygon_in_progress() const { return polygon_; }

  // What the widget shows, as an image of its size: slide, overlays, ROIs, ruler, legend, scale
  // bar.
  QImage render_view();

 signals:
  void viewChanged(QRectF level0);
  void visibleTilesLoaded();
  void tileError(QString message);
  // The level-0 point under the mouse, as it moves over the slide; cursorLeft when it leaves
  // the slide (onto the glass around it, or out of the widget).
  void cursorMoved(QPointF level0);
  void cursorLeft();
  // A heatmap was set, removed, shown or hidden (also when another slide removes it).
  void heatmapChanged();
  void mppChanged();
  void toolChanged(Tool tool);
  // The ruler was drawn (at the end of its drag), set or removed.
  void rulerChanged();
  // An annotation was added, changed or removed (drawn, edited, undone, loaded).
  void roisChanged();

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void mouseDoubleClickEvent(QMouseEvent* event) override;
  void leaveEvent(QEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;

 private:
  void view_moved();  // picks the level, requests the missing tiles, repaints
  std::vector<TileKey> missing_tiles() const;  // visible, current level, not cached, not failed
  void recount_pending();                      // emits visibleTilesLoaded when it reaches 0
  void on_tile_loaded(TileKey key, const QImage& image);
  void on_tile_failed(TileKey key, const QString& reason);
  void draw_level(QPainter& painter, int level, bool request_order);
  void draw_scale_bar(QPainter& painter);
  void draw_heatmap_legend(QPainter& painter);
  void draw_tissue_legend(QPainter& painter);
  void draw_rois(QPainter& painter);
  void draw_ruler(QPainter& painter);
  double max_downsample() const;
  QPolygonF to_screen_polygon(const QPolygonF& level0) const;
  QPointF on_slide(QPointF screen) const;  // the level-0 point, clamped to the slide
  void finish_polygon();
  void update_cursor();

  SlideDocument doc_;
  QPixmap overview_, tissue_;
  std::unique_ptr<TileLoader> loader_;
  TileCache cache_{kCacheBytes};
  std::set<TileKey> failed_;
  ViewState view_;
  int level_ = 0;
  int pending_ = 0;
  bool tissue_visible_ = false;
  QPixmap heatmap_;
  QRectF heatmap_level0_;
  QString heatmap_class_;
  double heatmap_opacity_ = 0.6;
  bool heatmap_visible_ = true;
  bool fitted_ = false;  // set_document waits for a real size before fitting
  QString message_;
  QPoint drag_from_;
  bool dragging_ = false;  // panning
  std::optional<double> entered_mpp_;
  Tool tool_ = Tool::kPan;
  std::optional<QLineF> ruler_;
  bool dragging_ruler_ = false;
  std::optional<QLineF> rectangle_;  // a rectangle ROI being dragged: its corners, level 0
  QPolygonF polygon_;                // a polygon ROI's corners clicked so far, level 0
  QPointF hover_;                    // the level-0 point under the mouse, for the rubber band
  std::vector<Annotation> annotations_;
  QUndoStack undo_;
  friend class AnnotationsCommand;
};

}  // namespace tessel::gui
