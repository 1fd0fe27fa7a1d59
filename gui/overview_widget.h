// The whole slide small, with the viewer's visible rectangle on it; a click or drag there moves
// the viewer.
#pragma once

#include <QImage>
#include <QPixmap>
#include <QRectF>
#include <QWidget>

namespace tessel::gui {

class OverviewWidget : public QWidget {
  Q_OBJECT

 public:
  explicit OverviewWidget(QWidget* parent = nullptr);

  // `overview` shows a slide whose level 0 is slide_size; a null image clears it.
  void set_overview(const QImage& overview, QSizeF slide_size);
  void set_viewport(const QRectF& level0);  // the viewer's visible rectangle
  const QRectF& viewport() const { return viewport_; }
  QRectF image_rect() const;  // where the overview is drawn, in widget pixels
  QSize sizeHint() const override { return {260, 220}; }

 signals:
  void centerRequested(QPointF level0);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;

 private:
  void request_center(QPointF widget_point);

  QPixmap overview_;
  QSizeF slide_size_;
  QRectF viewport_;
};

}  // namespace tessel::gui
