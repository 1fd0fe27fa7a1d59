#include "gui/prompts.h"

#include <QFileDialog>
#include <QMessageBox>

namespace tessel::gui {

bool DialogPrompts::confirm(QWidget* parent, const QString& title, const QString& question) {
  return QMessageBox::question(parent, title, question) == QMessageBox::Yes;
}

QString DialogPrompts::folder(QWidget* parent, const QString& title, const QString& start) {
  return QFileDialog::getExistingDirectory(parent, title, start);
}

Prompts& dialog_prompts() {
  static DialogPrompts prompts;
  return prompts;
}

}  // namespace tessel::gui
