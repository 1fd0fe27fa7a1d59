#include "gui/overview_widget.h"

#include <QMouseEvent>
#include <QPainter>

namespace tessel::gui {

OverviewWidget::OverviewWidget(QWidget* parent) : QWidget(parent) {
  setMinimumSize(120, 100);
  setCursor(Qt::PointingHandCursor);
}

void OverviewWidget::set_overview(const QImage& overview, QSizeF slide_size) {
  overview_ = overview.isNull() ? QPixmap() : QPixmap::fromImage(overview);
  slide_size_ = slide_size;
  viewport_ = {};
  update();
}

void OverviewWidget::set_viewport(const QRectF& level0) {
  viewport_ = level0;
  update();
}

QRectF OverviewWidget::image_rect() const {
  if (overview_.isNull()) return {};
  const QSizeF fitted =
      QSizeF(overview_.size()).scaled(QSizeF(size()) - QSizeF(8, 8), Qt::KeepAspectRatio);
  return {(width() - fitted.width()) / 2, (height() - fitted.height()) / 2, fitted.width(),
          fitted.height()};
}

void OverviewWidget::paintEvent(QPaintEvent*) {
  QPainter painter(this);
  painter.fillRect(rect(), palette().window());
  if (overview_.isNull()) return;
  const QRectF image = image_rect();
  painter.setRenderHint(QPainter::SmoothPixmapTransform, true);
  painter.drawPixmap(image, overview_, QRectF(overview_.rect()));
  if (viewport_.isEmpty() || slide_size_.isEmpty()) return;
  const double sx = image.width() / slide_size_.width();
  const double sy = image.height() / slide_size_.height();
  const QRectF box(image.left() + viewport_.left() * sx, image.top() + viewport_.top() * sy,
                   viewport_.width() * sx, viewport_.height() * sy);
  painter.setClipRect(image.adjusted(-1, -1, 1, 1));
  painter.setPen(QPen(QColor(220, 30, 30), 2));
  painter.setBrush(Qt::NoBrush);
  painter.drawRect(box);
}

void OverviewWidget::request_center(QPointF widget_point) {
  const QRectF image = image_rect();
  if (image.isEmpty() || slide_size_.isEmpty()) return;
  const QPointF level0((widget_point.x() - image.left()) / image.width() * slide_size_.width(),
                       (widget_point.y() - image.top()) / image.height() * slide_size_.height());
  emit centerRequested(level0);
}

void OverviewWidget::mousePressEvent(QMouseEvent* event) { request_center(event->position()); }

void OverviewWidget::mouseMoveEvent(QMouseEvent* event) {
  if (event->buttons() & Qt::LeftButton) request_center(event->position());
}

}  // namespace tessel::gui
