#include "gui/project.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSaveFile>

#include "core/error.h"

namespace tessel::gui {
namespace {

constexpr int kVersion = 1;

QString resolve(const QString& folder, const QString& path) {
  if (path.isEmpty()) return {};
  return QDir::cleanPath(QDir(folder).absoluteFilePath(path));
}

[[noreturn]] void fail(const QString& file, const QString& why) {
  throw Error(QStringLiteral("project %1: %2").arg(file, why).toStdString());
}

void write_file(const QString& path, const QByteArray& bytes) {
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size() || !file.commit()) {
    fail(path, QStringLiteral("cannot be written (%1)").arg(file.errorString()));
  }
}

}  // namespace

QString Project::file() const { return QDir(folder).filePath(QLatin1String(kProjectFileName)); }
QString Project::manifest_path() const { return resolve(folder, manifest); }
QString Project::last_run_path() const { return resolve(folder, last_run); }
QString Project::annotations_folder() const {
  return QDir(folder).filePath(QStringLiteral("annotations"));
}
QString Project::runs_folder() const { return QDir(folder).filePath(QStringLiteral("runs")); }
QString Project::heatmaps_folder() const {
  return QDir(folder).filePath(QStringLiteral("heatmaps"));
}
QString Project::name() const { return QFileInfo(folder).fileName(); }

QString Project::next_run_folder() const {
  const QDir runs(runs_folder());
  for (int n = 1;; ++n) {
    const QString run = runs.filePath(QStringLiteral("run%1").arg(n));
    if (!QFileInfo::exists(run)) return run;
  }
}

bool is_project(const QString& path) {
  const QFileInfo info(path);
  if (info.isDir()) return QFileInfo::exists(QDir(path).filePath(QLatin1String(kProjectFileName)));
  return info.fileName() == QLatin1String(kProjectFileName) && info.isFile();
}

Project create_project(const QString& folder, const QByteArray& manifest_csv) {
  Project p;
  p.folder = QDir::cleanPath(QDir(folder).absolutePath());
  p.manifest = QStringLiteral("manifest.csv");
  if (QFileInfo::exists(p.file())) {
    fail(p.file(), QStringLiteral("already exists: open it with File ▸ Open Project…"));
  }
  for (const QString& sub : {p.annotations_folder(), p.runs_folder(), p.heatmaps_folder()}) {
    if (!QDir().mkpath(sub)) fail(p.file(), QStringLiteral("cannot create the folder %1").arg(sub));
  }
  write_file(p.manifest_path(), manifest_csv);
  write_project(p);
  return p;
}

Project read_project(const QString& path) {
  const QString file_path =
      QFileInfo(path).isDir() ? QDir(path).filePath(QLatin1String(kProjectFileName)) : path;
  QFile file(file_path);
  if (!file.exists()) fail(file_path, QStringLiteral("does not exist"));
  if (!file.open(QIODevice::ReadOnly)) {
    fail(file_path, QStringLiteral("cannot be read (%1)").arg(file.errorString()));
  }
  QJsonParseError error;
  const QJsonDocument doc = QJsonDocument::fromJson(file.read(1 << 20), &error);
  if (error.error != QJsonParseError::NoError || !doc.isObject()) {
    fail(file_path,
         QStringLiteral("is not a Tessel project file (not JSON: %1)").arg(error.errorString()));
  }
  const QJsonObject o = doc.object();
  const int version = o.value(QStringLiteral("tessel_project")).toInt(0);
  if (version < 1) fail(file_path, QStringLiteral("is not a Tessel project file"));
  if (version > kVersion) {
    fail(file_path, QStringLiteral("was written by a newer Tessel (project version %1; this one "
                                   "reads %2): update Tessel to open it")
                        .arg(version)
                        .arg(kVersion));
  }
  Project p;
  p.folder = QDir::cleanPath(QFileInfo(file_path).absolutePath());
  p.manifest = o.value(QStringLiteral("manifest")).toString();
  p.last_run = o.value(QStringLiteral("last_run")).toString();
  if (p.manifest.isEmpty()) fail(file_path, QStringLiteral("names no manifest"));
  return p;
}

void write_project(const Project& p) {
  QJsonObject o;
  o.insert(QStringLiteral("tessel_project"), kVersion);
  o.insert(QStringLiteral("manifest"), p.manifest);
  if (!p.last_run.isEmpty()) o.insert(QStringLiteral("last_run"), p.last_run);
  write_file(p.file(), QJsonDocument(o).toJson(QJsonDocument::Indented));
}

}  // namespace tessel::gui
