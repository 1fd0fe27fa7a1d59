#include "gui/slide_view.h"

#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QWheelEvent>

#include <algorithm>
#include <cmath>
#include <thread>

#include "gui/heatmap_overlay.h"
#include "gui/magnification.h"
#include "gui/roi_geojson.h"
#include "gui/ruler.h"

namespace tessel::gui {

SlideView::SlideView(QWidget* parent) : QWidget(parent) {
  setMinimumSize(200, 150);
  setFocusPolicy(Qt::StrongFocus);
  setMouseTracking(true);  // the cursor readout follows the mouse without a button held
  setAttribute(Qt::WA_OpaquePaintEvent);
}

SlideView::~SlideView() = default;

void SlideView::clear() { set_document({}); }

void SlideView::set_document(SlideDocument doc) {
  loader_.reset();  // joins the old slide's workers before its cache goes
  cache_.clear();
  failed_.clear();
  doc_ = std::move(doc);
  overview_ = doc_.overview.isNull() ? QPixmap() : QPixmap::fromImage(doc_.overview);
  tissue_ = doc_.tissue.isNull() ? QPixmap() : QPixmap::fromImage(doc_.tissue);
  const bool had_heatmap = !heatmap_.isNull();
  heatmap_ = QPixmap();
  const bool had_mpp = entered_mpp_.has_value(), had_ruler = ruler_.has_value(),
             had_rois = !annotations_.empty();
  entered_mpp_.reset();
  ruler_.reset();
  dragging_ruler_ = false;
  rectangle_.reset();
  polygon_.clear();
  annotations_.clear();
  undo_.clear();  // another slide's edits are not this one's to undo
  message_.clear();
  fitted_ = isVisible();  // a hidden widget's size is not yet the one it will show at
  pending_ = 0;
  level_ = 0;
  if (doc_.slide) {
    // Two readers: OpenSlide decodes JPEG tiles on the CPU, and the machine is shared.
    const int workers = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 2);
    loader_ = std::make_unique<TileLoader>(doc_.slide, kTileSizePx, workers);
    connect(loader_.get(), &TileLoader::tileLoaded, this, &SlideView::on_tile_loaded);
    connect(loader_.get(), &TileLoader::tileFailed, this, &SlideView::on_tile_failed);
    fit();
  } else {
    update();
  }
  if (had_heatmap) emit heatmapChanged();
  if (had_mpp) emit mppChanged();
  if (had_ruler) emit rulerChanged();
  if (had_rois) emit roisChanged();
}

void SlideView::set_message(const QString& message) {
  message_ = message;
  update();
}

double SlideView::max_downsample() const {
  const io::Level& base = doc_.slide->level(0);
  return 2 * fit_downsample(base.width, base.height, size());
}

void SlideView::set_view(ViewState view) {
  if (!doc_.slide) return;
  const io::Level& base = doc_.slide->level(0);
  view.downsample = std::clamp(view.downsample, kMinDownsample, max_downsample());
  view.center.setX(std::clamp(view.center.x(), 0.0, static_cast<double>(base.width)));
  view.center.setY(std::clamp(view.center.y(), 0.0, static_cast<double>(base.height)));
  view_ = view;
  view_moved();
}

void SlideView::zoom_by(double factor, QPointF anchor_screen) {
  if (!doc_.slide || factor <= 0) return;
  // The level-0 point under the anchor stays under it.
  const QPointF anchor = to_level0(view_, size(), anchor_screen);
  ViewState next = view_;
  next.downsample = std::clamp(view_.downsample / factor, kMinDownsample, max_downsample());
  next.center = anchor - (anchor_screen - QPointF(width() / 2.0, height() / 2.0)) * next.downsample;
  set_view(next);
}

void SlideView::zoom_by(double factor) { zoom_by(factor, QPointF(width() / 2.0, height() / 2.0)); }

void SlideView::pan_by(QPointF screen_delta) {
  ViewState next = view_;
  next.center -= screen_delta * view_.downsample;
  set_view(next);
}

void SlideView::center_on(QPointF level0) {
  ViewState next = view_;
  next.center = level0;
  set_view(next);
}

std::optional<double> SlideView::mpp() const {
  if (!doc_.slide) return std::nullopt;
  if (entered_mpp_) return entered_mpp_;
  const std::optional<double> mpp = doc_.slide->mpp_x();
  if (!mpp || !(*mpp > 0)) return std::nullopt;
  return mpp;
}

std::optional<double> SlideView::mpp_y() const {
  if (!doc_.slide) return std::nullopt;
  if (entered_mpp_) return entered_mpp_;
  const std::optional<double> mpp = doc_.slide->mpp_y();
  return mpp && *mpp > 0 ? mpp : this->mpp();
}

void SlideView::set_mpp(double mpp) {
  if (!doc_.slide || !(mpp > 0) || !std::isfinite(mpp)) return;
  entered_mpp_ = mpp;
  update();
  emit mppChanged();
}

ScaleBar SlideView::shown_scale_bar() const {
  return scale_bar(mpp(), view_.downsample, width() / 5.0);
}

std::optional<double> SlideView::magnification() const {
  const std::optional<double> mpp = this->mpp();
  if (!mpp) return std::nullopt;
  return magnification_for_downsample(view_.downsample, *mpp);
}

void SlideView::set_magnification(double magnification) {
  const std::optional<double> mpp = this->mpp();
  if (!mpp || !(magnification > 0)) return;
  set_view({view_.center, downsample_for_magnification(magnification, *mpp)});
}

void SlideView::fit() {
  if (!doc_.slide) return;
  const io::Level& base = doc_.slide->level(0);
  set_view({QPointF(base.width / 2.0, base.height / 2.0),
            fit_downsample(base.width, base.height, size())});
}

void SlideView::view_moved() {
  level_ = level_for_downsample(doc_.slide->levels(), view_.downsample);
  const QRectF visible = visible_level0_rect();
  const std::vector<TileKey> missing = missing_tiles();
  pending_ = static_cast<int>(missing.size());
  loader_->request(missing);
  update();
  emit viewChanged(visible);
  if (pending_ == 0) emit visibleTilesLoaded();
}

std::vector<TileKey> SlideView::missing_tiles() const {
  std::vector<TileKey> missing;
  for (const TileKey& key :
       visible_tiles(doc_.slide->level(level_), level_, visible_level0_rect(), kTileSizePx)) {
    if (!cache_.contains(key) && !failed_.contains(key)) missing.push_back(key);
  }
  return missing;
}

void SlideView::recount_pending() {
  const int before = pending_;
  pending_ = static_cast<int>(missing_tiles().size());
  if (before > 0 && pending_ == 0) emit visibleTilesLoaded();
}

void SlideView::on_tile_loaded(TileKey key, const QImage& image) {
  cache_.insert(key, QPixmap::fromImage(image));
  if (key.level != level_) return;
  update();
  recount_pending();
}

void SlideView::on_tile_failed(TileKey key, const QString& reason) {
  const bool first = failed_.empty();
  failed_.insert(key);
  recount_pending();
  // One message per slide: a broken file fails on every tile.
  if (first)
    emit tileError(QStringLiteral("Cannot read %1: %2").arg(to_string(key).c_str(), reason));
  update();
}

void SlideView::draw_level(QPainter& painter, int level, bool touch) {
  const io::Level& l = doc_.slide->level(level);
  for (const TileKey& key : visible_tiles(l, level, visible_level0_rect(), kTileSizePx)) {
    const QPixmap* tile = touch ? cache_.find(key) : cache_.peek(key);
    if (!tile) continue;
    const QRectF r = tile_level0_rect(l, key, kTileSizePx);
    const QPointF top_left = to_screen(view_, size(), r.topLeft());
    const QPointF bottom_right = to_screen(view_, size(), r.bottomRight());
    painter.drawPixmap(QRectF(top_left, bottom_right), *tile, QRectF(tile->rect()));
  }
}

void SlideView::paintEvent(QPaintEvent*) {
  QPainter painter(this);
  painter.fillRect(rect(), QColor(58, 60, 64));
  if (!doc_.slide) {
    painter.setPen(QColor(220, 220, 220));
    painter.drawText(
        rect(), Qt::AlignCenter | Qt::TextWordWrap,
        message_.isEmpty() ? tr("Open a slide (File ▸ Open Slide…) or drop one here.") : message_);
    return;
  }
  const io::Level& base = doc_.slide->level(0);
  const QRectF slide_on_screen(to_screen(view_, size(), {0, 0}),
                               to_screen(view_, size(), QPointF(base.width, base.height)));
  painter.setRenderHint(QPainter::SmoothPixmapTransform, true);
  // The overview first, then coarser cached tiles, then the level in view: while tiles load the
  // screen shows the slide blurred, never holes.
  painter.fillRect(slide_on_screen, Qt::white);
  if (!overview_.isNull()) painter.drawPixmap(slide_on_screen, overview_, QRectF(overview_.rect()));
  for (int level = doc_.slide->level_count() - 1; level > level_; --level) {
    draw_level(painter, level, false);
  }
  painter.setRenderHint(QPainter::SmoothPixmapTransform, smooth_tiles(view_.downsample));
  draw_level(painter, level_, true);
  if (tissue_visible_ && !tissue_.isNull()) {
    painter.setRenderHint(QPainter::SmoothPixmapTransform, true);
    painter.drawPixmap(slide_on_screen, tissue_, QRectF(tissue_.rect()));
  }
  if (heatmap_visible()) {
    // Cells as blocks: a score belongs to its whole cell, smoothing would invent gradients.
    painter.setRenderHint(QPainter::SmoothPixmapTransform, false);
    painter.setOpacity(heatmap_opacity_);
    painter.drawPixmap(QRectF(to_screen(view_, size(), heatmap_level0_.topLeft()),
                              to_screen(view_, size(), heatmap_level0_.bottomRight())),
                       heatmap_, QRectF(heatmap_.rect()));
    painter.setOpacity(1.0);
  }
  draw_rois(painter);
  draw_ruler(painter);
  if (heatmap_visible()) draw_heatmap_legend(painter);
  draw_tissue_legend(painter);
  draw_scale_bar(painter);
  if (!message_.isEmpty()) {
    painter.setPen(QColor(255, 120, 100));
    painter.drawText(rect().adjusted(10, 10, -10, -10), Qt::AlignTop | Qt::AlignLeft, message_);
  }
}

void SlideView::draw_scale_bar(QPainter& painter) {
  const ScaleBar bar = shown_scale_bar();
  if (bar.length_px <= 0) return;
  // The file's objective power, else the magnification from the mpp (an entered one too).
  const std::optional<double> zoom = doc_.slide->objective_power()
                                         ? *doc_.slide->objective_power() / view_.downsample
                                         : magnification();
  const QString text =
      bar.label() +
      QStringLiteral("   level %1 · %2×")
          .arg(level_)
          .arg(zoom ? QString::number(*zoom, 'g', 3)
                    : QString::number(1.0 / view_.downsample, 'g', 3) + QStringLiteral(" px"));
  const QFontMetrics metrics = painter.fontMetrics();
  const int margin = 12;
  const QRectF box(margin, height() - margin - 34,
                   std::max<double>(bar.length_px, metrics.horizontalAdvance(text)) + 16, 34);
  painter.setRenderHint(QPainter::Antialiasing, true);
  painter.setPen(Qt::NoPen);
  painter.setBrush(QColor(255, 255, 255, 210));
  painter.drawRoundedRect(box, 4, 4);
  painter.setBrush(QColor(20, 20, 20));
  painter.drawRect(QRectF(box.left() + 8, box.bottom() - 10, bar.length_px, 4));
  painter.setPen(QColor(20, 20, 20));
  painter.drawText(QRectF(box.left() + 8, box.top() + 3, box.width() - 8, 16),
                   Qt::AlignLeft | Qt::AlignVCenter, text);
}

QRect SlideView::heatmap_legend_rect() const {
  if (!heatmap_visible()) return {};
  constexpr int kWidth = 196, kHeight = 44, kMargin = 12;
  return {width() - kMargin - kWidth, kMargin, kWidth, kHeight};
}

void SlideView::draw_heatmap_legend(QPainter& painter) {
  // Drawn on the view itself, so an exported view says what its colours mean.
  const QRect box = heatmap_legend_rect();
  static const QImage bar = turbo_bar(160, 10);
  painter.setRenderHint(QPainter::Antialiasing, true);
  painter.setPen(Qt::NoPen);
  painter.setBrush(QColor(255, 255, 255, 210));
  painter.drawRoundedRect(box, 4, 4);
  painter.setPen(QColor(20, 20, 20));
  painter.drawText(QRect(box.left() + 8, box.top() + 3, box.width() - 16, 16),
                   Qt::AlignLeft | Qt::AlignVCenter,
                   heatmap_class_.isEmpty() ? tr("score")
                   : heatmap_class_.startsWith(QLatin1String("attention"))
                       ? tr("%1 / max").arg(heatmap_class_)
                       : tr("score of %1").arg(heatmap_class_));
  const int bar_left = box.left() + (box.width() - bar.width()) / 2;
  painter.drawImage(QPoint(bar_left, box.top() + 21), bar);
  painter.drawText(QRect(bar_left - 16, box.top() + 19, 14, 14), Qt::AlignCenter,
                   QStringLiteral("0"));
  painter.drawText(QRect(bar_left + bar.width() + 2, box.top() + 19, 14, 14), Qt::AlignCenter,
                   QStringLiteral("1"));
}

QRect SlideView::tissue_legend_rect() const {
  if (!tissue_visible_ || tissue_.isNull()) return {};
  constexpr int kWidth = 196, kHeight = 44, kMargin = 12;
  const QRect heatmap = heatmap_legend_rect();
  const int top = heatmap.isEmpty() ? kMargin : heatmap.bottom() + 1 + 6;
  return {width() - kMargin - kWidth, top, kWidth, kHeight};
}

void SlideView::draw_tissue_legend(QPainter& painter) {
  const QRect box = tissue_legend_rect();
  if (box.isEmpty()) return;
  painter.setRenderHint(QPainter::Antialiasing, true);
  painter.setPen(Qt::NoPen);
  painter.setBrush(QColor(255, 255, 255, 210));
  painter.drawRoundedRect(box, 4, 4);
  // The swatches in tissue_overlay_image's colours: the tissue's outline, the glass dimmed.
  const QRect tissue(box.left() + 8, box.top() + 6, 14, 12);
  painter.setBrush(Qt::NoBrush);
  painter.setPen(QPen(QColor(0, 210, 70), 2));
  painter.drawRect(tissue);
  const QRect glass(box.left() + 8, box.top() + 25, 14, 12);
  painter.setPen(Qt::NoPen);
  painter.setBrush(QColor(15, 25, 55, 110));
  painter.drawRect(glass);
  painter.setPen(QColor(20, 20, 20));
  painter.drawText(QRect(tissue.right() + 8, tissue.top() - 2, box.width() - 36, 16),
                   Qt::AlignLeft | Qt::AlignVCenter, tr("tissue (outlined)"));
  painter.drawText(QRect(glass.right() + 8, glass.top() - 2, box.width() - 36, 16),
                   Qt::AlignLeft | Qt::AlignVCenter, tr("glass (dimmed)"));
}

QImage SlideView::render_view() { return grab().toImage(); }

void SlideView::resizeEvent(QResizeEvent*) {
  if (!doc_.slide) return;
  if (!fitted_) {
    fitted_ = true;
    fit();
    return;
  }
  set_view(view_);
}

void SlideView::set_heatmap(const QImage& image, QRectF level0, const QString& class_name) {
  heatmap_ = image.isNull() ? QPixmap() : QPixmap::fromImage(image);
  heatmap_level0_ = level0;
  heatmap_class_ = class_name;
  heatmap_visible_ = true;
  update();
  emit heatmapChanged();
}

void SlideView::set_heatmap_visible(bool visible) {
  if (visible == heatmap_visible_) return;
  heatmap_visible_ = visible;
  update();
  emit heatmapChanged();
}

void SlideView::set_heatmap_opacity(double opacity) {
  heatmap_opacity_ = std::clamp(opacity, 0.0, 1.0);
  update();
}

void SlideView::set_tissue_visible(bool visible) {
  tissue_visible_ = visible;
  update();
}

void SlideView::wheelEvent(QWheelEvent* event) {
  // 120 units per notch; 1.25× per notch feels like a microscope's fine steps.
  const double notches = event->angleDelta().y() / 120.0;
  zoom_by(std::pow(1.25, notches), event->position());
  event->accept();
}

void SlideView::mousePressEvent(QMouseEvent* event) {
  const bool pan = event->button() == Qt::MiddleButton ||
                   (event->button() == Qt::LeftButton && tool_ == Tool::kPan);
  if (pan) {
    dragging_ = true;
    drag_from_ = event->position().toPoint();
    setCursor(Qt::ClosedHandCursor);
    return;
  }
  if (event->button() != Qt::LeftButton || !doc_.slide) return;
  const QPointF at = on_slide(event->position());
  hover_ = at;
  switch (tool_) {
    case Tool::kRuler:
      ruler_ = QLineF(at, at);
      dragging_ruler_ = true;
      break;
    case Tool::kRectangle:
      rectangle_ = QLineF(at, at);
      break;
    case Tool::kPolygon:
      // Closing is decided on screen, so the first point is as easy to hit at every zoom.
      if (closes_polygon(to_screen_polygon(polygon_), event->position(), kCloseDistancePx)) {
        finish_polygon();
      } else {
        polygon_ << at;
      }
      break;
    case Tool::kPan:
      break;
  }
  update();
}

void SlideView::mouseMoveEvent(QMouseEvent* event) {
  if (doc_.slide) {
    const QPointF level0 = to_level0(view_, size(), event->position());
    const io::Level& base = doc_.slide->level(0);
    if (QRectF(0, 0, static_cast<double>(base.width), static_cast<double>(base.height))
            .contains(level0)) {
      emit cursorMoved(level0);
    } else {
      emit cursorLeft();
    }
    hover_ = on_slide(event->position());
    if (dragging_ruler_) ruler_->setP2(hover_);
    if (rectangle_) rectangle_->setP2(hover_);
    if (dragging_ruler_ || rectangle_ || !polygon_.isEmpty()) update();
  }
  if (!dragging_) return;
  const QPoint now = event->position().toPoint();
  pan_by(QPointF(now - drag_from_));
  drag_from_ = now;
}

void SlideView::mouseReleaseEvent(QMouseEvent* event) {
  if (dragging_) {
    dragging_ = false;
    update_cursor();
    return;
  }
  if (event->button() != Qt::LeftButton) return;
  if (dragging_ruler_) {
    dragging_ruler_ = false;
    ruler_->setP2(on_slide(event->position()));
    // A click is not a measurement.
    if (QLineF(to_screen(view_, size(), ruler_->p1()), event->position()).length() <
        kCloseDistancePx) {
      ruler_.reset();
    }
    update();
    emit rulerChanged();
  } else if (rectangle_) {
    const QLineF corners(rectangle_->p1(), on_slide(event->position()));
    rectangle_.reset();
    const QPolygonF screen = to_screen_polygon(rectangle_roi(corners.p1(), corners.p2()));
    const QRectF box = screen.boundingRect();
    if (box.width() >= kCloseDistancePx && box.height() >= kCloseDistancePx) {
      add_roi(rectangle_roi(corners.p1(), corners.p2()));
    }
    update();
  }
}

void SlideView::leaveEvent(QEvent*) { emit cursorLeft(); }

void SlideView::mouseDoubleClickEvent(QMouseEvent* event) {
  if (tool_ == Tool::kPolygon) {
    // The double-click's second press: its point ends the polygon (the first press added it).
    // None in progress: the first press closed it on its first corner.
    if (event->button() != Qt::LeftButton || !doc_.slide || polygon_.isEmpty()) return;
    const QPolygonF screen = to_screen_polygon(polygon_);
    if (QLineF(screen.back(), event->position()).length() > kCloseDistancePx) {
      polygon_ << on_slide(event->position());
    }
    if (polygon_.size() >= 3) finish_polygon();
    update();
    return;
  }
  if (tool_ != Tool::kPan) return;
  zoom_by(event->button() == Qt::RightButton ? 0.5 : 2.0, event->position());
}

void SlideView::set_tool(Tool tool) {
  if (tool == tool_) return;
  cancel_drawing();
  tool_ = tool;
  update_cursor();
  emit toolChanged(tool);
}

void SlideView::update_cursor() {
  if (tool_ == Tool::kPan) {
    unsetCursor();
  } else {
    setCursor(Qt::CrossCursor);
  }
}

bool SlideView::drawing() const { return dragging_ruler_ || rectangle_ || !polygon_.isEmpty(); }

void SlideView::cancel_drawing() {
  if (!drawing()) return;
  if (dragging_ruler_) {
    dragging_ruler_ = false;
    ruler_.reset();
    emit rulerChanged();
  }
  rectangle_.reset();
  polygon_.clear();
  update();
}

void SlideView::set_ruler(QLineF level0) {
  if (!doc_.slide) return;
  dragging_ruler_ = false;
  const io::Level& base = doc_.slide->level(0);
  const QRectF slide(0, 0, static_cast<double>(base.width), static_cast<double>(base.height));
  const QPolygonF ends = clamped(QPolygonF({level0.p1(), level0.p2()}), slide);
  ruler_ = QLineF(ends[0], ends[1]);
  update();
  emit rulerChanged();
}

void SlideView::clear_ruler() {
  if (!ruler_) return;
  ruler_.reset();
  dragging_ruler_ = false;
  update();
  emit rulerChanged();
}

QString SlideView::ruler_label() const {
  if (!ruler_) return {};
  return ruler_length(ruler_->p1(), ruler_->p2(), mpp(), mpp_y()).label();
}

// One change of the annotations: the list before and after, swapped by undo and redo.
class AnnotationsCommand : public QUndoCommand {
 public:
  AnnotationsCommand(SlideView* view, std::vector<Annotation> before, std::vector<Annotation> after,
                     const QString& what)
      : QUndoCommand(what), view_(view), before_(std::move(before)), after_(std::move(after)) {}
  void undo() override { show(before_); }
  void redo() override { show(after_); }

 private:
  void show(const std::vector<Annotation>& list) {
    view_->annotations_ = list;
    view_->update();
    emit view_->roisChanged();
  }
  SlideView* view_;
  std::vector<Annotation> before_, after_;
};

std::vector<QPolygonF> SlideView::rois() const {
  std::vector<QPolygonF> out;
  for (const Annotation& a : annotations_) out.push_back(a.polygon);
  return out;
}

void SlideView::add_roi(const QPolygonF& level0) {
  if (!doc_.slide) return;
  std::vector<Annotation> after = annotations_;
  // The next free number: names stay unique after deletions.
  int n = static_cast<int>(after.size()) + 1;
  const auto taken = [&after](const QString& name) {
    return std::any_of(after.begin(), after.end(),
                       [&name](const Annotation& a) { return a.name == name; });
  };
  while (taken(QStringLiteral("Annotation %1").arg(n))) ++n;
  after.push_back({level0, QStringLiteral("Annotation %1").arg(n), {}});
  set_annotations(std::move(after), tr("Draw Annotation %1").arg(n));
}

void SlideView::clear_rois() {
  if (annotations_.empty()) return;
  set_annotations({}, tr("Clear Annotations"));
}

void SlideView::set_annotations(std::vector<Annotation> annotations, const QString& what) {
  if (!doc_.slide) return;
  const io::Level& base = doc_.slide->level(0);
  const QRectF bounds(0, 0, static_cast<double>(base.width), static_cast<double>(base.height));
  std::vector<Annotation> kept;
  for (Annotation& a : annotations) {
    a.polygon = clamped(a.polygon, bounds);
    if (polygon_area(a.polygon) > 0) kept.push_back(std::move(a));
  }
  if (kept == annotations_) return;
  undo_.push(new AnnotationsCommand(this, annotations_, std::move(kept), what));
}

void SlideView::load_annotations(std::vector<Annotation> annotations) {
  if (!doc_.slide) return;
  const io::Level& base = doc_.slide->level(0);
  const QRectF bounds(0, 0, static_cast<double>(base.width), static_cast<double>(base.height));
  annotations_.clear();
  for (Annotation& a : annotations) {
    a.polygon = clamped(a.polygon, bounds);
    if (polygon_area(a.polygon) > 0) annotations_.push_back(std::move(a));
  }
  undo_.clear();
  update();
  emit roisChanged();
}

void SlideView::finish_polygon() {
  const QPolygonF done = polygon_;
  polygon_.clear();
  add_roi(done);  // points on one line have no area: dropped
  update();
}

QPolygonF SlideView::to_screen_polygon(const QPolygonF& level0) const {
  QPolygonF screen;
  for (const QPointF& p : level0) screen << to_screen(view_, size(), p);
  return screen;
}

QPointF SlideView::on_slide(QPointF screen) const {
  const QPointF p = to_level0(view_, size(), screen);
  const io::Level& base = doc_.slide->level(0);
  return {std::clamp(p.x(), 0.0, static_cast<double>(base.width)),
          std::clamp(p.y(), 0.0, static_cast<double>(base.height))};
}

void SlideView::draw_rois(QPainter& painter) {
  if (annotations_.empty() && !rectangle_ && polygon_.isEmpty()) return;
  painter.setRenderHint(QPainter::Antialiasing, true);
  const QColor yellow(255, 214, 0);
  // A dark halo under each line, so that it reads over pale glass and dark tissue alike.
  const QPen halo(QColor(0, 0, 0, 150), 4);
  const QPen line(yellow, 2);
  for (const Annotation& a : annotations_) {
    const QPolygonF screen = to_screen_polygon(a.polygon);
    painter.setBrush(Qt::NoBrush);
    painter.setPen(halo);
    painter.drawPolygon(screen);
    // A faint fill only: the tissue inside is what the pathologist looks at.
    painter.setPen(line);
    painter.setBrush(QColor(255, 214, 0, 14));
    painter.drawPolygon(screen);
  }
  QPen dashed = line;
  dashed.setStyle(Qt::DashLine);
  painter.setBrush(Qt::NoBrush);
  if (rectangle_) {
    const QPolygonF screen = to_screen_polygon(rectangle_roi(rectangle_->p1(), rectangle_->p2()));
    painter.setPen(halo);
    painter.drawPolygon(screen);
    painter.setPen(dashed);
    painter.drawPolygon(screen);
  }
  if (!polygon_.isEmpty()) {
    QPolygonF screen = to_screen_polygon(polygon_);
    const QPointF first = screen.front();
    screen << to_screen(view_, size(), hover_);  // the rubber band to the mouse
    painter.setPen(halo);
    painter.drawPolyline(screen);
    painter.setPen(dashed);
    painter.drawPolyline(screen);
    // The first point, larger: a click on it closes the polygon.
    painter.setPen(QPen(Qt::black, 1));
    painter.setBrush(yellow);
    const double r = polygon_.size() >= 3 ? kCloseDistancePx / 2 + 1 : 3;
    painter.drawEllipse(first, r, r);
    for (qsizetype i = 1; i < polygon_.size(); ++i) painter.drawEllipse(screen[i], 2.5, 2.5);
  }
}

void SlideView::draw_ruler(QPainter& painter) {
  if (!ruler_) return;
  const QLineF screen(to_screen(view_, size(), ruler_->p1()),
                      to_screen(view_, size(), ruler_->p2()));
  painter.setRenderHint(QPainter::Antialiasing, true);
  const QColor cyan(0, 229, 255);
  const QPen halo(QColor(0, 0, 0, 170), 4, Qt::SolidLine, Qt::FlatCap);
  const QPen line(cyan, 2, Qt::SolidLine, Qt::FlatCap);
  // Ticks across both ends, 12 px long.
  std::vector<QLineF> lines{screen};
  if (screen.length() > 0) {
    const QPointF across = QPointF(-screen.dy(), screen.dx()) / screen.length() * 6;
    lines.emplace_back(screen.p1() - across, screen.p1() + across);
    lines.emplace_back(screen.p2() - across, screen.p2() + across);
  }
  painter.setPen(halo);
  for (const QLineF& l : lines) painter.drawLine(l);
  painter.setPen(line);
  for (const QLineF& l : lines) painter.drawLine(l);
  // The length in a box above the line's middle, on the side the line does not go: left of it
  // for a line rising to the right, right of it otherwise.
  const QString text = ruler_label();
  const QFontMetrics metrics = painter.fontMetrics();
  const QSizeF box_size(metrics.horizontalAdvance(text) + 12, metrics.height() + 6);
  const QPointF mid = screen.center();
  const bool rising = screen.dx() * screen.dy() < 0;
  const QRectF box(mid + QPointF(rising ? -10 - box_size.width() : 10, -box_size.height() - 6),
                   box_size);
  painter.setPen(Qt::NoPen);
  painter.setBrush(QColor(255, 255, 255, 220));
  painter.drawRoundedRect(box, 4, 4);
  painter.setPen(QColor(20, 20, 20));
  painter.drawText(box, Qt::AlignCenter, text);
}

void SlideView::keyPressEvent(QKeyEvent* event) {
  const double step = 0.25 * std::min(width(), height());
  switch (event->key()) {
    case Qt::Key_Plus:
    case Qt::Key_Equal:
      zoom_by(1.5);
      break;
    case Qt::Key_Minus:
      zoom_by(1 / 1.5);
      break;
    case Qt::Key_Left:
      pan_by({step, 0});
      break;
    case Qt::Key_Right:
      pan_by({-step, 0});
      break;
    case Qt::Key_Up:
      pan_by({0, step});
      break;
    case Qt::Key_Down:
      pan_by({0, -step});
      break;
    case Qt::Key_Escape:
      if (drawing()) {
        cancel_drawing();
      } else if (ruler_) {
        clear_ruler();
      } else {
        QWidget::keyPressEvent(event);
      }
      break;
    default:
      QWidget::keyPressEvent(event);
  }
}

}  // namespace tessel::gui
