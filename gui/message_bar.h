// A persistent message area above the viewer: the latest error (a slide that does not open, a
// manifest that cannot be used, a failed run or heatmap) stays until it is dismissed or replaced,
// where the status bar's text would be gone at the next message. Not modal, so nothing waits on
// it (tests included).
#pragma once

#include <QFrame>
#include <QLabel>
#include <QString>
#include <QToolButton>

namespace tessel::gui {

class MessageBar : public QFrame {
  Q_OBJECT

 public:
  explicit MessageBar(QWidget* parent = nullptr);

  void show_error(const QString& message);  // shows the bar with `message`, replacing the last
  void dismiss();                           // hides it (its × button)
  // What the error shown is about ("training", "heatmap", "manifest"; untagged: ""), so that it
  // is cleared when that goes right afterwards (a run started, a heatmap shown, another manifest
  // opened) instead of standing over what now works. An error about a slide stays: the next
  // slide opening says nothing about that file.
  void tag(const QString& topic) { topic_ = topic; }
  void clear(const QString& topic);
  QString text() const { return label_->text(); }
  int errors() const { return errors_; }  // shown since the window opened

 private:
  QLabel* label_;
  QToolButton* close_;
  int errors_ = 0;
  QString topic_;
};

}  // namespace tessel::gui
