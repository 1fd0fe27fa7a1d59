// tessel-gui's main window. The viewer, dataset, training and heatmap panels arrive with the GUI
// issue; until then the window says what this build is and what it can do.
#pragma once

#include <QMainWindow>

namespace tessel::gui {

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
};

}  // namespace tessel::gui
