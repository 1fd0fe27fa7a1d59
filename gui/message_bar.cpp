#include "gui/message_bar.h"

#include <QHBoxLayout>
#include <QStyle>

namespace tessel::gui {

MessageBar::MessageBar(QWidget* parent) : QFrame(parent) {
  setObjectName(QStringLiteral("messageBar"));
  setFrameShape(QFrame::StyledPanel);
  setStyleSheet(QStringLiteral(
      "#messageBar { background: #fdecea; border: 1px solid #b00020; border-radius: 3px; }"
      "#messageBar QLabel { color: #5f0010; }"));
  auto* icon = new QLabel(this);
  icon->setPixmap(style()->standardIcon(QStyle::SP_MessageBoxCritical).pixmap(16, 16));
  label_ = new QLabel(this);
  label_->setWordWrap(true);
  label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  label_->setTextFormat(Qt::PlainText);
  close_ = new QToolButton(this);
  close_->setText(QStringLiteral("×"));
  close_->setAutoRaise(true);
  close_->setToolTip(tr("Dismiss"));
  connect(close_, &QToolButton::clicked, this, &MessageBar::dismiss);
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(6, 3, 3, 3);
  layout->addWidget(icon, 0, Qt::AlignTop);
  layout->addWidget(label_, 1);
  layout->addWidget(close_, 0, Qt::AlignTop);
  hide();
}

void MessageBar::show_error(const QString& message) {
  ++errors_;
  topic_.clear();
  label_->setText(message);
  show();
}

void MessageBar::dismiss() { hide(); }

void MessageBar::clear(const QString& topic) {
  if (!topic_.isEmpty() && topic_ == topic) dismiss();
}

}  // namespace tessel::gui
