// A project, as QuPath's: one folder that holds a study's work, so that opening it brings all of
// it back. In it:
//   project.tessel   this file's record (JSON): the manifest's name and the last run
//   manifest.csv     the slides with label, split and mpp (docs/manifest.md; the dataset panel
//                    edits it, `tessel train` reads it as it is)
//   annotations/     each slide's annotations, QuPath GeoJSON (MainWindow::annotation_file)
//   runs/            the training runs started from the project (run1, run2, …)
//   heatmaps/        the heatmaps drawn from its checkpoints
// Pure file work, no widgets: tests drive it directly.
#pragma once

#include <QString>

namespace tessel::gui {

inline constexpr char kProjectFileName[] = "project.tessel";

struct Project {
  QString folder;    // absolute
  QString manifest;  // relative to the folder, or absolute when it lies elsewhere
  QString last_run;  // relative to the folder (or absolute); empty: none started yet

  QString file() const;
  QString manifest_path() const;
  QString last_run_path() const;  // empty when none
  QString annotations_folder() const;
  QString runs_folder() const;
  QString heatmaps_folder() const;
  QString name() const;  // the folder's name
  // runs/runN for the smallest N not taken yet.
  QString next_run_folder() const;
};

// Makes `folder` a project (creating it and its subfolders) whose manifest is `manifest_csv`
// (written as manifest.csv; its slide paths as the caller wrote them) and writes its file.
// Throws tessel::Error naming the folder when it already is a project or cannot be written.
Project create_project(const QString& folder, const QByteArray& manifest_csv);

// The project whose file is `path`, or which `path` (a folder) holds. Throws tessel::Error naming
// the file and what is wrong (missing, not JSON, not a Tessel project, a newer version).
Project read_project(const QString& path);

// Writes the project's file through a temporary name, so that a crash leaves the old one whole.
// Throws tessel::Error naming the file.
void write_project(const Project& project);

// Whether `path` is a project file or a folder holding one.
bool is_project(const QString& path);

}  // namespace tessel::gui
