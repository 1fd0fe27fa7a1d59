#include "gui/properties_panel.h"

#include <QHeaderView>

#include <exception>

#include "gui/slide_document.h"

namespace tessel::gui {

namespace {

QString size_text(int64_t width, int64_t height) {
  return QStringLiteral("%1 × %2").arg(width).arg(height);
}

// Associated images' rows carry their name here; other rows carry nothing.
constexpr int kAssociatedRole = Qt::UserRole + 1;
// The window shows an image at most this size, scaled down keeping its aspect.
constexpr QSize kAssociatedWindowMax(800, 600);

}  // namespace

PropertiesPanel::PropertiesPanel(QWidget* parent) : QTreeWidget(parent) {
  setColumnCount(2);
  setHeaderLabels({tr("Property"), tr("Value")});
  header()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  setRootIsDecorated(true);
  setAlternatingRowColors(true);
  pool_.setMaxThreadCount(1);
  associated_window_ = new QLabel(this, Qt::Window);
  associated_window_->setAlignment(Qt::AlignCenter);
  associated_window_->setBackgroundRole(QPalette::Dark);
  associated_window_->setAutoFillBackground(true);
  connect(this, &QTreeWidget::itemClicked, this, [this](QTreeWidgetItem* item) {
    const QString name = item->data(0, kAssociatedRole).toString();
    if (!name.isEmpty()) show_associated_image(name);
  });
}

PropertiesPanel::~PropertiesPanel() {
  pool_.clear();
  pool_.waitForDone();
}

void PropertiesPanel::show_nothing() {
  clear();
  slide_.reset();
  associated_window_->hide();
}

QTreeWidgetItem* PropertiesPanel::associated_item(const QString& name) const {
  const QList<QTreeWidgetItem*> found = findItems(tr("Associated images"), Qt::MatchExactly, 0);
  if (found.isEmpty()) return nullptr;
  for (int i = 0; i < found.front()->childCount(); ++i) {
    QTreeWidgetItem* child = found.front()->child(i);
    if (child->data(0, kAssociatedRole).toString() == name) return child;
  }
  return nullptr;
}

void PropertiesPanel::show_associated_image(const QString& name) {
  if (!slide_) return;
  // Read off the UI thread: a macro image is a JPEG of a few megapixels. The slide is shared
  // with the task, so it outlives a slide change; a result for another slide is dropped.
  pool_.start([this, slide = slide_, name] {
    try {
      QImage image = to_qimage(slide->read_associated_image(name.toStdString()));
      QMetaObject::invokeMethod(
          this,
          [this, slide, name, image = std::move(image)] {
            if (slide != slide_) return;
            associated_image_ = image;
            associated_window_->setPixmap(
                QPixmap::fromImage(image.size().boundedTo(kAssociatedWindowMax) == image.size()
                                       ? image
                                       : image.scaled(kAssociatedWindowMax, Qt::KeepAspectRatio,
                                                      Qt::SmoothTransformation)));
            associated_window_->setWindowTitle(
                tr("%1 — %2").arg(name, QString::fromStdString(slide->path().filename().string())));
            associated_window_->adjustSize();
            associated_window_->show();
            associated_window_->raise();
            emit associatedImageShown(name);
          },
          Qt::QueuedConnection);
    } catch (const std::exception& e) {
      const QString reason = QString::fromStdString(e.what());
      QMetaObject::invokeMethod(
          this, [this, reason] { emit associatedImageFailed(reason); }, Qt::QueuedConnection);
    }
  });
}

void PropertiesPanel::show_slide(std::shared_ptr<const io::Slide> shown) {
  clear();
  associated_window_->hide();
  slide_ = std::move(shown);
  const io::Slide& slide = *slide_;
  const auto row = [this](const QString& name, const QString& value) {
    return new QTreeWidgetItem(this, {name, value});  // owned by the tree
  };
  row(tr("File"), QString::fromStdString(slide.path().filename().string()))
      ->setToolTip(1, QString::fromStdString(slide.path().string()));
  row(tr("Vendor"), QString::fromStdString(slide.vendor()));
  const io::Level& base = slide.level(0);
  row(tr("Size (level 0)"), size_text(base.width, base.height));
  auto* levels = row(tr("Levels"), QString::number(slide.level_count()));
  for (int i = 0; i < slide.level_count(); ++i) {
    const io::Level& l = slide.level(i);
    new QTreeWidgetItem(
        levels, {tr("Level %1").arg(i), size_text(l.width, l.height) +
                                            tr(", downsample %1").arg(l.downsample, 0, 'g', 4)});
  }
  levels->setExpanded(true);
  const auto mpp = [](std::optional<double> v) {
    return v ? QString::number(*v, 'g', 4) + QStringLiteral(" µm") : QStringLiteral("unknown");
  };
  row(tr("Microns per pixel"),
      slide.mpp_x() ? QStringLiteral("x %1, y %2").arg(mpp(slide.mpp_x()), mpp(slide.mpp_y()))
                    : tr("unknown (no scale bar in µm)"));
  row(tr("Magnification"), slide.objective_power()
                               ? QStringLiteral("%1×").arg(*slide.objective_power())
                               : tr("unknown"));
  auto* associated =
      row(tr("Associated images"), QString::number(slide.associated_image_names().size()));
  for (const std::string& name : slide.associated_image_names()) {
    const auto [w, h] = slide.associated_image_size(name);
    auto* item = new QTreeWidgetItem(associated, {QString::fromStdString(name), size_text(w, h)});
    item->setData(0, kAssociatedRole, QString::fromStdString(name));
    item->setToolTip(0, tr("Click to show the image"));
  }
  associated->setExpanded(true);
  auto* raw = row(tr("All properties"), QString::number(slide.properties().size()));
  for (const auto& [name, value] : slide.properties()) {
    new QTreeWidgetItem(raw, {QString::fromStdString(name), QString::fromStdString(value)});
  }
}

QString PropertiesPanel::value(const QString& name) const {
  const QList<QTreeWidgetItem*> found = findItems(name, Qt::MatchExactly, 0);
  return found.isEmpty() ? QString() : found.front()->text(1);
}

}  // namespace tessel::gui
