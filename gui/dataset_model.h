// The dataset table: one row per slide of a manifest, in CSV order, with its thumbnail, label,
// split, mpp and status (ok, missing, or unreadable with OpenSlide's reason). Label, split and
// mpp are edited in place and written back as the manifest (manifest_csv).
#pragma once

#include <QAbstractTableModel>
#include <QImage>
#include <QString>

#include <map>
#include <optional>
#include <vector>

#include "io/manifest.h"

namespace tessel::gui {

struct DatasetRow {
  enum class Status { kOk, kMissing, kUnreadable };
  QString slide;  // absolute path
  QString label;
  QString split;  // "train", "val", "test"
  QString patient;
  std::map<QString, QString> metadata;  // the other columns by header name, `mpp` and `roi` too
  Status status = Status::kOk;
  QString reason;  // why a slide is missing or unreadable
  int line = 0;    // CSV line
  QImage thumbnail;
};

QString to_string(DatasetRow::Status status);  // "ok", "missing", "unreadable"

// The manifest CSV of `rows` (docs/manifest.md): slide, label, split, patient, mpp, then the
// other metadata columns in `columns`' order. A slide under `folder` (the CSV's) is written
// relative to it, any other as its absolute path; fields are quoted where CSV needs it.
QByteArray manifest_csv(const std::vector<DatasetRow>& rows, const QString& folder,
                        const QStringList& columns);

// A slide's path as one key for the file, however the path was written (through "..", a link, a
// manifest's relative path): canonical where the file exists, else absolute.
QString slide_key(const QString& path);

// Whether `text` may stand in a row's column (`Label`, `Split`, `mpp`): empty when it may,
// otherwise why not ("the split is train, val or test").
QString check_cell(int column, const QString& text);

// The rows of a loaded (and ideally check_slides'd) manifest: its entries as ok, its skipped
// slides as missing (no such file) or unreadable, with the reason of their problem.
std::vector<DatasetRow> dataset_rows(const io::Manifest& manifest);

class DatasetModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { kThumbnail, kSlide, kLabel, kSplit, kMpp, kStatus, kColumnCount };
  static constexpr int kThumbnailSidePx = 48;
  static constexpr int kPathRole = Qt::UserRole + 1;  // the slide's absolute path

  using QAbstractTableModel::QAbstractTableModel;

  // `columns`: the manifest's metadata columns in header order (io::Manifest::metadata_columns).
  void set_rows(std::vector<DatasetRow> rows, QStringList columns = {});
  const std::vector<DatasetRow>& rows() const { return rows_; }
  const QStringList& metadata_columns() const { return columns_; }
  bool modified() const { return modified_; }        // an edit since set_rows
  QString last_refusal() const { return refusal_; }  // why the last edit was refused
  void set_thumbnail(int row, const QImage& thumbnail);
  const DatasetRow& row(int index) const { return rows_.at(index); }
  // The row of `slide` (the same file, however its path is written); -1: not in the manifest.
  int find(const QString& slide) const;
  // The row's mpp column as a number; none when empty or not a positive number.
  std::optional<double> mpp(int row) const;
  int count(DatasetRow::Status status) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  // Label, split and mpp; a value check_cell refuses is not taken (rowEditRefused says why).
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;

 signals:
  void rowEdited(int row);
  void rowEditRefused(QString reason);

 private:
  std::vector<DatasetRow> rows_;
  QStringList columns_;
  mutable std::vector<QString> keys_;  // slide_key of each row, made by find()
  bool modified_ = false;
  QString refusal_;
};

}  // namespace tessel::gui
