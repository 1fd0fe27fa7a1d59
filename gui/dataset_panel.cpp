#include "gui/dataset_panel.h"

#include <QFileInfo>
#include <QHeaderView>
#include <QSaveFile>
#include <QVBoxLayout>

#include <exception>
#include <sstream>

#include "gui/slide_document.h"
#include "io/thumbnail.h"

namespace tessel::gui {

DatasetPanel::DatasetPanel(QWidget* parent) : QWidget(parent) {
  pool_.setMaxThreadCount(2);
  message_ =
      new QLabel(tr("Open a manifest (File ▸ Open Manifest…): a CSV of slides and labels."), this);
  message_->setWordWrap(true);
  message_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  table_ = new QTableView(this);
  table_->setModel(&model_);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  // A click on the selected row's label, split or mpp edits it (a double-click opens the slide).
  table_->setEditTriggers(QAbstractItemView::SelectedClicked | QAbstractItemView::EditKeyPressed);
  table_->setIconSize(QSize(DatasetModel::kThumbnailSidePx, DatasetModel::kThumbnailSidePx));
  table_->verticalHeader()->setDefaultSectionSize(DatasetModel::kThumbnailSidePx + 6);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setColumnWidth(DatasetModel::kThumbnail, DatasetModel::kThumbnailSidePx + 36);
  table_->setColumnWidth(DatasetModel::kSlide, 220);
  save_ = new QPushButton(tr("Save Manifest"), this);
  save_->setToolTip(tr("Write the labels, splits and mpp edited above to the manifest CSV"));
  save_->setEnabled(false);
  connect(save_, &QPushButton::clicked, this, [this] { save_manifest(); });
  connect(&model_, &DatasetModel::rowEdited, this, [this] {
    update_save();
    message_->setText(tr("Edited: Save Manifest writes the changes to %1").arg(path_));
  });
  connect(&model_, &DatasetModel::rowEditRefused, this,
          [this](const QString& reason) { message_->setText(tr("Not changed: %1").arg(reason)); });
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(message_);
  layout->addWidget(table_, 1);
  layout->addWidget(save_, 0, Qt::AlignRight);
  connect(table_, &QTableView::doubleClicked, this, [this](const QModelIndex& index) {
    const DatasetRow& row = model_.row(index.row());
    emit slideActivated(row.slide);
  });
}

DatasetPanel::~DatasetPanel() {
  // Workers post results to this object; let them finish before it goes.
  pool_.clear();
  pool_.waitForDone();
}

void DatasetPanel::open_manifest(const QString& csv) {
  const quint64 serial = ++serial_;
  path_ = csv;
  loading_ = true;
  thumbnails_pending_ = 0;
  model_.set_rows({});
  message_->setText(tr("Reading %1 and opening its slides…").arg(csv));
  pool_.start([this, serial, csv] {
    try {
      io::Manifest manifest = io::load_manifest(csv.toStdString());
      io::check_slides(manifest);
      QMetaObject::invokeMethod(
          this, [this, serial, manifest = std::move(manifest)] { show_manifest(serial, manifest); },
          Qt::QueuedConnection);
    } catch (const std::exception& e) {
      const QString reason = QString::fromStdString(e.what());
      QMetaObject::invokeMethod(
          this,
          [this, serial, reason] {
            if (serial != serial_) return;
            loading_ = false;
            message_->setText(tr("Cannot open the manifest: %1").arg(reason));
            emit manifestFailed(reason);
          },
          Qt::QueuedConnection);
    }
  });
}

void DatasetPanel::show_manifest(quint64 serial, const io::Manifest& manifest) {
  if (serial != serial_) return;
  loading_ = false;
  QStringList columns;
  for (const std::string& c : manifest.metadata_columns) columns << QString::fromStdString(c);
  model_.set_rows(dataset_rows(manifest), columns);
  update_save();
  QString summary = tr("%1: %2 slides, %3 ok, %4 missing, %5 unreadable; classes: %6")
                        .arg(QString::fromStdString(manifest.path.filename().string()))
                        .arg(model_.rowCount())
                        .arg(model_.count(DatasetRow::Status::kOk))
                        .arg(model_.count(DatasetRow::Status::kMissing))
                        .arg(model_.count(DatasetRow::Status::kUnreadable))
                        .arg(QString::fromStdString([&] {
                          std::string names;
                          for (const std::string& c : manifest.classes) {
                            names += (names.empty() ? "" : ", ") + c;
                          }
                          return names;
                        }()));
  const std::string unusable = manifest.unusable_reason();
  if (!unusable.empty()) {
    std::ostringstream problems;
    for (const io::ManifestProblem& problem : manifest.problems) {
      if (problem.severity == io::ManifestProblem::Severity::kError) problems << "\n" << problem;
    }
    const QString reason = QString::fromStdString(unusable + problems.str());
    message_->setText(tr("This manifest cannot be used for training: %1").arg(reason));
    emit manifestFailed(reason);
  } else {
    message_->setText(summary);
  }
  load_thumbnails(serial);
  emit manifestLoaded(summary);
}

void DatasetPanel::update_save() { save_->setEnabled(model_.modified() && !loading_); }

bool DatasetPanel::save_manifest() {
  if (path_.isEmpty() || !model_.modified()) return false;
  const QByteArray csv =
      manifest_csv(model_.rows(), QFileInfo(path_).absolutePath(), model_.metadata_columns());
  QSaveFile file(path_);  // a temporary name, renamed on commit: never half a manifest
  if (!file.open(QIODevice::WriteOnly) || file.write(csv) != csv.size() || !file.commit()) {
    message_->setText(tr("Cannot save the manifest %1: %2").arg(path_, file.errorString()));
    return false;
  }
  // Read back as a run will read it: the classes and problems as they now are.
  open_manifest(path_);
  emit manifestSaved(path_);
  return true;
}

void DatasetPanel::load_thumbnails(quint64 serial) {
  for (int i = 0; i < model_.rowCount(); ++i) {
    const DatasetRow& row = model_.row(i);
    if (row.status != DatasetRow::Status::kOk) continue;
    ++thumbnails_pending_;
    pool_.start([this, serial, i, path = row.slide] {
      QImage image;
      try {
        const io::Slide slide(path.toStdString());
        image = to_qimage(io::thumbnail(slide, DatasetModel::kThumbnailSidePx));
      } catch (const std::exception&) {
        // check_slides read this slide a moment ago; if it fails now the row keeps no picture.
      }
      QMetaObject::invokeMethod(
          this,
          [this, serial, i, image = std::move(image)] {
            if (serial != serial_) return;
            --thumbnails_pending_;
            if (!image.isNull()) model_.set_thumbnail(i, image);
          },
          Qt::QueuedConnection);
    });
  }
}

}  // namespace tessel::gui
