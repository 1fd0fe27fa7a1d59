#include "gui/prompts.h"

#include <QFileDialog>
#include <QInputDialog>
#include <QMessageBox>

namespace tessel::gui {

bool DialogPrompts::confirm(QWidget* parent, const QString& title, const QString& question) {
  return QMessageBox::question(parent, title, question) == QMessageBox::Yes;
}

QString DialogPrompts::folder(QWidget* parent, const QString& title, const QString& start) {
  return QFileDialog::getExistingDirectory(parent, title, start);
}

QString DialogPrompts::save_file(QWidget* parent, const QString& title, const QString& start,
                                 const QString& filter) {
  return QFileDialog::getSaveFileName(parent, title, start, filter);
}

std::optional<double> DialogPrompts::number(QWidget* parent, const QString& title,
                                            const QString& label, double value, double min,
                                            double max, int decimals) {
  bool ok = false;
  const double answer =
      QInputDialog::getDouble(parent, title, label, value, min, max, decimals, &ok);
  if (!ok) return std::nullopt;
  return answer;
}

Prompts& dialog_prompts() {
  static DialogPrompts prompts;
  return prompts;
}

}  // namespace tessel::gui
