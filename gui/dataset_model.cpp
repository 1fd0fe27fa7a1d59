#include "gui/dataset_model.h"

#include <QBrush>
#include <QColor>
#include <QDir>
#include <QFileInfo>
#include <QPixmap>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "pipelines/run_files.h"

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
    row.patient = QString::fromStdString(entry.patient);
    for (const auto& [name, value] : entry.metadata) {
      row.metadata[QString::fromStdString(name)] = QString::fromStdString(value);
    }
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

QByteArray manifest_csv(const std::vector<DatasetRow>& rows, const QString& folder,
                        const QStringList& columns) {
  QStringList header = {QStringLiteral("slide"), QStringLiteral("label"), QStringLiteral("split"),
                        QStringLiteral("patient"), QStringLiteral("mpp")};
  for (const QString& c : columns) {
    if (!header.contains(c)) header << c;
  }
  const QDir dir(folder);
  const auto utf8 = [](const QString& text) { return text.toStdString(); };
  std::vector<std::string> names;
  for (const QString& name : header) names.push_back(utf8(name));
  std::string csv = pipelines::csv_row(names) + "\n";
  for (const DatasetRow& row : rows) {
    const QString relative = dir.relativeFilePath(row.slide);
    const bool inside = !relative.startsWith(QStringLiteral("../")) &&
                        relative != QLatin1String("..") && !QDir::isAbsolutePath(relative);
    std::vector<std::string> fields = {utf8(inside ? relative : row.slide), utf8(row.label),
                                       utf8(row.split), utf8(row.patient)};
    for (qsizetype i = 4; i < header.size(); ++i) {
      const auto it = row.metadata.find(header[i]);
      fields.push_back(it == row.metadata.end() ? std::string() : utf8(it->second));
    }
    csv += pipelines::csv_row(fields) + "\n";
  }
  return QByteArray::fromStdString(csv);
}

QString check_cell(int column, const QString& text) {
  const QString t = text.trimmed();
  switch (column) {
    case DatasetModel::kLabel:
      if (t.isEmpty()) return QStringLiteral("a slide needs a label");
      if (t.contains(QLatin1Char('\n'))) return QStringLiteral("a label is one line");
      return {};
    case DatasetModel::kSplit:
      if (t != QLatin1String("train") && t != QLatin1String("val") && t != QLatin1String("test")) {
        return QStringLiteral("the split is train, val or test");
      }
      return {};
    case DatasetModel::kMpp: {
      if (t.isEmpty()) return {};  // the file's own
      bool ok = false;
      const double mpp = t.toDouble(&ok);
      if (!ok || !std::isfinite(mpp) || mpp <= 0) {
        return QStringLiteral("mpp is a positive number of microns per pixel, such as 0.25");
      }
      return {};
    }
    default:
      return QStringLiteral("only the label, the split and the mpp are edited here");
  }
}

void DatasetModel::set_rows(std::vector<DatasetRow> rows, QStringList columns) {
  beginResetModel();
  rows_ = std::move(rows);
  keys_.clear();
  columns_ = std::move(columns);
  modified_ = false;
  endResetModel();
}

QString slide_key(const QString& path) {
  const QFileInfo info(path);
  const QString canonical = info.canonicalFilePath();
  return canonical.isEmpty() ? info.absoluteFilePath() : canonical;
}

int DatasetModel::find(const QString& slide) const {
  // The rows' keys once per manifest: each is a file system lookup, and a slide opens on the UI
  // thread.
  if (keys_.size() != rows_.size()) {
    keys_.clear();
    for (const DatasetRow& row : rows_) keys_.push_back(slide_key(row.slide));
  }
  const auto it = std::find(keys_.begin(), keys_.end(), slide_key(slide));
  return it == keys_.end() ? -1 : static_cast<int>(it - keys_.begin());
}

std::optional<double> DatasetModel::mpp(int row) const {
  if (row < 0 || row >= static_cast<int>(rows_.size())) return std::nullopt;
  const auto it = rows_[static_cast<size_t>(row)].metadata.find(QStringLiteral("mpp"));
  if (it == rows_[static_cast<size_t>(row)].metadata.end()) return std::nullopt;
  bool ok = false;
  const double v = it->second.trimmed().toDouble(&ok);
  if (!ok || !std::isfinite(v) || v <= 0) return std::nullopt;
  return v;
}

Qt::ItemFlags DatasetModel::flags(const QModelIndex& index) const {
  Qt::ItemFlags f = QAbstractTableModel::flags(index);
  const int c = index.column();
  if (c == kLabel || c == kSplit || c == kMpp) f |= Qt::ItemIsEditable;
  return f;
}

bool DatasetModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (role != Qt::EditRole || !index.isValid() || index.row() >= static_cast<int>(rows_.size())) {
    return false;
  }
  const QString text = value.toString().trimmed();
  refusal_ = check_cell(index.column(), text);
  if (!refusal_.isEmpty()) {
    emit rowEditRefused(refusal_);
    return false;
  }
  DatasetRow& row = rows_[index.row()];
  QString& cell = index.column() == kLabel   ? row.label
                  : index.column() == kSplit ? row.split
                                             : row.metadata[QStringLiteral("mpp")];
  if (cell == text) return true;
  cell = text;
  modified_ = true;
  emit dataChanged(index, index, {Qt::DisplayRole, Qt::EditRole});
  emit rowEdited(index.row());
  return true;
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
  if (role == Qt::DisplayRole || role == Qt::EditRole) {
    switch (column) {
      case kSlide:
        return QFileInfo(row.slide).fileName();
      case kLabel:
        return row.label;
      case kSplit:
        return row.split;
      case kMpp: {
        const auto it = row.metadata.find(QStringLiteral("mpp"));
        return it == row.metadata.end() ? QString() : it->second;
      }
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
    case kMpp:
      return tr("mpp");
    case kStatus:
      return tr("Status");
    default:
      return {};
  }
}

}  // namespace tessel::gui
