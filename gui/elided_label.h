// A label of a few lines for messages of any length beside a form: the text wrapped to the
// label's width, the last line that fits ending in "…", the whole text in its tooltip. Its height
// is those lines whatever the text, so a long message neither moves the form nor squeezes its
// rows (a wrapped QLabel asks for more height than the panel's layout reports, issue 22).
#pragma once

#include <QLabel>
#include <QString>

namespace tessel::gui {

class ElidedLabel : public QLabel {
  Q_OBJECT

 public:
  explicit ElidedLabel(int lines, QWidget* parent = nullptr);

  void set_full_text(const QString& text);
  const QString& full_text() const { return full_; }
  bool elided() const { return text() != full_; }  // as drawn now
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void fit();

  int lines_;
  QString full_;
};

}  // namespace tessel::gui
