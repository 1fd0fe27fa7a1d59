#include "gui/wheel_guard.h"

#include <QAbstractScrollArea>
#include <QAbstractSlider>
#include <QAbstractSpinBox>
#include <QApplication>
#include <QComboBox>
#include <QScrollBar>
#include <QWheelEvent>

namespace tessel::gui {

namespace {

class WheelGuard : public QObject {
 public:
  explicit WheelGuard(QObject* parent) : QObject(parent) {}

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override {
    if (event->type() != QEvent::Wheel) return false;
    auto* control = static_cast<QWidget*>(watched);
    const QWidget* focus = QApplication::focusWidget();
    // An editable combo box's focus is on its line edit.
    if (focus != nullptr && (focus == control || control->isAncestorOf(focus))) return false;
    auto* wheel = static_cast<QWheelEvent*>(event);
    for (QWidget* w = control->parentWidget(); w != nullptr; w = w->parentWidget()) {
      auto* area = qobject_cast<QAbstractScrollArea*>(w);
      if (area == nullptr) continue;
      // Sent, not left to propagate: Qt propagates only spontaneous wheel events, and the
      // panel's own widgets between here and the area would see it first.
      QWheelEvent scroll(area->viewport()->mapFromGlobal(wheel->globalPosition()),
                         wheel->globalPosition(), wheel->pixelDelta(), wheel->angleDelta(),
                         wheel->buttons(), wheel->modifiers(), wheel->phase(), wheel->inverted(),
                         wheel->source());
      QCoreApplication::sendEvent(area->viewport(), &scroll);
      event->accept();
      return true;
    }
    event->ignore();
    return true;
  }
};

void guard(QWidget* control, WheelGuard* filter) {
  control->setFocusPolicy(Qt::StrongFocus);
  control->installEventFilter(filter);
}

}  // namespace

void guard_wheel(QWidget* form) {
  auto* filter = new WheelGuard(form);
  for (auto* c : form->findChildren<QComboBox*>()) guard(c, filter);
  for (auto* s : form->findChildren<QAbstractSpinBox*>()) guard(s, filter);
  for (auto* s : form->findChildren<QAbstractSlider*>()) {
    if (qobject_cast<QScrollBar*>(s) == nullptr) guard(s, filter);
  }
}

}  // namespace tessel::gui
