// tessel-gui: the desktop app. Same pipelines as the CLI, behind a window.
#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>

#include <iostream>

#include "core/device/runtime.h"
#include "core/error.h"
#include "core/version.h"
#include "gui/main_window.h"
#include "io/vips.h"
#include "pipelines/logging.h"

int main(int argc, char** argv) {
  QApplication qapp(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("Tessel"));  // QSettings' file
  QApplication::setApplicationName(QStringLiteral("tessel-gui"));
  QApplication::setApplicationVersion(QString::fromLatin1(tessel::kVersion));

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("Tessel desktop app"));
  parser.addHelpOption();
  parser.addVersionOption();
  QCommandLineOption log_level(QStringLiteral("log-level"),
                               QStringLiteral("trace, debug, info, warn, error or off"),
                               QStringLiteral("level"), QStringLiteral("info"));
  QCommandLineOption quit_after(QStringLiteral("quit-after-ms"),
                                QStringLiteral("Close after this many milliseconds (for tests)"),
                                QStringLiteral("ms"));
  parser.addPositionalArgument(QStringLiteral("SLIDE"),
                               QStringLiteral("A slide to open, or a manifest (.csv)"),
                               QStringLiteral("[SLIDE]"));
  parser.addOption(log_level);
  parser.addOption(quit_after);
  parser.process(qapp);

  try {
    tessel::pipelines::setup_logging(parser.value(log_level).toStdString());
    tessel::core::configure_threads(0);
    tessel::io::start_vips();  // on the main thread, before any worker thumbnails a slide
  } catch (const tessel::Error& e) {
    std::cerr << "tessel-gui: error: " << e.what() << "\n";
    return 2;
  }

  tessel::gui::MainWindow window;
  window.restore_session();  // the layout as it was closed, the last run offered for Resume
  window.show();
  if (!parser.positionalArguments().isEmpty())
    window.open_path(parser.positionalArguments().front());
  if (parser.isSet(quit_after)) {
    bool ok = false;
    const int ms = parser.value(quit_after).toInt(&ok);
    if (!ok || ms < 0) {
      std::cerr << "tessel-gui: error: --quit-after-ms needs a number of milliseconds\n";
      return 2;
    }
    QTimer::singleShot(ms, &qapp, &QApplication::quit);
  }
  return QApplication::exec();
}
