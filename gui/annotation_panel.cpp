#include "gui/annotation_panel.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QSignalBlocker>
#include <QVBoxLayout>

#include <algorithm>
#include <set>

#include "gui/slide_view.h"

namespace tessel::gui {
namespace {

enum Column { kName, kClass, kArea };

}  // namespace

AnnotationPanel::AnnotationPanel(SlideView* view, QWidget* parent) : QWidget(parent), view_(view) {
  table_ = new QTableWidget(0, 3, this);
  table_->setHorizontalHeaderLabels({tr("Name"), tr("Class"), tr("Area")});
  table_->horizontalHeader()->setSectionResizeMode(kName, QHeaderView::Stretch);
  table_->horizontalHeader()->setSectionResizeMode(kClass, QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setSectionResizeMode(kArea, QHeaderView::ResizeToContents);
  table_->verticalHeader()->hide();
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::EditKeyPressed |
                          QAbstractItemView::SelectedClicked);
  table_->setToolTip(
      tr("Double-click a name or class to change it; a row centres the viewer on "
         "its annotation"));
  delete_ = new QPushButton(tr("Delete"), this);
  undo_ = new QPushButton(tr("Undo"), this);
  redo_ = new QPushButton(tr("Redo"), this);
  auto* buttons = new QHBoxLayout();
  buttons->addWidget(delete_);
  buttons->addStretch(1);
  buttons->addWidget(undo_);
  buttons->addWidget(redo_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(table_, 1);
  layout->addLayout(buttons);

  QUndoStack* stack = view_->undo_stack();
  connect(delete_, &QPushButton::clicked, this, &AnnotationPanel::delete_selected);
  connect(undo_, &QPushButton::clicked, stack, &QUndoStack::undo);
  connect(redo_, &QPushButton::clicked, stack, &QUndoStack::redo);
  connect(stack, &QUndoStack::canUndoChanged, undo_, &QPushButton::setEnabled);
  connect(stack, &QUndoStack::canRedoChanged, redo_, &QPushButton::setEnabled);
  connect(stack, &QUndoStack::undoTextChanged, this,
          [this](const QString& text) { undo_->setToolTip(tr("Undo %1").arg(text)); });
  connect(stack, &QUndoStack::redoTextChanged, this,
          [this](const QString& text) { redo_->setToolTip(tr("Redo %1").arg(text)); });
  undo_->setEnabled(stack->canUndo());
  redo_->setEnabled(stack->canRedo());
  connect(view_, &SlideView::roisChanged, this, &AnnotationPanel::refresh);
  connect(view_, &SlideView::mppChanged, this, &AnnotationPanel::refresh);
  connect(table_, &QTableWidget::itemChanged, this, &AnnotationPanel::on_edited);
  connect(table_, &QTableWidget::itemSelectionChanged, this, [this] {
    delete_->setEnabled(!table_->selectionModel()->selectedRows().isEmpty());
    const int row = table_->currentRow();
    const auto& list = view_->annotations();
    if (row >= 0 && row < static_cast<int>(list.size()) && table_->hasFocus()) {
      view_->center_on(list[static_cast<size_t>(row)].polygon.boundingRect().center());
    }
  });
  refresh();
}

void AnnotationPanel::refresh() {
  refreshing_ = true;
  const QSignalBlocker block(table_);
  const auto& list = view_->annotations();
  table_->setRowCount(static_cast<int>(list.size()));
  for (size_t i = 0; i < list.size(); ++i) {
    const auto row = static_cast<int>(i);
    const Annotation& a = list[i];
    table_->setItem(row, kName, new QTableWidgetItem(a.name));
    table_->setItem(row, kClass, new QTableWidgetItem(a.classification));
    auto* area = new QTableWidgetItem(area_text(a.polygon, view_->mpp(), view_->mpp_y()));
    area->setFlags(area->flags() & ~Qt::ItemIsEditable);
    area->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    table_->setItem(row, kArea, area);
  }
  delete_->setEnabled(!table_->selectionModel()->selectedRows().isEmpty());
  refreshing_ = false;
}

void AnnotationPanel::on_edited(QTableWidgetItem* item) {
  if (refreshing_) return;
  std::vector<Annotation> list = view_->annotations();
  const int row = item->row();
  if (row < 0 || row >= static_cast<int>(list.size())) return;
  Annotation& a = list[static_cast<size_t>(row)];
  const QString text = item->text().trimmed();
  QString what;
  if (item->column() == kName) {
    if (text.isEmpty()) {  // a name cannot be empty: back to the old one
      refresh();
      return;
    }
    what = tr("Rename %1 to %2").arg(a.name, text);
    a.name = text;
  } else if (item->column() == kClass) {
    what = text.isEmpty() ? tr("Remove the class of %1").arg(a.name)
                          : tr("Classify %1 as %2").arg(a.name, text);
    a.classification = text;
  } else {
    return;
  }
  view_->set_annotations(std::move(list), what);
}

bool AnnotationPanel::delete_selected() {
  std::set<int> rows;
  for (const QModelIndex& index : table_->selectionModel()->selectedRows())
    rows.insert(index.row());
  if (rows.empty()) return false;
  std::vector<Annotation> kept;
  QStringList names;
  const auto& list = view_->annotations();
  for (size_t i = 0; i < list.size(); ++i) {
    if (rows.count(static_cast<int>(i)) != 0) {
      names << list[i].name;
    } else {
      kept.push_back(list[i]);
    }
  }
  view_->set_annotations(std::move(kept), tr("Delete %1").arg(names.join(QStringLiteral(", "))));
  return true;
}

}  // namespace tessel::gui
