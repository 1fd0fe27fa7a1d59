#include "gui/properties_panel.h"

#include <QHeaderView>

namespace tessel::gui {

namespace {

QString size_text(int64_t width, int64_t height) {
  return QStringLiteral("%1 × %2").arg(width).arg(height);
}

}  // namespace

PropertiesPanel::PropertiesPanel(QWidget* parent) : QTreeWidget(parent) {
  setColumnCount(2);
  setHeaderLabels({tr("Property"), tr("Value")});
  header()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  setRootIsDecorated(true);
  setAlternatingRowColors(true);
}

void PropertiesPanel::show_nothing() { clear(); }

void PropertiesPanel::show_slide(const io::Slide& slide) {
  clear();
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
    new QTreeWidgetItem(associated, {QString::fromStdString(name), size_text(w, h)});
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
