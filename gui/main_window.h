// tessel-gui's main window: the slide viewer in the centre; overview, properties and dataset in
// docks. Slides open from the menu, by drag-and-drop, from the command line or by double-clicking
// a dataset row; they are opened off the UI thread and every failure is a message in the window:
// in the message bar above the viewer, which stays until dismissed (and in the status bar). The
// Tools menu and toolbar pick the viewer's tool: pan, ruler, rectangle or polygon ROI; ROIs are
// saved as GeoJSON a manifest's `roi` column takes.
#pragma once

#include <QAction>
#include <QDockWidget>
#include <QLabel>
#include <QMainWindow>
#include <QMenu>
#include <QProgressBar>
#include <QPushButton>
#include <QString>
#include <QStringList>
#include <QThreadPool>
#include <QToolBar>

#include <optional>
#include <vector>

#include "gui/annotation_panel.h"
#include "gui/dataset_panel.h"
#include "gui/heatmap_queue.h"
#include "gui/message_bar.h"
#include "gui/overview_widget.h"
#include "gui/predictions_panel.h"
#include "gui/project.h"
#include "gui/prompts.h"
#include "gui/properties_panel.h"
#include "gui/slide_view.h"
#include "gui/training_panel.h"

namespace tessel::gui {

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Both return at once; slideOpened / slideFailed (or the dataset panel's signals) follow.
  void open_slide(const QString& path);
  void open_manifest(const QString& csv);
  // A path from the command line or a drop: a project (its file or folder), a .csv manifest, or
  // anything else a slide.
  void open_path(const QString& path);
  // File ▸ New Project…: a project (gui/project.h) in `folder` from the manifest the dataset
  // panel shows (written there as manifest.csv, its slides' paths relative where they lie
  // inside) with the annotations kept so far for its slides; then opened. False: a message says
  // why (no manifest shown, already a project, not writable).
  bool new_project(const QString& folder);
  // File ▸ Open Project… (a project file or folder opened or dropped, or at the start the last
  // one): its manifest in the dataset panel and the training form, its annotations folder, its
  // last run offered for Resume (else runs/runN next as the output), its heatmaps folder; the
  // title names it. A run started then is recorded as its last. False: a message says why.
  bool open_project(const QString& path);
  const std::optional<Project>& project() const { return project_; }
  // File ▸ Open DICOM Folder…: a DICOM whole-slide image, a folder of instances, as a slide.
  QAction* open_folder_action() { return open_folder_action_; }
  static constexpr const char* kLastProjectKey = "project/last";

  bool opening() const { return opening_; }
  const QString& slide_path() const { return slide_path_; }
  const QString& last_error() const { return last_error_; }
  SlideView* slide_view() { return view_; }
  OverviewWidget* overview() { return overview_; }
  PropertiesPanel* properties() { return properties_; }
  DatasetPanel* dataset() { return dataset_; }
  QAction* tissue_action() { return tissue_action_; }
  // View ▸ Heatmap Overlay (Ctrl+H, checkable) hides and shows the heatmap with its legend; View
  // ▸ Clear Heatmap removes it. Both disabled without a heatmap.
  QAction* heatmap_action() { return heatmap_action_; }
  QAction* clear_heatmap_action() { return clear_heatmap_action_; }
  // The View menu: zoom, overlays, magnification, and a toggle for every dock and toolbar.
  QMenu* view_menu() { return view_menu_; }
  // File ▸ Open Recent: the last kMaxRecentFiles slides and manifests opened (successfully),
  // newest first, kept in QSettings as kRecentFilesKey; "Clear Recent Files" empties it. An entry
  // whose file is gone is removed when chosen, with a message.
  QMenu* recent_menu() { return recent_menu_; }
  QStringList recent_files() const;
  void open_recent(const QString& path);
  static constexpr const char* kRecentFilesKey = "recent/files";
  static constexpr int kMaxRecentFiles = 8;
  // View ▸ Magnification and the toolbar: 1×, 5×, 10×, 20×, 40× (kMagnificationPresets), keys
  // 1 … 5 while the viewer has focus (so digits still type into the panels' fields); zoom about
  // the view's centre. Disabled, with a tooltip saying why, without a slide or without its mpp.
  const std::vector<QAction*>& magnification_actions() const { return magnification_actions_; }
  // The status bar's cursor position on the slide: µm and px, or px without mpp (cursor_readout);
  // empty when the cursor is off the slide.
  QLabel* cursor_label() { return cursor_label_; }
  // Tools ▸ Set Microns per Pixel… (and "Set mpp…" on the magnification toolbar), enabled while
  // the slide shown has no mpp in its file, which the status bar says when it opens: asks for
  // the µm per level-0 pixel (Prompts::number) and gives it to the viewer for this open slide
  // (scale bar, presets, cursor readout, ruler). False when cancelled or no such slide.
  QAction* set_mpp_action() { return set_mpp_action_; }
  bool request_mpp();
  // Tools ▸ Pan, Ruler, Rectangle ROI, Polygon ROI (also the Tools toolbar): the viewer's tool
  // (SlideView::Tool), one checked at a time, Pan to start; in SlideView::Tool's order.
  QMenu* tools_menu() { return tools_menu_; }
  const std::vector<QAction*>& tool_actions() const { return tool_actions_; }
  // File ▸ Save ROI… (also in Tools), enabled while ROIs are drawn: asks for a file (the last
  // folder chosen, kept in QSettings as kRoiFolderKey, else the slide's; named after the slide)
  // and save_roi writes it. False when cancelled or nothing was written.
  QAction* save_roi_action() { return save_roi_action_; }
  // Tools ▸ Clear Annotations: all of the slide's, one step Edit ▸ Undo takes back.
  QAction* clear_rois_action() { return clear_rois_action_; }
  // Edit ▸ Undo and Redo: the annotations' steps (drawn, deleted, renamed, classified, cleared,
  // imported), of the slide shown.
  QAction* undo_action() { return undo_action_; }
  QAction* redo_action() { return redo_action_; }
  AnnotationPanel* annotation_panel() { return annotations_; }
  // Where the annotations of `slide` are kept, written on every change and read back when it
  // opens: <annotations folder>/<slide stem>-<hash of its full path>.geojson (QuPath GeoJSON),
  // the project's annotations folder when a project is open, else the app's data folder. A
  // file that cannot be read is renamed *.unreadable, with a message, never overwritten.
  QString annotation_file(const QString& slide) const;
  // File ▸ Import Annotations…: QuPath GeoJSON polygons added to the slide's (one undoable
  // step); holes and non-polygons are left out, and the message says so. False: a message says
  // why.
  bool import_annotations(const QString& path);
  QAction* import_annotations_action() { return import_annotations_action_; }
  bool request_save_roi();
  static constexpr const char* kRoiFolderKey = "roi/folder";
  // The viewer's ROIs as QuPath GeoJSON (gui/roi_geojson.h), checked to read back with
  // io::read_roi, written to a temporary name and renamed. False, with the reason in last_error,
  // when none are drawn or the file cannot be written.
  bool save_roi(const QString& path);
  // At the app's start (main.cpp; tests call it to play a restart): the window's size and its
  // docks' places as they were when it last closed (QSettings: kGeometryKey, kLayoutKey,
  // written as it closes), the last project opened (kLastProjectKey) with its last run, or else
  // the last run offered for Resume with its own config (TrainingPanel::restore_last_run), the
  // Training dock raised to show it.
  void restore_session();
  static constexpr const char* kGeometryKey = "window/geometry";
  static constexpr const char* kLayoutKey = "window/layout";
  TrainingPanel* training() { return training_; }
  MessageBar* message_bar() { return message_bar_; }
  // The questions the window and its training panel ask; nullptr: dialogs. Not owned.
  void set_prompts(Prompts* prompts);
  // The training panel's "Heatmap of the viewer's slide": asks for the folder the heatmap's
  // files go to (opened at the last one chosen, remembered in QSettings as kHeatmapFolderKey),
  // and whether to replace the slide's heatmap files already there; then show_heatmap. False:
  // asked nothing (no slide) or the user cancelled.
  bool request_heatmap(const QString& checkpoint);
  // The training panel's "Outline as annotations": the shown heatmap's regions scoring at least
  // `threshold` (threshold_outlines) added to the slide's annotations in one undoable step, named
  // by their score and classed as the heatmap's class (none for a TIFF read back, which does not
  // record it); kept and exported as any annotation.
  // Returns how many; 0 with a message when no heatmap is shown or no region reaches it.
  int outline_heatmap(double threshold);
  // The training panel's "Predict the test slides": the checkpoint's prediction for every slide
  // of the shown manifest's test split, in the Predictions dock (raised). False: a message says
  // why (no manifest, no checkpoint, predictions already running).
  bool request_predictions(const QString& checkpoint);
  PredictionsPanel* predictions() { return predictions_; }
  static constexpr const char* kHeatmapFolderKey = "heatmap/folder";
  // Returns at once; heatmapShown or a message (last_error) follow. The heatmap's TIFF, PNG and
  // GeoJSON are written into `out_dir`. The mpp entered for the viewer's slide (Set mpp…) is the
  // heatmap's too. One heatmap is computed at a time: a request while one runs waits its turn,
  // listed in the status bar beside the running one's progress and its Cancel button. A heatmap
  // finished after another slide was opened is written but not shown (a message says so).
  void show_heatmap(const QString& checkpoint, const QString& out_dir);
  bool computing_heatmap() const { return heatmaps_.busy(); }
  HeatmapQueue& heatmaps() { return heatmaps_; }
  // The running heatmap's progress in the status bar (hidden when none runs) and its Cancel.
  QLabel* heatmap_status() { return heatmap_status_; }
  QPushButton* cancel_heatmap_button() { return cancel_heatmap_; }
  // File ▸ Open Heatmap…: a heatmap TIFF written earlier (tessel heatmap, or this window) over
  // the viewer's slide, read off the UI thread; heatmapShown or a message follow. Its scores
  // are read back from its colours (to within 1/255). Refused when it is not the slide's size.
  void open_heatmap(const QString& tiff);
  // The heatmap's score under the cursor, shown after the position in the status bar; none off
  // the heatmap's cells, on glass, or without a heatmap shown.
  std::optional<float> heatmap_score_at(QPointF level0) const;
  // File ▸ Export View…: what the viewer shows (slide, overlays, heatmap legend, scale bar) as a
  // PNG of the viewer's size, written to a temporary name and renamed. False, with the reason in
  // last_error, when no slide is shown or the file cannot be written.
  bool export_view(const QString& png);
  QAction* export_action() { return export_action_; }
  // File ▸ Quit (Ctrl+Q): closes the window and quits. During a run it asks first; yes stops the
  // run at the next tile and quits once its checkpoint is written.
  QAction* quit_action() { return quit_action_; }

 signals:
  void slideOpened(QString path);
  void slideFailed(QString message);
  void heatmapShown(QString class_name);
  void heatmapFailed(QString message);

 protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;
  void closeEvent(QCloseEvent* event) override;

 private:
  void create_menus();
  void update_magnification_actions();
  void update_heatmap_actions();
  void update_heatmap_status();
  void heatmap_finished(const HeatmapJob& job, const HeatmapOverlay& overlay);
  void display_heatmap(HeatmapOverlay overlay);
  void update_roi_actions();
  void load_slide_annotations();
  void save_slide_annotations();
  void add_recent_file(const QString& path);
  void set_recent_files(const QStringList& paths);
  void update_recent_menu();
  void show_error(const QString& message);
  Prompts& prompts() { return prompts_ != nullptr ? *prompts_ : dialog_prompts(); }
  void show_document(quint64 serial, const QString& path, SlideDocument doc);

  SlideView* view_;
  OverviewWidget* overview_;
  PropertiesPanel* properties_;
  DatasetPanel* dataset_;
  TrainingPanel* training_;
  QDockWidget* training_dock_;
  PredictionsPanel* predictions_;
  QDockWidget* predictions_dock_;
  MessageBar* message_bar_;
  Prompts* prompts_ = nullptr;
  HeatmapQueue heatmaps_;
  HeatmapOverlay heatmap_;  // the one shown, for the score under the cursor
  QLabel* heatmap_status_ = nullptr;
  QProgressBar* heatmap_bar_ = nullptr;
  QPushButton* cancel_heatmap_ = nullptr;
  QAction* tissue_action_ = nullptr;
  QAction* heatmap_action_ = nullptr;
  QAction* clear_heatmap_action_ = nullptr;
  QMenu* view_menu_ = nullptr;
  QMenu* recent_menu_ = nullptr;
  std::vector<QDockWidget*> docks_;
  QAction* export_action_ = nullptr;
  QAction* open_folder_action_ = nullptr;
  QAction* quit_action_ = nullptr;
  std::vector<QAction*> magnification_actions_;
  QAction* set_mpp_action_ = nullptr;
  QMenu* tools_menu_ = nullptr;
  std::vector<QAction*> tool_actions_;
  QAction* save_roi_action_ = nullptr;
  QAction* import_annotations_action_ = nullptr;
  QAction* undo_action_ = nullptr;
  QAction* redo_action_ = nullptr;
  AnnotationPanel* annotations_ = nullptr;
  QString annotations_folder_;  // a project's; empty: the app's data folder
  std::optional<Project> project_;
  bool loading_annotations_ = false;
  QAction* clear_rois_action_ = nullptr;
  bool quit_after_run_ = false;  // Quit was confirmed during a run: close when it has ended
  QLabel* zoom_label_;
  QLabel* cursor_label_;
  QThreadPool pool_;
  quint64 serial_ = 0;  // a slide opened after another one wins, whichever finishes first
  bool opening_ = false;
  QString slide_path_;
  QString last_error_;
};

}  // namespace tessel::gui
