// The questions the window asks the user (a Yes/No, a folder), behind one interface so that tests
// answer them without a modal dialog. DialogPrompts asks with QMessageBox and QFileDialog.
#pragma once

#include <QString>

class QWidget;

namespace tessel::gui {

class Prompts {
 public:
  virtual ~Prompts() = default;
  // True for Yes.
  virtual bool confirm(QWidget* parent, const QString& title, const QString& question) = 0;
  // An existing folder, the dialog opened at `start`; empty when cancelled.
  virtual QString folder(QWidget* parent, const QString& title, const QString& start) = 0;
};

class DialogPrompts : public Prompts {
 public:
  bool confirm(QWidget* parent, const QString& title, const QString& question) override;
  QString folder(QWidget* parent, const QString& title, const QString& start) override;
};

// The process's DialogPrompts: what a window asks with until a test sets its own.
Prompts& dialog_prompts();

}  // namespace tessel::gui
