// The dataset table: one row per slide of a manifest, in CSV order, with its thumbnail, label,
// split and status (ok, missing, or unreadable with OpenSlide's reason).
#pragma once

#include <QAbstractTableModel>
#include <QImage>
#include <QString>

#include <vector>

#include "io/manifest.h"

namespace tessel::gui {

struct DatasetRow {
  enum class Status { kOk, kMissing, kUnreadable };
  QString slide;  // absolute path
  QString label;
  QString split;  // "train", "val", "test"
  Status status = Status::kOk;
  QString reason;  // why a slide is missing or unreadable
  int line = 0;    // CSV line
  QImage thumbnail;
};

QString to_string(DatasetRow::Status status);  // "ok", "missing", "unreadable"

// The rows of a loaded (and ideally check_slides'd) manifest: its entries as ok, its skipped
// slides as missing (no such file) or unreadable, with the reason of their problem.
std::vector<DatasetRow> dataset_rows(const io::Manifest& manifest);

class DatasetModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { kThumbnail, kSlide, kLabel, kSplit, kStatus, kColumnCount };
  static constexpr int kThumbnailSidePx = 48;
  static constexpr int kPathRole = Qt::UserRole + 1;  // the slide's absolute path

  using QAbstractTableModel::QAbstractTableModel;

  void set_rows(std::vector<DatasetRow> rows);
  void set_thumbnail(int row, const QImage& thumbnail);
  const DatasetRow& row(int index) const { return rows_.at(index); }
  int count(DatasetRow::Status status) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  std::vector<DatasetRow> rows_;
};

}  // namespace tessel::gui
