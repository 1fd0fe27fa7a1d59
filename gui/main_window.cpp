#include "gui/main_window.h"

#include <QApplication>
#include <QFont>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QStatusBar>

#include "core/version.h"
#include "pipelines/environment.h"

namespace tessel::gui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(QStringLiteral("Tessel %1").arg(QString::fromLatin1(kVersion)));
  resize(900, 600);

  auto* about = new QPlainTextEdit(this);
  about->setReadOnly(true);
  QFont mono(QStringLiteral("monospace"));
  mono.setStyleHint(QFont::Monospace);
  about->setFont(mono);
  about->setPlainText(QString::fromStdString(
      "Tessel trains convolutional networks on whole slides in bounded memory.\n\n"
      "This build:\n" +
      pipelines::to_string(pipelines::probe_environment()) +
      "\nThe slide viewer, dataset, training and heatmap panels are not built yet.\n"
      "Until then, use the `tessel` command line (tessel --help).\n"));
  setCentralWidget(about);

  auto* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Quit"), QKeySequence::Quit, qApp, &QApplication::quit);
  auto* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&About Tessel"), this, [this] {
    QMessageBox::about(this, tr("About Tessel"),
                       tr("Tessel %1: whole-slide CNN training in bounded memory.")
                           .arg(QString::fromLatin1(kVersion)));
  });
  statusBar()->showMessage(tr("Ready"));
}

}  // namespace tessel::gui
