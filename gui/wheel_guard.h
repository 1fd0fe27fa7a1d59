// The mouse wheel over a form scrolls the panel the form sits in, not the control under the
// cursor, unless that control has focus: scrolling down the Training dock had changed Model
// (tiny → resnet18), mpp and epochs on the way (issue 22).
#pragma once

class QWidget;

namespace tessel::gui {

// For every combo box, spin box and slider in `form` now (scroll bars excepted): Qt::StrongFocus
// (the wheel no longer gives them focus) and a filter that hands a wheel event over an unfocused
// one to the nearest scroll area above it.
void guard_wheel(QWidget* form);

}  // namespace tessel::gui
