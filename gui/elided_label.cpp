#include "gui/elided_label.h"

#include <QResizeEvent>
#include <QTextLayout>

namespace tessel::gui {

ElidedLabel::ElidedLabel(int lines, QWidget* parent) : QLabel(parent), lines_(lines) {
  setWordWrap(true);
  setAlignment(Qt::AlignLeft | Qt::AlignTop);
  setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);
  setFixedHeight(fontMetrics().lineSpacing() * lines_ + contentsMargins().top() +
                 contentsMargins().bottom() + 2);
}

void ElidedLabel::set_full_text(const QString& text) {
  full_ = text;
  setToolTip(text);
  fit();
}

QSize ElidedLabel::sizeHint() const { return {0, height()}; }

QSize ElidedLabel::minimumSizeHint() const { return {0, height()}; }

void ElidedLabel::resizeEvent(QResizeEvent* event) {
  QLabel::resizeEvent(event);
  if (event->size().width() != event->oldSize().width()) fit();
}

void ElidedLabel::fit() {
  const int width = contentsRect().width();
  if (width <= 0 || full_.isEmpty()) {
    setText(full_);
    return;
  }
  // The lines QLabel's word wrap would draw, anywhere in a word longer than the width (paths).
  QTextLayout layout(full_, font());
  QTextOption option;
  option.setWrapMode(QTextOption::WrapAtWordBoundaryOrAnywhere);
  layout.setTextOption(option);
  layout.beginLayout();
  QStringList shown;
  bool more = false;
  for (QTextLine line = layout.createLine(); line.isValid(); line = layout.createLine()) {
    line.setLineWidth(width);
    if (shown.size() == lines_) {
      more = true;
      break;
    }
    shown << full_.mid(line.textStart(), line.textLength());
  }
  layout.endLayout();
  if (more && !shown.isEmpty()) {
    shown.back() = fontMetrics().elidedText(shown.back().trimmed() + QStringLiteral(" …"),
                                            Qt::ElideRight, width);
    if (!shown.back().endsWith(QChar(0x2026))) shown.back() += QChar(0x2026);
  }
  // Line breaks where the layout put them, so the label draws the same lines.
  QString text;
  for (const QString& line : shown) {
    if (!text.isEmpty() && !text.endsWith(QLatin1Char('\n'))) text += QLatin1Char('\n');
    text += line;
  }
  setText(more ? text : full_);
}

}  // namespace tessel::gui
