// A slide's properties for a pathologist: file, vendor, levels, mpp, magnification, associated
// images, then every raw OpenSlide property.
#pragma once

#include <QTreeWidget>

#include "io/slide.h"

namespace tessel::gui {

class PropertiesPanel : public QTreeWidget {
  Q_OBJECT

 public:
  explicit PropertiesPanel(QWidget* parent = nullptr);
  void show_slide(const io::Slide& slide);
  void show_nothing();
  // The value on the top-level row named `name` ("Vendor", "Levels", ...); empty when none.
  QString value(const QString& name) const;
};

}  // namespace tessel::gui
