// The dataset table behind the dataset panel: a manifest written at test time over the shared
// slides, with a missing and an unreadable slide among good ones.
#include <QFileInfo>
#include <QSignalSpy>
#include <QTest>

#include <filesystem>

#include "gui/dataset_model.h"
#include "tests/io/shared_slides.h"
#include "tests/io/temp_folder.h"

namespace tessel::gui {

class DatasetModelTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    manifest_ = io::load_manifest(folder_.write(
        "manifest.csv", "slide,label,split\n" + test::shared_slide("cmu-1-small-region.svs") +
                            ",tumor,train\n" + "gone.svs,normal,train\n" +
                            test::shared_slide("unreadable.svs") + ",normal,val\n" +
                            test::shared_slide("small.svs") + ",normal,val\n"));
    io::check_slides(manifest_);
    model_.set_rows(dataset_rows(manifest_));
  }

  void listsEverySlideInCsvOrderWithLabelSplitAndStatus() {
    QCOMPARE(model_.rowCount(), 4);
    QCOMPARE(model_.columnCount(), int{DatasetModel::kColumnCount});
    QCOMPARE(text(0, DatasetModel::kSlide), QStringLiteral("cmu-1-small-region.svs"));
    QCOMPARE(text(0, DatasetModel::kLabel), QStringLiteral("tumor"));
    QCOMPARE(text(0, DatasetModel::kSplit), QStringLiteral("train"));
    QCOMPARE(text(0, DatasetModel::kStatus), QStringLiteral("ok"));
    QCOMPARE(text(1, DatasetModel::kSlide), QStringLiteral("gone.svs"));
    QCOMPARE(text(2, DatasetModel::kSplit), QStringLiteral("val"));
    QCOMPARE(text(3, DatasetModel::kStatus), QStringLiteral("ok"));
    QCOMPARE(model_.count(DatasetRow::Status::kOk), 2);
  }

  void aMissingSlideSaysSoWithItsPath() {
    const DatasetRow& row = model_.row(1);
    QCOMPARE(row.status, DatasetRow::Status::kMissing);
    QVERIFY2(row.reason.contains(QStringLiteral("not found")), qPrintable(row.reason));
    QVERIFY(text(1, DatasetModel::kStatus).startsWith(QStringLiteral("missing: ")));
    QCOMPARE(row.line, 3);
  }

  void anUnreadableSlideGivesOpenSlidesReason() {
    const DatasetRow& row = model_.row(2);
    QCOMPARE(row.status, DatasetRow::Status::kUnreadable);
    QVERIFY2(row.reason.contains(QStringLiteral("unreadable.svs")), qPrintable(row.reason));
    QVERIFY(text(2, DatasetModel::kStatus).startsWith(QStringLiteral("unreadable: ")));
  }

  void theSlidesPathIsOnEveryCellForDoubleClicks() {
    const QString path =
        model_.data(model_.index(3, DatasetModel::kLabel), DatasetModel::kPathRole).toString();
    QCOMPARE(
        QFileInfo(path).canonicalFilePath(),
        QFileInfo(QString::fromStdString(test::shared_slide("small.svs"))).canonicalFilePath());
  }

  void aThumbnailArrivingLaterUpdatesOnlyItsCell() {
    QSignalSpy changed(&model_, &DatasetModel::dataChanged);
    QImage thumb(48, 64, QImage::Format_RGB32);
    thumb.fill(Qt::magenta);
    model_.set_thumbnail(0, thumb);
    QCOMPARE(changed.count(), 1);
    QCOMPARE(changed.at(0).at(0).toModelIndex(), model_.index(0, DatasetModel::kThumbnail));
    QCOMPARE(model_.data(model_.index(0, DatasetModel::kThumbnail), Qt::DecorationRole)
                 .value<QImage>()
                 .size(),
             QSize(48, 64));
    model_.set_thumbnail(99, thumb);  // a row that no longer exists: ignored
    QCOMPARE(changed.count(), 1);
  }

  // Label, split and mpp edited in place, a bad value refused with its reason, and the rows
  // written back as a manifest that io::load_manifest reads as edited (issue 53's dataset panel).
  void editedRowsAreWrittenBackAsAManifestThatReadsTheSame() {
    test::TempFolder folder;
    const std::string slides = QFileInfo(QString::fromStdString(test::shared_slide("small.svs")))
                                   .absolutePath()
                                   .toStdString();
    std::filesystem::copy_file(slides + "/small.svs", folder.path() / "a.svs");
    const std::string csv = folder.write(
        "m.csv", "slide,label,split,site,roi\na.svs,tumor,train,\"Pittsburgh, PA\",\n" + slides +
                     "/cmu-1-small-region.svs,normal,val,Boston,\n");
    io::Manifest manifest = io::load_manifest(csv);
    DatasetModel model;
    QStringList columns;
    for (const std::string& c : manifest.metadata_columns) columns << QString::fromStdString(c);
    model.set_rows(dataset_rows(manifest), columns);
    QVERIFY(model.flags(model.index(0, DatasetModel::kLabel)) & Qt::ItemIsEditable);
    QVERIFY(!(model.flags(model.index(0, DatasetModel::kSlide)) & Qt::ItemIsEditable));
    QSignalSpy refused(&model, &DatasetModel::rowEditRefused);
    QVERIFY(!model.setData(model.index(0, DatasetModel::kSplit), QStringLiteral("training")));
    QVERIFY(!model.setData(model.index(0, DatasetModel::kMpp), QStringLiteral("-1")));
    QVERIFY(!model.setData(model.index(0, DatasetModel::kLabel), QStringLiteral(" ")));
    QCOMPARE(refused.count(), 3);
    QVERIFY2(model.last_refusal().contains(QStringLiteral("label")),
             qPrintable(model.last_refusal()));
    QVERIFY(!model.modified());
    QVERIFY(model.setData(model.index(0, DatasetModel::kSplit), QStringLiteral("test")));
    QVERIFY(model.setData(model.index(1, DatasetModel::kMpp), QStringLiteral("0.25")));
    QVERIFY(model.setData(model.index(1, DatasetModel::kLabel), QStringLiteral("tumor, grade 2")));
    QVERIFY(model.modified());
    QCOMPARE(text_of(model, 1, DatasetModel::kMpp), QStringLiteral("0.25"));

    const QByteArray written = manifest_csv(
        model.rows(), QString::fromStdString(folder.path().string()), model.metadata_columns());
    const std::string again = folder.write("again.csv", written.toStdString());
    const io::Manifest back = io::load_manifest(again);
    QVERIFY2(back.problems.empty(), written.constData());
    QCOMPARE(back.entries.size(), size_t{2});
    QVERIFY2(written.startsWith("slide,label,split,patient,mpp,site,roi\na.svs,tumor,test,"),
             written.constData());  // the slide under the folder stays relative
    QCOMPARE(back.entries[0].split, io::Split::kTest);
    QCOMPARE(back.entries[0].metadata.at("site"), std::string("Pittsburgh, PA"));
    QCOMPARE(back.entries[1].label, std::string("tumor, grade 2"));
    QCOMPARE(io::manifest_mpp(back.entries[1].metadata).value_or(0), 0.25);
    QCOMPARE(back.entries[1].slide, manifest.entries[1].slide);  // outside: absolute
  }

  void headersNameTheColumns() {
    QCOMPARE(model_.headerData(DatasetModel::kStatus, Qt::Horizontal, Qt::DisplayRole).toString(),
             QStringLiteral("Status"));
  }

 private:
  static QString text_of(const DatasetModel& model, int row, int column) {
    return model.data(model.index(row, column), Qt::DisplayRole).toString();
  }
  QString text(int row, int column) const {
    return model_.data(model_.index(row, column), Qt::DisplayRole).toString();
  }

  test::TempFolder folder_;
  io::Manifest manifest_;
  DatasetModel model_;
};

}  // namespace tessel::gui

QTEST_MAIN(tessel::gui::DatasetModelTest)
#include "dataset_model_test.moc"
