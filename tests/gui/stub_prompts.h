// The window's questions answered as a test says, and recorded: no modal dialog waits for a
// click that never comes.
#pragma once

#include <QString>
#include <QStringList>

#include <optional>

#include "gui/prompts.h"

namespace tessel::gui {

class StubPrompts : public Prompts {
 public:
  bool confirm(QWidget*, const QString& title, const QString& question) override {
    questions << title + QStringLiteral(": ") + question;
    return answer;
  }
  QString folder(QWidget*, const QString&, const QString& start) override {
    folder_starts << start;
    return folder_answer;
  }
  QString save_file(QWidget*, const QString& title, const QString& start, const QString&) override {
    save_questions << title;
    save_starts << start;
    return save_answer;
  }
  std::optional<double> number(QWidget*, const QString& title, const QString& label, double, double,
                               double, int) override {
    number_questions << title + QStringLiteral(": ") + label;
    return number_answer;
  }

  bool answer = true;     // to every confirm()
  QString folder_answer;  // empty: cancelled
  QStringList questions;  // "title: question", in order
  QStringList folder_starts;
  QString save_answer;  // empty: cancelled
  QStringList save_questions, save_starts;
  std::optional<double> number_answer;  // none: cancelled
  QStringList number_questions;         // "title: label", in order
};

}  // namespace tessel::gui
