#include "gui/dataset_panel.h"

#include <QHeaderView>
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
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setIconSize(QSize(DatasetModel::kThumbnailSidePx, DatasetModel::kThumbnailSidePx));
  table_->verticalHeader()->setDefaultSectionSize(DatasetModel::kThumbnailSidePx + 6);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setColumnWidth(DatasetModel::kThumbnail, DatasetModel::kThumbnailSidePx + 36);
  table_->setColumnWidth(DatasetModel::kSlide, 220);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(message_);
  layout->addWidget(table_, 1);
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
  model_.set_rows(dataset_rows(manifest));
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
