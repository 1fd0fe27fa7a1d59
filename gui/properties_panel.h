// A slide's properties for a pathologist: file, vendor, levels, mpp, magnification, associated
// images (label, macro, thumbnail: clicking one shows it in its own window, read off the UI
// thread), then every raw OpenSlide property.
#pragma once

#include <QImage>
#include <QLabel>
#include <QThreadPool>
#include <QTreeWidget>

#include <memory>

#include "io/slide.h"

namespace tessel::gui {

class PropertiesPanel : public QTreeWidget {
  Q_OBJECT

 public:
  explicit PropertiesPanel(QWidget* parent = nullptr);
  ~PropertiesPanel() override;

  void show_slide(std::shared_ptr<const io::Slide> slide);
  void show_nothing();
  // The value on the top-level row named `name` ("Vendor", "Levels", ...); empty when none.
  QString value(const QString& name) const;

  // The row of associated image `name` under "Associated images"; null when the slide has none.
  QTreeWidgetItem* associated_item(const QString& name) const;
  // Returns at once; associatedImageShown (the image in associated_window()) or
  // associatedImageFailed follow. Clicking an associated image's row calls this.
  void show_associated_image(const QString& name);
  QLabel* associated_window() { return associated_window_; }
  const QImage& associated_image() const { return associated_image_; }  // full size

 signals:
  void associatedImageShown(QString name);
  void associatedImageFailed(QString message);

 private:
  std::shared_ptr<const io::Slide> slide_;
  QThreadPool pool_;
  QLabel* associated_window_;  // a window of its own, owned by the panel
  QImage associated_image_;
};

}  // namespace tessel::gui
