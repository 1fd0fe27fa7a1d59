// The questions the window asks the user (a Yes/No, a folder, a file to write, a number), behind
// one interface so that tests answer them without a modal dialog. DialogPrompts asks with
// QMessageBox, QFileDialog and QInputDialog.
#pragma once

#include <QString>

#include <optional>

class QWidget;

namespace tessel::gui {

class Prompts {
 public:
  virtual ~Prompts() = default;
  // True for Yes.
  virtual bool confirm(QWidget* parent, const QString& title, const QString& question) = 0;
  // An existing folder, the dialog opened at `start`; empty when cancelled.
  virtual QString folder(QWidget* parent, const QString& title, const QString& start) = 0;
  // A file to write, the dialog opened at `start` (a path or a folder) showing `filter`
  // ("GeoJSON (*.geojson)"); it asks before replacing a file. Empty when cancelled.
  virtual QString save_file(QWidget* parent, const QString& title, const QString& start,
                            const QString& filter) = 0;
  // A number in [min, max] with `decimals` decimals, the field showing `value` and `label` above
  // it; none when cancelled.
  virtual std::optional<double> number(QWidget* parent, const QString& title, const QString& label,
                                       double value, double min, double max, int decimals) = 0;
};

class DialogPrompts : public Prompts {
 public:
  bool confirm(QWidget* parent, const QString& title, const QString& question) override;
  QString folder(QWidget* parent, const QString& title, const QString& start) override;
  QString save_file(QWidget* parent, const QString& title, const QString& start,
                    const QString& filter) override;
  std::optional<double> number(QWidget* parent, const QString& title, const QString& label,
                               double value, double min, double max, int decimals) override;
};

// The process's DialogPrompts: what a window asks with until a test sets its own.
Prompts& dialog_prompts();

}  // namespace tessel::gui
