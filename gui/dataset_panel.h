// The dataset panel: opens a manifest CSV off the UI thread (load_manifest, then check_slides,
// which opens every slide), lists its slides in a DatasetModel, loads their thumbnails in the
// background and reports a double-clicked slide. A manifest that cannot be used says why above
// the table; its readable rows are still listed. Labels, splits and mpp edited in the table are
// written back to the CSV with Save Manifest.
#pragma once

#include <QLabel>
#include <QPushButton>
#include <QString>
#include <QTableView>
#include <QThreadPool>
#include <QWidget>

#include "gui/dataset_model.h"

namespace tessel::gui {

class DatasetPanel : public QWidget {
  Q_OBJECT

 public:
  explicit DatasetPanel(QWidget* parent = nullptr);
  ~DatasetPanel() override;

  void open_manifest(const QString& csv);  // returns at once; manifestLoaded or failed follows
  bool busy() const { return loading_ || thumbnails_pending_ > 0; }
  const QString& manifest_path() const { return path_; }
  QString message() const { return message_->text(); }
  DatasetModel* model() { return &model_; }
  QTableView* table() { return table_; }
  QPushButton* save_button() { return save_; }
  // Writes the edited rows to the manifest (atomically) and reads it back; false when there was
  // nothing to save or it could not be written (the message says why).
  bool save_manifest();

 signals:
  void manifestLoaded(QString summary);
  void manifestFailed(QString message);
  void slideActivated(QString path);
  void manifestSaved(QString path);

 private:
  void show_manifest(quint64 serial, const io::Manifest& manifest);
  void load_thumbnails(quint64 serial);
  void update_save();

  DatasetModel model_;
  QLabel* message_;
  QTableView* table_;
  QPushButton* save_;
  QThreadPool pool_;
  QString path_;
  quint64 serial_ = 0;  // results of an older manifest than this are dropped
  bool loading_ = false;
  int thumbnails_pending_ = 0;
};

}  // namespace tessel::gui
