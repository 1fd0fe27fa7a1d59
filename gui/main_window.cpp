#include "gui/main_window.h"

#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QCryptographicHash>
#include <QDir>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QSaveFile>
#include <QScrollArea>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTimer>
#include <QVBoxLayout>

#include <array>
#include <exception>
#include <utility>

#include "core/error.h"
#include "core/version.h"
#include "gui/heatmap_overlay.h"
#include "gui/magnification.h"
#include "gui/roi_geojson.h"
#include "gui/words.h"
#include "io/roi.h"
#include "pipelines/environment.h"

namespace tessel::gui {

namespace {

QDockWidget* dock(const QString& title, const QString& name, QWidget* content, QWidget* parent) {
  auto* d = new QDockWidget(title, parent);
  d->setObjectName(name);
  d->setWidget(content);
  return d;
}

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(QStringLiteral("Tessel %1").arg(QString::fromLatin1(kVersion)));
  resize(1280, 800);
  setAcceptDrops(true);
  pool_.setMaxThreadCount(1);

  view_ = new SlideView(this);
  message_bar_ = new MessageBar(this);
  auto* centre = new QWidget(this);
  auto* centre_layout = new QVBoxLayout(centre);
  centre_layout->setContentsMargins(0, 0, 0, 0);
  centre_layout->setSpacing(0);
  centre_layout->addWidget(message_bar_);
  centre_layout->addWidget(view_, 1);
  setCentralWidget(centre);
  overview_ = new OverviewWidget(this);
  properties_ = new PropertiesPanel(this);
  dataset_ = new DatasetPanel(this);
  auto* overview_dock = dock(tr("Overview"), QStringLiteral("overview"), overview_, this);
  auto* properties_dock = dock(tr("Properties"), QStringLiteral("properties"), properties_, this);
  auto* dataset_dock = dock(tr("Dataset"), QStringLiteral("dataset"), dataset_, this);
  annotations_ = new AnnotationPanel(view_, this);
  auto* annotations_dock =
      dock(tr("Annotations"), QStringLiteral("annotations"), annotations_, this);
  addDockWidget(Qt::RightDockWidgetArea, overview_dock);
  addDockWidget(Qt::RightDockWidgetArea, properties_dock);
  addDockWidget(Qt::RightDockWidgetArea, annotations_dock);
  tabifyDockWidget(properties_dock, annotations_dock);
  addDockWidget(Qt::BottomDockWidgetArea, dataset_dock);
  training_ = new TrainingPanel(this);
  // Scrolled, so the panel's charts never squeeze the viewer when the dock is short.
  auto* training_scroll = new QScrollArea(this);
  training_scroll->setWidget(training_);
  training_scroll->setWidgetResizable(true);
  training_scroll->setFrameShape(QFrame::NoFrame);
  training_dock_ = dock(tr("Training"), QStringLiteral("training"), training_scroll, this);
  addDockWidget(Qt::BottomDockWidgetArea, training_dock_);
  tabifyDockWidget(dataset_dock, training_dock_);
  auto* heatmap_dock =
      dock(tr("Heatmap"), QStringLiteral("heatmap"), training_->take_heatmap_box(), this);
  addDockWidget(Qt::RightDockWidgetArea, heatmap_dock);
  tabifyDockWidget(annotations_dock, heatmap_dock);
  predictions_ = new PredictionsPanel(this);
  predictions_dock_ = dock(tr("Predictions"), QStringLiteral("predictions"), predictions_, this);
  addDockWidget(Qt::BottomDockWidgetArea, predictions_dock_);
  tabifyDockWidget(training_dock_, predictions_dock_);
  docks_ = {overview_dock, properties_dock, annotations_dock, heatmap_dock,
            dataset_dock,  training_dock_,  predictions_dock_};
  dataset_dock->raise();
  properties_dock->raise();
  // The slide gets most of the window; the docks what they need to be read.
  resizeDocks({overview_dock, properties_dock}, {320, 320}, Qt::Horizontal);
  // The slide keeps most of the height; the Training dock's form scrolls in what is left.
  resizeDocks({dataset_dock}, {300}, Qt::Vertical);

  heatmap_status_ = new QLabel(this);
  heatmap_bar_ = new QProgressBar(this);
  heatmap_bar_->setMaximumWidth(120);
  heatmap_bar_->setTextVisible(false);
  cancel_heatmap_ = new QPushButton(tr("Cancel"), this);
  cancel_heatmap_->setToolTip(tr("Stop the heatmap at its next tile (nothing is written)"));
  statusBar()->addPermanentWidget(heatmap_status_);
  statusBar()->addPermanentWidget(heatmap_bar_);
  statusBar()->addPermanentWidget(cancel_heatmap_);
  connect(cancel_heatmap_, &QPushButton::clicked, &heatmaps_, &HeatmapQueue::cancel);
  connect(&heatmaps_, &HeatmapQueue::changed, this, &MainWindow::update_heatmap_status);
  connect(&heatmaps_, &HeatmapQueue::finished, this, &MainWindow::heatmap_finished);
  connect(&heatmaps_, &HeatmapQueue::failed, this, [this](const HeatmapJob&, const QString& why) {
    show_error(why);
    emit heatmapFailed(why);
  });
  connect(&heatmaps_, &HeatmapQueue::cancelled, this, [this](const HeatmapJob& job) {
    statusBar()->showMessage(
        tr("Heatmap of %1 cancelled: nothing was written").arg(QFileInfo(job.slide).fileName()));
  });
  update_heatmap_status();
  cursor_label_ = new QLabel(this);
  statusBar()->addPermanentWidget(cursor_label_);
  zoom_label_ = new QLabel(this);
  statusBar()->addPermanentWidget(zoom_label_);
  connect(view_, &SlideView::cursorMoved, this, [this](QPointF level0) {
    QString text = cursor_readout(level0, view_->mpp(), view_->mpp_y());
    if (const std::optional<float> score = heatmap_score_at(level0)) {
      text += tr(" · %1 %2%3")
                  .arg(heatmap_.class_name, heatmap_.approximate ? QStringLiteral("≈") : QString())
                  .arg(static_cast<double>(*score), 0, 'f', 2);
    }
    cursor_label_->setText(text);
  });
  connect(view_, &SlideView::cursorLeft, cursor_label_, &QLabel::clear);
  connect(view_, &SlideView::viewChanged, this, [this](QRectF level0) {
    overview_->set_viewport(level0);
    zoom_label_->setText(
        zoom_readout(view_->view().downsample, view_->mpp(), view_->current_level()));
  });
  connect(view_, &SlideView::tileError, this, &MainWindow::show_error);
  connect(overview_, &OverviewWidget::centerRequested, view_, &SlideView::center_on);
  connect(properties_, &PropertiesPanel::associatedImageFailed, this, &MainWindow::show_error);
  connect(dataset_, &DatasetPanel::slideActivated, this, &MainWindow::open_slide);
  connect(dataset_, &DatasetPanel::manifestLoaded, this, [this](const QString& summary) {
    add_recent_file(dataset_->manifest_path());
    statusBar()->showMessage(summary);
  });
  connect(dataset_, &DatasetPanel::manifestFailed, this, [this](const QString& reason) {
    show_error(reason);
    message_bar_->tag(QStringLiteral("manifest"));
  });
  connect(training_, &TrainingPanel::heatmapOutlineRequested, this, &MainWindow::outline_heatmap);
  connect(training_, &TrainingPanel::predictionsRequested, this, &MainWindow::request_predictions);
  connect(predictions_, &PredictionsPanel::slideActivated, this, &MainWindow::open_slide);
  connect(training_, &TrainingPanel::runStarted, this, [this] {
    message_bar_->clear(QStringLiteral("training"));
    training_dock_->raise();
    statusBar()->showMessage(training_->message());
  });
  connect(training_, &TrainingPanel::runFinished, this,
          [this](const QString& text) { statusBar()->showMessage(text); });
  connect(training_, &TrainingPanel::runFailed, this, [this](const QString& reason) {
    show_error(tr("Training failed: %1").arg(reason));
    message_bar_->tag(QStringLiteral("training"));
  });
  connect(this, &MainWindow::heatmapFailed, message_bar_,
          [this] { message_bar_->tag(QStringLiteral("heatmap")); });
  connect(this, &MainWindow::heatmapShown, message_bar_,
          [this] { message_bar_->clear(QStringLiteral("heatmap")); });
  // Quit confirmed during the run: now that its checkpoint is written.
  for (auto signal : {&TrainingPanel::runFinished, &TrainingPanel::runFailed}) {
    connect(training_, signal, this, [this] {
      if (!quit_after_run_) return;
      QTimer::singleShot(0, this, [this] {
        if (close()) QApplication::quit();
      });
    });
  }
  connect(training_, &TrainingPanel::heatmapRequested, this, &MainWindow::request_heatmap);
  connect(training_, &TrainingPanel::runStarted, this, [this] {
    if (!project_) return;
    // The project's last run: offered for Resume when the project is opened again.
    const QString run =
        QDir(project_->folder).relativeFilePath(QDir(training_->output_folder()).absolutePath());
    project_->last_run = run;
    try {
      write_project(*project_);
    } catch (const std::exception& e) {
      show_error(QString::fromStdString(e.what()));
    }
  });
  connect(training_, &TrainingPanel::heatmapOpacityChanged, view_, &SlideView::set_heatmap_opacity);
  connect(view_, &SlideView::heatmapChanged, this, [this] {
    if (!view_->has_heatmap()) heatmap_ = {};  // cleared, or another slide opened
    update_heatmap_actions();
  });
  connect(view_, &SlideView::mppChanged, this, &MainWindow::update_magnification_actions);
  connect(view_, &SlideView::roisChanged, this, [this] {
    update_roi_actions();
    save_slide_annotations();
  });
  connect(view_, &SlideView::rulerChanged, this, [this] {
    if (view_->ruler()) statusBar()->showMessage(tr("Ruler: %1").arg(view_->ruler_label()));
  });

  create_menus();
  statusBar()->showMessage(tr("Open a slide or a manifest from the File menu, or drop one here."));
}

MainWindow::~MainWindow() {
  pool_.clear();
  pool_.waitForDone();
}

void MainWindow::create_menus() {
  auto* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open Slide…"), QKeySequence::Open, this, [this] {
    const QString path = QFileDialog::getOpenFileName(
        this, tr("Open a slide"), {},
        tr("Slides (*.svs *.tif *.tiff *.ndpi *.vms *.vmu *.scn *.mrxs *.svslide *.bif *.dcm);;"
           "All files (*)"));
    if (!path.isEmpty()) open_slide(path);
  });
  // A DICOM whole-slide image is a folder of files (one per level and associated image).
  open_folder_action_ = file->addAction(tr("Open DICOM &Folder…"), this, [this] {
    const QString folder = prompts().folder(this, tr("Open a DICOM slide's folder"), {});
    if (!folder.isEmpty()) open_slide(folder);
  });
  file->addAction(tr("Open &Manifest…"), QKeySequence(tr("Ctrl+M")), this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open a manifest"), {},
                                                      tr("Manifests (*.csv);;All files (*)"));
    if (!path.isEmpty()) open_manifest(path);
  });
  file->addAction(tr("&New Project…"), this, [this] {
    const QString folder =
        prompts().folder(this, tr("Folder for a new project of the manifest's slides"),
                         QFileInfo(dataset_->manifest_path()).absolutePath());
    if (!folder.isEmpty()) new_project(folder);
  });
  file->addAction(tr("Open &Project…"), this, [this] {
    const QString folder = prompts().folder(this, tr("Open a project folder"), {});
    if (!folder.isEmpty()) open_project(folder);
  });
  file->addAction(tr("Open &Heatmap…"), this, [this] {
    const QString path = QFileDialog::getOpenFileName(
        this, tr("Open a heatmap of the slide shown"),
        QSettings().value(QLatin1String(kHeatmapFolderKey)).toString(),
        tr("Heatmap TIFFs (*.heatmap.tif);;TIFF images (*.tif *.tiff);;All files (*)"));
    if (!path.isEmpty()) open_heatmap(path);
  });
  import_annotations_action_ = file->addAction(tr("&Import Annotations…"), this, [this] {
    const QString path = QFileDialog::getOpenFileName(
        this, tr("Import annotations (QuPath GeoJSON) onto the slide shown"),
        QSettings().value(QLatin1String(kRoiFolderKey)).toString(),
        tr("GeoJSON (*.geojson *.json);;All files (*)"));
    if (!path.isEmpty()) import_annotations(path);
  });
  import_annotations_action_->setEnabled(false);  // until a slide is shown
  recent_menu_ = file->addMenu(tr("Open &Recent"));
  // Rebuilt as it opens: another window of the app may have changed the list.
  connect(recent_menu_, &QMenu::aboutToShow, this, &MainWindow::update_recent_menu);
  update_recent_menu();
  export_action_ = file->addAction(tr("&Export View…"), QKeySequence(tr("Ctrl+E")), this, [this] {
    const QString path = QFileDialog::getSaveFileName(
        this, tr("Export the view"), QStringLiteral("view.png"), tr("PNG images (*.png)"));
    if (!path.isEmpty()) export_view(path);
  });
  export_action_->setEnabled(false);  // until a slide is shown
  save_roi_action_ = file->addAction(tr("&Save ROI…"), QKeySequence(tr("Ctrl+Shift+S")), this,
                                     [this] { request_save_roi(); });
  file->addSeparator();
  // Through close(), so that a run going is asked about (closeEvent); QApplication::quit alone
  // had hidden the window and trained on invisibly until the slide ended.
  quit_action_ = file->addAction(tr("&Quit"), QKeySequence::Quit, this, [this] {
    if (close()) QApplication::quit();
  });

  auto* edit = menuBar()->addMenu(tr("&Edit"));
  undo_action_ = view_->undo_stack()->createUndoAction(this, tr("&Undo"));
  undo_action_->setShortcut(QKeySequence::Undo);
  redo_action_ = view_->undo_stack()->createRedoAction(this, tr("&Redo"));
  redo_action_->setShortcut(QKeySequence::Redo);
  edit->addAction(undo_action_);
  edit->addAction(redo_action_);

  auto* view = menuBar()->addMenu(tr("&View"));
  view_menu_ = view;
  view->addAction(tr("Zoom &In"), QKeySequence::ZoomIn, view_, [this] { view_->zoom_by(1.5); });
  view->addAction(tr("Zoom &Out"), QKeySequence::ZoomOut, view_,
                  [this] { view_->zoom_by(1 / 1.5); });
  view->addAction(tr("&Fit Slide"), QKeySequence(tr("Ctrl+0")), view_, &SlideView::fit);
  tissue_action_ = view->addAction(tr("&Tissue Mask Overlay"));
  tissue_action_->setShortcut(QKeySequence(tr("Ctrl+T")));
  tissue_action_->setCheckable(true);
  connect(tissue_action_, &QAction::toggled, view_, &SlideView::set_tissue_visible);
  heatmap_action_ = view->addAction(tr("&Heatmap Overlay"));
  heatmap_action_->setShortcut(QKeySequence(tr("Ctrl+H")));
  heatmap_action_->setCheckable(true);
  connect(heatmap_action_, &QAction::toggled, view_, &SlideView::set_heatmap_visible);
  clear_heatmap_action_ = view->addAction(tr("&Clear Heatmap"), this, [this] {
    view_->set_heatmap({}, {});
    training_->set_heatmap_legend({});
    statusBar()->showMessage(tr("Heatmap cleared"));
  });
  update_heatmap_actions();

  auto* magnification = view->addMenu(tr("&Magnification"));
  auto* toolbar = addToolBar(tr("Magnification"));
  toolbar->setObjectName(QStringLiteral("magnification"));
  for (size_t i = 0; i < kMagnificationPresets.size(); ++i) {
    const double preset = kMagnificationPresets[i];
    auto* action = new QAction(QStringLiteral("%1×").arg(preset), this);
    action->setShortcut(QKeySequence(Qt::Key_1 + static_cast<int>(i)));
    // Bare digits only while the viewer has focus: elsewhere they are typed into fields.
    action->setShortcutContext(Qt::WidgetWithChildrenShortcut);
    view_->addAction(action);
    connect(action, &QAction::triggered, view_,
            [this, preset] { view_->set_magnification(preset); });
    magnification->addAction(action);
    toolbar->addAction(action);
    magnification_actions_.push_back(action);
  }
  set_mpp_action_ = new QAction(tr("Set &Microns per Pixel…"), this);
  set_mpp_action_->setIconText(tr("Set mpp…"));
  connect(set_mpp_action_, &QAction::triggered, this, [this] { request_mpp(); });
  toolbar->addSeparator();
  toolbar->addAction(set_mpp_action_);
  update_magnification_actions();

  tools_menu_ = menuBar()->addMenu(tr("&Tools"));
  auto* tools_toolbar = addToolBar(tr("Tools"));
  tools_toolbar->setObjectName(QStringLiteral("tools"));
  auto* tool_group = new QActionGroup(this);  // exclusive: one tool at a time
  const std::array<std::pair<SlideView::Tool, QString>, 4> tools{{
      {SlideView::Tool::kPan, tr("&Pan")},
      {SlideView::Tool::kRuler, tr("&Ruler")},
      {SlideView::Tool::kRectangle, tr("R&ectangle ROI")},
      {SlideView::Tool::kPolygon, tr("P&olygon ROI")},
  }};
  const std::array<QString, 4> hints{
      tr("Pan: drag the slide; the wheel zooms"),
      tr("Ruler: drag across the slide to measure; Esc removes it"),
      tr("Rectangle ROI: drag a rectangle; Esc cancels"),
      tr("Polygon ROI: click its corners, then double-click or click the first one to close it; "
         "Esc cancels"),
  };
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto [tool, text] = tools[i];
    auto* action = tool_group->addAction(text);
    action->setCheckable(true);
    action->setChecked(tool == view_->tool());
    action->setToolTip(hints[i]);
    action->setStatusTip(hints[i]);
    connect(action, &QAction::triggered, view_, [this, tool] { view_->set_tool(tool); });
    tools_menu_->addAction(action);
    tools_toolbar->addAction(action);
    tool_actions_.push_back(action);
  }
  connect(view_, &SlideView::toolChanged, this, [this, hints](SlideView::Tool tool) {
    tool_actions_[static_cast<size_t>(tool)]->setChecked(true);
    statusBar()->showMessage(hints[static_cast<size_t>(tool)]);
  });
  tools_menu_->addSeparator();
  tools_menu_->addAction(save_roi_action_);
  clear_rois_action_ = tools_menu_->addAction(tr("&Clear Annotations"), this, [this] {
    const size_t n = view_->annotations().size();
    view_->clear_rois();
    statusBar()->showMessage(
        tr("%1 removed: Edit ▸ Undo brings %2 back")
            .arg(counted(static_cast<long long>(n), tr("annotation"), tr("annotations")),
                 n == 1 ? tr("it") : tr("them")));
  });
  tools_menu_->addSeparator();
  tools_menu_->addAction(set_mpp_action_);
  update_roi_actions();

  view->addSeparator();
  auto* panels = view->addMenu(tr("&Panels"));
  for (QDockWidget* d : docks_) panels->addAction(d->toggleViewAction());
  panels->addSeparator();
  panels->addAction(toolbar->toggleViewAction());
  panels->addAction(tools_toolbar->toggleViewAction());

  auto* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&About Tessel"), this, [this] {
    QMessageBox::about(
        this, tr("About Tessel"),
        tr("<p>Tessel %1: whole-slide CNN training in bounded memory.</p><pre>%2</pre>")
            .arg(QString::fromLatin1(kVersion),
                 QString::fromStdString(pipelines::to_string(pipelines::probe_environment()))
                     .toHtmlEscaped()));
  });
}

void MainWindow::update_magnification_actions() {
  const bool known = view_->mpp().has_value();
  const bool file_has_mpp = view_->has_slide() && view_->document().slide->mpp_x() &&
                            *view_->document().slide->mpp_x() > 0;
  set_mpp_action_->setEnabled(view_->has_slide() && !file_has_mpp);
  if (!view_->has_slide()) {
    set_mpp_action_->setToolTip(tr("Set the microns per pixel: open a slide first"));
  } else if (file_has_mpp) {
    set_mpp_action_->setToolTip(tr("This slide's file gives its microns per pixel (%1 µm)")
                                    .arg(*view_->document().slide->mpp_x(), 0, 'g', 4));
  } else {
    set_mpp_action_->setToolTip(
        tr("This slide has no microns per pixel (mpp) in its file: enter it (µm per level-0 "
           "pixel) for the scale bar, magnification, cursor readout and ruler while it is open"));
  }
  for (size_t i = 0; i < magnification_actions_.size(); ++i) {
    QAction* action = magnification_actions_[i];
    const double preset = kMagnificationPresets[i];
    action->setEnabled(known);
    if (!view_->has_slide()) {
      action->setToolTip(tr("%1×: open a slide first").arg(preset));
    } else if (!known) {
      action->setToolTip(tr("%1×: unavailable, this slide has no microns per pixel (mpp), so its "
                            "magnification is unknown; Tools ▸ Set Microns per Pixel… enters it")
                             .arg(preset));
    } else {
      action->setToolTip(tr("Zoom to %1× (%2 µm per screen pixel) about the view's centre")
                             .arg(preset)
                             .arg(10.0 / preset, 0, 'g', 3));
    }
  }
}

void MainWindow::update_roi_actions() {
  const bool any = !view_->rois().empty();
  save_roi_action_->setEnabled(any);
  clear_rois_action_->setEnabled(any);
}

bool MainWindow::request_mpp() {
  if (!view_->has_slide() || !set_mpp_action_->isEnabled()) return false;
  const std::optional<double> mpp = prompts().number(
      this, tr("Microns per pixel of %1").arg(QFileInfo(slide_path_).fileName()),
      tr("This slide's file has no microns per pixel (mpp). µm per level-0 pixel (about 0.25 "
         "at 40×, 0.5 at 20×), used while the slide is open:"),
      view_->mpp().value_or(0.5), 0.001, 100, 4);
  if (!mpp || !(*mpp > 0)) return false;
  view_->set_mpp(*mpp);
  // The manifest shown holds the slide: its row takes the mpp too, for training and heatmaps,
  // once Save Manifest writes it.
  DatasetModel* rows = dataset_->model();
  const int row = rows->find(slide_path_);
  if (row >= 0 &&
      rows->setData(rows->index(row, DatasetModel::kMpp), QString::number(*mpp, 'g', 6))) {
    statusBar()->showMessage(
        tr("%1: %2 µm per pixel, also in its manifest row (Save Manifest in the Dataset dock "
           "keeps it for training)")
            .arg(QFileInfo(slide_path_).fileName())
            .arg(*mpp, 0, 'g', 4));
    return true;
  }
  statusBar()->showMessage(
      tr("%1: %2 µm per pixel, until it is closed (a manifest's mpp column gives it to training)")
          .arg(QFileInfo(slide_path_).fileName())
          .arg(*mpp, 0, 'g', 4));
  return true;
}

bool MainWindow::request_save_roi() {
  if (view_->rois().empty()) {
    show_error(tr("Draw an ROI first (Tools ▸ Rectangle ROI or Polygon ROI)."));
    return false;
  }
  const QFileInfo slide(slide_path_);
  QSettings settings;
  const QString folder =
      settings.value(QLatin1String(kRoiFolderKey), slide.absolutePath()).toString();
  const QString path = prompts().save_file(
      this, tr("Save the ROI of %1 as GeoJSON").arg(slide.fileName()),
      QDir(folder).filePath(slide.completeBaseName() + QStringLiteral(".roi.geojson")),
      tr("GeoJSON (*.geojson *.json);;All files (*)"));
  if (path.isEmpty()) return false;
  settings.setValue(QLatin1String(kRoiFolderKey), QFileInfo(path).absolutePath());
  return save_roi(path);
}

bool MainWindow::save_roi(const QString& path) {
  if (!view_->has_slide() || view_->rois().empty()) {
    show_error(tr("Draw an ROI first (Tools ▸ Rectangle ROI or Polygon ROI)."));
    return false;
  }
  // With names and classes, as QuPath reads its annotations; io::read_roi takes the polygons.
  const QByteArray geojson = annotations_geojson(view_->annotations());
  const io::Level& base = view_->document().slide->level(0);
  try {
    // What training will read, read here first: a file written is a file a manifest can use.
    io::parse_roi(geojson.toStdString(), path.toStdString(), base.width, base.height);
  } catch (const Error& e) {
    show_error(tr("Cannot save the ROI: %1").arg(QString::fromStdString(e.what())));
    return false;
  }
  QSaveFile file(path);  // a temporary name, renamed on commit
  if (!file.open(QIODevice::WriteOnly) || file.write(geojson) != geojson.size() || !file.commit()) {
    show_error(tr("Cannot save the ROI to %1: %2").arg(path, file.errorString()));
    return false;
  }
  const size_t n = view_->rois().size();
  statusBar()->showMessage(
      tr("Saved %1 to %2 (level-0 pixels): a manifest's roi column trains on what %3 encloses")
          .arg(counted(static_cast<long long>(n), tr("ROI"), tr("ROIs")), path,
               n == 1 ? tr("it") : tr("they")));
  return true;
}

QString MainWindow::annotation_file(const QString& slide) const {
  const QFileInfo info(slide);
  // The slide's full path picks its file: two slides named alike in two folders stay apart. The
  // canonical one: the same file reached through "..", a link or a manifest's relative path is
  // one slide.
  const QByteArray hash =
      QCryptographicHash::hash(slide_key(slide).toUtf8(), QCryptographicHash::Sha1)
          .toHex()
          .left(10);
  const QString folder =
      annotations_folder_.isEmpty()
          ? QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation))
                .filePath(QStringLiteral("annotations"))
          : annotations_folder_;
  return QDir(folder).filePath(info.completeBaseName() + QLatin1Char('-') +
                               QString::fromLatin1(hash) + QStringLiteral(".geojson"));
}

void MainWindow::load_slide_annotations() {
  const QString path = annotation_file(slide_path_);
  QFile file(path);
  if (!file.exists()) return;
  try {
    if (!file.open(QIODevice::ReadOnly)) {
      throw Error(path.toStdString() + ": " + file.errorString().toStdString());
    }
    ParsedAnnotations parsed = parse_annotations(file.readAll(), path);
    const auto n = static_cast<int>(parsed.annotations.size());
    view_->load_annotations(std::move(parsed.annotations));
    statusBar()->showMessage(tr("%1 of %2 restored")
                                 .arg(counted(n, tr("annotation"), tr("annotations")),
                                      QFileInfo(slide_path_).fileName()));
  } catch (const std::exception& e) {
    // Kept aside, never overwritten by the next drawing: the pathologist's work is in it.
    const QString aside = path + QStringLiteral(".unreadable");
    QFile::remove(aside);
    QFile::rename(path, aside);
    show_error(
        tr("The saved annotations of %1 could not be read (%2); the file is kept as %3")
            .arg(QFileInfo(slide_path_).fileName(), QString::fromStdString(e.what()), aside));
  }
}

void MainWindow::save_slide_annotations() {
  if (loading_annotations_ || slide_path_.isEmpty() || !view_->has_slide()) return;
  const QString path = annotation_file(slide_path_);
  if (view_->annotations().empty()) {
    QFile::remove(path);
    return;
  }
  QDir().mkpath(QFileInfo(path).absolutePath());
  const QByteArray geojson = annotations_geojson(view_->annotations());
  QSaveFile file(path);  // a temporary name, renamed on commit: a crash leaves the last whole one
  if (!file.open(QIODevice::WriteOnly) || file.write(geojson) != geojson.size() || !file.commit()) {
    show_error(tr("Cannot keep the annotations of %1 in %2: %3")
                   .arg(QFileInfo(slide_path_).fileName(), path, file.errorString()));
  }
}

bool MainWindow::import_annotations(const QString& path) {
  if (!view_->has_slide()) {
    show_error(tr("Open a slide first: annotations are drawn over it."));
    return false;
  }
  QFile file(path);
  try {
    if (!file.open(QIODevice::ReadOnly)) {
      throw Error("cannot read " + path.toStdString() + ": " + file.errorString().toStdString());
    }
    const ParsedAnnotations parsed = parse_annotations(file.readAll(), path);
    if (parsed.annotations.empty()) {
      throw Error(path.toStdString() + " holds no polygon annotation");
    }
    std::vector<Annotation> list = view_->annotations();
    list.insert(list.end(), parsed.annotations.begin(), parsed.annotations.end());
    const auto n = static_cast<int>(parsed.annotations.size());
    view_->set_annotations(std::move(list),
                           tr("Import %1").arg(counted(n, tr("annotation"), tr("annotations"))));
    QString note =
        tr("Imported %1 from %2").arg(counted(n, tr("annotation"), tr("annotations")), path);
    if (parsed.holes_dropped > 0) {
      note += tr(" (%1 inside them not kept: the viewer keeps outlines)")
                  .arg(counted(parsed.holes_dropped, tr("hole"), tr("holes")));
    }
    if (parsed.skipped > 0) {
      note += tr("; %1 that %2 not polygons skipped")
                  .arg(counted(parsed.skipped, tr("feature"), tr("features")),
                       parsed.skipped == 1 ? tr("is") : tr("are"));
    }
    statusBar()->showMessage(note);
    return true;
  } catch (const std::exception& e) {
    show_error(QString::fromStdString(e.what()));
    return false;
  }
}

bool MainWindow::request_predictions(const QString& checkpoint) {
  const QString manifest = dataset_->manifest_path();
  if (manifest.isEmpty()) {
    show_error(tr("Open a manifest or a project first: its test slides are the ones predicted."));
    return false;
  }
  if (checkpoint.trimmed().isEmpty()) {
    show_error(tr("Choose a checkpoint (.h5) in the Training dock's Heatmap box first."));
    return false;
  }
  predictions_dock_->show();
  predictions_dock_->raise();
  return predictions_->run(checkpoint.trimmed(), manifest, QStringLiteral("test"));
}

int MainWindow::outline_heatmap(double threshold) {
  if (!view_->has_heatmap() || heatmap_.scores.empty()) {
    show_error(
        tr("Show a heatmap first (Heatmap of the viewer's slide, or File ▸ Open "
           "Heatmap…): its regions are what is outlined."));
    return 0;
  }
  const std::vector<QPolygonF> outlines =
      threshold_outlines(heatmap_, static_cast<float>(threshold));
  const QString score = QString::number(threshold, 'f', 2);
  if (outlines.empty()) {
    statusBar()->showMessage(
        tr("No region of the heatmap scores %1 or more: nothing outlined").arg(score));
    return 0;
  }
  std::vector<Annotation> list = view_->annotations();
  for (size_t i = 0; i < outlines.size(); ++i) {
    Annotation a;
    a.polygon = outlines[i];
    a.name = tr("%1 ≥ %2 (%3)").arg(heatmap_.class_name, score).arg(i + 1);
    // A heatmap TIFF read back does not say its class ("score"): those outlines have none.
    if (!heatmap_.approximate) a.classification = heatmap_.class_name;
    list.push_back(std::move(a));
  }
  const auto n = static_cast<int>(outlines.size());
  view_->set_annotations(std::move(list), tr("Outline %1 ≥ %2").arg(heatmap_.class_name, score));
  statusBar()->showMessage(
      tr("%1 of %2 ≥ %3 added to the annotations (Edit ▸ Undo removes "
         "them; File ▸ Save ROI… exports them as GeoJSON)")
          .arg(counted(n, tr("outline"), tr("outlines")), heatmap_.class_name, score));
  return n;
}

void MainWindow::update_heatmap_actions() {
  const QSignalBlocker block(heatmap_action_);  // the action follows the view, not the reverse
  heatmap_action_->setEnabled(view_->has_heatmap());
  heatmap_action_->setChecked(view_->heatmap_visible());
  clear_heatmap_action_->setEnabled(view_->has_heatmap());
}

QStringList MainWindow::recent_files() const {
  return QSettings().value(QLatin1String(kRecentFilesKey)).toStringList();
}

void MainWindow::set_recent_files(const QStringList& paths) {
  QSettings().setValue(QLatin1String(kRecentFilesKey), paths.mid(0, kMaxRecentFiles));
  update_recent_menu();
}

void MainWindow::add_recent_file(const QString& path) {
  if (path.isEmpty()) return;
  const QString absolute = QFileInfo(path).absoluteFilePath();
  QStringList paths = recent_files();
  paths.removeAll(absolute);
  paths.prepend(absolute);
  set_recent_files(paths);
}

void MainWindow::update_recent_menu() {
  // Not clear(): this runs inside an entry's triggered signal, whose action must outlive it.
  for (QAction* action : recent_menu_->actions()) {
    recent_menu_->removeAction(action);
    action->deleteLater();
  }
  const QStringList paths = recent_files();
  for (int i = 0; i < paths.size(); ++i) {
    const QString& path = paths[i];
    auto* action =
        recent_menu_->addAction(QStringLiteral("&%1 %2").arg(i + 1).arg(QFileInfo(path).fileName()),
                                this, [this, path] { open_recent(path); });
    action->setData(path);
    action->setToolTip(path);
    action->setStatusTip(path);
  }
  if (paths.isEmpty()) recent_menu_->addAction(tr("No recent files"))->setEnabled(false);
  recent_menu_->addSeparator();
  recent_menu_->addAction(tr("&Clear Recent Files"), this, [this] { set_recent_files({}); })
      ->setEnabled(!paths.isEmpty());
}

void MainWindow::open_recent(const QString& path) {
  if (!QFileInfo::exists(path)) {
    QStringList paths = recent_files();
    paths.removeAll(path);
    set_recent_files(paths);
    show_error(tr("%1 no longer exists; it was removed from File ▸ Open Recent.").arg(path));
    return;
  }
  open_path(path);
}

void MainWindow::open_path(const QString& path) {
  if (is_project(path)) {
    open_project(path);
  } else if (path.endsWith(QStringLiteral(".csv"), Qt::CaseInsensitive)) {
    open_manifest(path);
  } else {
    open_slide(path);
  }
}

bool MainWindow::new_project(const QString& folder) {
  const DatasetModel& rows = *dataset_->model();
  if (dataset_->manifest_path().isEmpty() || rows.rowCount() == 0) {
    show_error(
        tr("Open a manifest first (File ▸ Open Manifest…): a project starts from its "
           "slides, labels and splits."));
    return false;
  }
  try {
    const QString absolute = QDir(folder).absolutePath();
    const Project p =
        create_project(absolute, manifest_csv(rows.rows(), absolute, rows.metadata_columns()));
    // The annotations kept so far for these slides come along.
    int copied = 0;
    for (const DatasetRow& row : rows.rows()) {
      const QString from = annotation_file(row.slide);
      const QString to = QDir(p.annotations_folder()).filePath(QFileInfo(from).fileName());
      if (QFileInfo::exists(from) && QFile::copy(from, to)) ++copied;
    }
    if (!open_project(p.folder)) return false;
    statusBar()->showMessage(tr("Project %1 made from %2, with the annotations of %3")
                                 .arg(p.folder, QFileInfo(dataset_->manifest_path()).fileName(),
                                      counted(copied, tr("slide"), tr("slides"))));
    return true;
  } catch (const std::exception& e) {
    show_error(QString::fromStdString(e.what()));
    return false;
  }
}

bool MainWindow::open_project(const QString& path) {
  Project p;
  try {
    p = read_project(path);
  } catch (const std::exception& e) {
    show_error(QString::fromStdString(e.what()));
    return false;
  }
  if (!QFileInfo::exists(p.manifest_path())) {
    show_error(tr("Project %1: its manifest %2 is missing; put it back, or make the project again "
                  "(File ▸ New Project…)")
                   .arg(p.folder, p.manifest_path()));
    return false;
  }
  // The open slide's annotations stay where they were kept; from now on, the project's.
  save_slide_annotations();
  project_ = p;
  annotations_folder_ = p.annotations_folder();
  if (view_->has_slide()) load_slide_annotations();
  open_manifest(p.manifest_path());
  if (!training_->offer_run(p.last_run_path())) training_->set_output(p.next_run_folder());
  setWindowTitle(tr("%1 — Tessel").arg(p.name()));
  QSettings().setValue(QLatin1String(kLastProjectKey), p.folder);
  add_recent_file(p.file());
  statusBar()->showMessage(tr("Project %1 opened").arg(p.folder));
  return true;
}

void MainWindow::open_manifest(const QString& csv) {
  message_bar_->clear(QStringLiteral("manifest"));  // about the one shown before
  statusBar()->showMessage(tr("Opening %1…").arg(csv));
  dataset_->open_manifest(csv);
  training_->set_manifest(csv);  // the dataset shown is the one a run trains on
}

void MainWindow::open_slide(const QString& path) {
  const quint64 serial = ++serial_;
  opening_ = true;
  statusBar()->showMessage(tr("Opening %1…").arg(path));
  pool_.start([this, serial, path] {
    try {
      SlideDocument doc = open_slide_document(path.toStdString());
      QMetaObject::invokeMethod(
          this, [this, serial, path, doc = std::move(doc)] { show_document(serial, path, doc); },
          Qt::QueuedConnection);
    } catch (const std::exception& e) {
      const QString reason = QString::fromStdString(e.what());
      QMetaObject::invokeMethod(
          this,
          [this, serial, reason] {
            if (serial != serial_) return;
            opening_ = false;
            // The slide shown before stays; the message says why the new one is not.
            show_error(reason);
            if (!view_->has_slide()) view_->set_message(reason);
            emit slideFailed(reason);
          },
          Qt::QueuedConnection);
    }
  });
}

void MainWindow::show_document(quint64 serial, const QString& path, SlideDocument doc) {
  if (serial != serial_) return;
  opening_ = false;
  slide_path_ = path;
  last_error_.clear();
  const io::Slide& slide = *doc.slide;
  properties_->show_slide(doc.slide);
  overview_->set_overview(doc.overview, QSizeF(static_cast<double>(slide.level(0).width),
                                               static_cast<double>(slide.level(0).height)));
  const QString note = doc.tissue_note;
  loading_annotations_ = true;  // another slide's list emptied, then this one's: nothing to save
  view_->set_document(std::move(doc));
  load_slide_annotations();
  loading_annotations_ = false;
  import_annotations_action_->setEnabled(true);
  export_action_->setEnabled(true);
  update_magnification_actions();
  cursor_label_->clear();
  overview_->set_viewport(view_->visible_level0_rect());
  setWindowTitle(
      project_
          ? QStringLiteral("%1 — %2 — Tessel").arg(QFileInfo(path).fileName(), project_->name())
          : QStringLiteral("%1 — Tessel").arg(QFileInfo(path).fileName()));
  // A slide whose file has no mpp takes its manifest row's (the dataset panel's, a project's).
  const int row = dataset_->model()->find(path);
  if (const std::optional<double> mpp = dataset_->model()->mpp(row); mpp && !view_->mpp()) {
    view_->set_mpp(*mpp);
    update_magnification_actions();
    statusBar()->showMessage(tr("Opened %1 · tissue: %2 · %3 µm per pixel from the manifest")
                                 .arg(path, note)
                                 .arg(*mpp, 0, 'g', 4));
  } else if (view_->mpp()) {
    statusBar()->showMessage(tr("Opened %1 · tissue: %2").arg(path, note));
  } else {
    statusBar()->showMessage(
        tr("Opened %1 · tissue: %2 · this slide has no microns per pixel (mpp): lengths are in "
           "level-0 px; Set mpp… (Tools ▸ Set Microns per Pixel…) enters it")
            .arg(path, note));
  }
  add_recent_file(path);
  emit slideOpened(path);
}

void MainWindow::set_prompts(Prompts* prompts) {
  prompts_ = prompts;
  training_->set_prompts(prompts);
}

bool MainWindow::request_heatmap(const QString& checkpoint) {
  if (slide_path_.isEmpty() || !view_->has_slide()) {
    show_error(tr("Open a slide in the viewer first: the heatmap is drawn over it."));
    emit heatmapFailed(last_error_);
    return false;
  }
  // Never the checkpoint's run folder unasked: a heatmap there replaced an earlier one silently.
  QSettings settings;
  const QString start =
      project_ ? project_->heatmaps_folder()
               : settings
                     .value(QLatin1String(kHeatmapFolderKey),
                            QStandardPaths::writableLocation(QStandardPaths::HomeLocation))
                     .toString();
  const QString folder = prompts().folder(
      this, tr("Folder for the heatmap of %1").arg(QFileInfo(slide_path_).fileName()), start);
  if (folder.isEmpty()) return false;
  settings.setValue(QLatin1String(kHeatmapFolderKey), folder);
  // make_heatmap's names: <slide stem>.heatmap.tif, .png, .geojson.
  const QString stem = QFileInfo(slide_path_).completeBaseName();
  QStringList existing;
  for (const char* suffix : {".heatmap.tif", ".heatmap.png", ".heatmap.geojson"}) {
    const QString name = stem + QLatin1String(suffix);
    if (QFileInfo::exists(QDir(folder).filePath(name))) existing << name;
  }
  if (!existing.isEmpty() &&
      !prompts().confirm(
          this, tr("Replace the heatmap?"),
          tr("%1 already holds %2. Replace?").arg(folder, existing.join(QStringLiteral(", "))))) {
    statusBar()->showMessage(tr("Heatmap not computed: %1 was kept").arg(existing.join(", ")));
    return false;
  }
  show_heatmap(checkpoint, folder);
  return true;
}

void MainWindow::show_heatmap(const QString& checkpoint, const QString& out_dir) {
  if (slide_path_.isEmpty() || !view_->has_slide()) {
    show_error(tr("Open a slide in the viewer first: the heatmap is drawn over it."));
    emit heatmapFailed(last_error_);
    return;
  }
  HeatmapJob job{checkpoint, slide_path_, out_dir, std::nullopt, serial_};
  // The mpp entered for a slide whose file has none (Set mpp…) is the heatmap's too.
  if (view_->mpp_was_set()) job.base_mpp = view_->mpp();
  if (heatmaps_.busy()) {
    statusBar()->showMessage(tr("The heatmap of %1 waits until the one running ends")
                                 .arg(QFileInfo(slide_path_).fileName()));
  }
  heatmaps_.add(std::move(job));
}

void MainWindow::update_heatmap_status() {
  const bool busy = heatmaps_.busy();
  heatmap_status_->setVisible(busy);
  heatmap_bar_->setVisible(busy);
  cancel_heatmap_->setVisible(busy);
  if (!busy) return;
  heatmap_status_->setText(heatmaps_.status());
  QStringList waiting;
  for (const HeatmapJob& job : heatmaps_.waiting()) waiting << QFileInfo(job.slide).fileName();
  heatmap_status_->setToolTip(waiting.isEmpty() ? QString()
                                                : tr("Waiting: %1").arg(waiting.join(", ")));
  // Within the running segment: the engine's tile of its partition (busy while planning).
  const HeatmapProgress* progress = heatmaps_.progress();
  if (progress == nullptr || progress->segment < 0 || progress->tiles <= 0) {
    heatmap_bar_->setRange(0, 0);
  } else {
    heatmap_bar_->setRange(0, static_cast<int>(progress->tiles));
    heatmap_bar_->setValue(static_cast<int>(progress->tile + 1));
  }
}

void MainWindow::heatmap_finished(const HeatmapJob& job, const HeatmapOverlay& overlay) {
  if (job.serial != serial_) {
    // Another slide is shown now: the files are written, the overlay would lie over it.
    statusBar()->showMessage(tr("Heatmap of %1 written to %2 (not shown: another slide is open)")
                                 .arg(QFileInfo(job.slide).fileName(), job.out_dir));
    return;
  }
  display_heatmap(overlay);
  statusBar()->showMessage(
      tr("Heatmap of %1 (also written to %2)")
          .arg(overlay.class_name, QString::fromStdString(overlay.png.string())));
  emit heatmapShown(overlay.class_name);
}

void MainWindow::display_heatmap(HeatmapOverlay overlay) {
  view_->set_heatmap(overlay.image, overlay.level0, overlay.class_name);
  view_->set_heatmap_opacity(training_->opacity_slider()->value() / 100.0);
  training_->set_heatmap_legend(overlay.class_name);
  heatmap_ = std::move(overlay);  // after set_heatmap, whose heatmapChanged clears it first
}

std::optional<float> MainWindow::heatmap_score_at(QPointF level0) const {
  if (!view_->heatmap_visible()) return std::nullopt;
  return heatmap_.score_at(level0);
}

void MainWindow::open_heatmap(const QString& tiff) {
  if (slide_path_.isEmpty() || !view_->has_slide()) {
    show_error(tr("Open a slide in the viewer first: the heatmap is drawn over it."));
    emit heatmapFailed(last_error_);
    return;
  }
  const quint64 serial = serial_;
  const io::Level& level0 = view_->document().slide->level(0);
  statusBar()->showMessage(tr("Reading the heatmap %1…").arg(tiff));
  pool_.start([this, serial, tiff, width = level0.width, height = level0.height] {
    try {
      HeatmapOverlay overlay = load_heatmap_tiff(tiff.toStdString(), width, height);
      QMetaObject::invokeMethod(
          this,
          [this, serial, tiff, overlay = std::move(overlay)] {
            if (serial != serial_) return;  // another slide is shown now
            display_heatmap(overlay);
            statusBar()->showMessage(tr("Heatmap %1 over %2 (scores read from its colours)")
                                         .arg(tiff, QFileInfo(slide_path_).fileName()));
            emit heatmapShown(overlay.class_name);
          },
          Qt::QueuedConnection);
    } catch (const std::exception& e) {
      const QString reason = QString::fromStdString(e.what());
      QMetaObject::invokeMethod(
          this,
          [this, reason] {
            show_error(reason);
            emit heatmapFailed(reason);
          },
          Qt::QueuedConnection);
    }
  });
}

bool MainWindow::export_view(const QString& png) {
  if (!view_->has_slide()) {
    show_error(tr("Open a slide first: there is no view to export."));
    return false;
  }
  const QImage image = view_->render_view();
  QSaveFile file(png);  // a temporary name, renamed on commit: a failed export leaves no half PNG
  if (!file.open(QIODevice::WriteOnly) || !image.save(&file, "PNG") || !file.commit()) {
    show_error(tr("Cannot export the view to %1: %2").arg(png, file.errorString()));
    return false;
  }
  statusBar()->showMessage(
      tr("Exported the view to %1 (%2 × %3)").arg(png).arg(image.width()).arg(image.height()));
  return true;
}

void MainWindow::show_error(const QString& message) {
  last_error_ = message;
  message_bar_->show_error(message);
  statusBar()->showMessage(message);
}

void MainWindow::restore_session() {
  QSettings settings;
  restoreGeometry(settings.value(QLatin1String(kGeometryKey)).toByteArray());
  restoreState(settings.value(QLatin1String(kLayoutKey)).toByteArray());
  const QString project = settings.value(QLatin1String(kLastProjectKey)).toString();
  if (!project.isEmpty() && is_project(project) && open_project(project)) {
    if (training_->resuming()) {
      training_dock_->show();
      training_dock_->raise();
    }
  } else if (training_->restore_last_run()) {
    training_dock_->show();
    training_dock_->raise();
    statusBar()->showMessage(training_->message());
  }
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (!training_->running()) {
    QSettings settings;
    settings.setValue(QLatin1String(kGeometryKey), saveGeometry());
    settings.setValue(QLatin1String(kLayoutKey), saveState());
    event->accept();
    return;
  }
  if (!quit_after_run_ &&
      !prompts().confirm(this, tr("Quit during a run?"),
                         tr("A training run is going. Stop it at the next tile (its checkpoint "
                            "is written, and Resume continues it) and quit?"))) {
    event->ignore();
    return;
  }
  quit_after_run_ = true;
  training_->stop();
  statusBar()->showMessage(tr("Stopping the run, then quitting…"));
  event->ignore();  // closed by the run's end (the constructor's runFinished / runFailed)
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  if (event->mimeData()->hasUrls()) event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  for (const QUrl& url : event->mimeData()->urls()) {
    if (url.isLocalFile()) {
      open_path(url.toLocalFile());
      event->acceptProposedAction();
      return;
    }
  }
}

}  // namespace tessel::gui
