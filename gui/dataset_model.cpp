#include "gui/dataset_model.h"

#include <QBrush>
#include <QColor>
#include <QFileInfo>
#include <QPixmap>

#include <algorithm>
#include <filesystem>

namespace tessel::gui {

QString to_string(DatasetRow::Status status) {
  switch (status) {
    case DatasetRow::Status::kOk:
      return QStringLiteral("ok");
    case DatasetRow::Status::kMissing:
      return QStringLiteral("missing");
    case DatasetRow::Status::kUnreadable:
      return QStringLiteral("unreadable");
  }
  return {};
}

std::vector<DatasetRow> dataset_rows(const io::Manifest& manifest) {
  const auto row_of = [](const io::ManifestEntry& entry) {
    DatasetRow row;
    row.slide = QString::fromStdString(entry.slide.string());
    row.label = QString::fromStdString(entry.label);
    row.split = QString::fromLatin1(io::to_string(entry.split));
    row.line = entry.line;
    return row;
  };
  std::vector<DatasetRow> rows;
  for (const io::ManifestEntry& entry : manifest.entries) rows.push_back(row_of(entry));
  for (const io::ManifestEntry& entry : manifest.skipped) {
    DatasetRow row = row_of(entry);
    std::error_code ec;
    row.status = std::filesystem::exists(entry.slide, ec) ? DatasetRow::Status::kUnreadable
                                                          : DatasetRow::Status::kMissing;
    for (const io::ManifestProblem& problem : manifest.problems) {
      if (problem.line == entry.line && problem.severity == io::ManifestProblem::Severity::kSkip) {
        row.reason = QString::fromStdString(problem.reason);
      }
    }
    rows.push_back(std::move(row));
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const DatasetRow& a, const DatasetRow& b) { return a.line < b.line; });
  return rows;
}

void DatasetModel::set_rows(std::vector<DatasetRow> rows) {
  beginResetModel();
  rows_ = std::move(rows);
  endResetModel();
}

void DatasetModel::set_thumbnail(int row, const QImage& thumbnail) {
  if (row < 0 || row >= static_cast<int>(rows_.size())) return;
  rows_[row].thumbnail = thumbnail;
  emit dataChanged(index(row, kThumbnail), index(row, kThumbnail), {Qt::DecorationRole});
}

int DatasetModel::count(DatasetRow::Status status) const {
  return static_cast<int>(std::count_if(rows_.begin(), rows_.end(),
                                        [&](const DatasetRow& r) { return r.status == status; }));
}

int DatasetModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

int DatasetModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant DatasetModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= static_cast<int>(rows_.size())) return {};
  const DatasetRow& row = rows_[index.row()];
  if (role == kPathRole) return row.slide;
  const int column = index.column();
  if (role == Qt::DecorationRole && column == kThumbnail && !row.thumbnail.isNull()) {
    return row.thumbnail;
  }
  if (role == Qt::DisplayRole) {
    switch (column) {
      case kSlide:
        return QFileInfo(row.slide).fileName();
      case kLabel:
        return row.label;
      case kSplit:
        return row.split;
      case kStatus:
        return row.reason.isEmpty() ? to_string(row.status)
                                    : to_string(row.status) + QStringLiteral(": ") + row.reason;
      default:
        return {};
    }
  }
  if (role == Qt::ToolTipRole) {
    if (column == kStatus && !row.reason.isEmpty()) return row.reason;
    return row.slide;
  }
  if (role == Qt::ForegroundRole && column == kStatus && row.status != DatasetRow::Status::kOk) {
    return QBrush(QColor(190, 40, 30));
  }
  if (role == Qt::SizeHintRole && column == kThumbnail) {
    return QSize(kThumbnailSidePx + 4, kThumbnailSidePx + 4);
  }
  return {};
}

QVariant DatasetModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole || orientation != Qt::Horizontal) return {};
  switch (section) {
    case kThumbnail:
      return tr("Thumbnail");
    case kSlide:
      return tr("Slide");
    case kLabel:
      return tr("Label");
    case kSplit:
      return tr("Split");
    case kStatus:
      return tr("Status");
    default:
      return {};
  }
}

}  // namespace tessel::gui
