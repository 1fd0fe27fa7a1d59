// The slide's annotations as a list a pathologist edits: name and class typed in place, the
// area in mm² (µm², or px² without mpp), a selected one centred in the viewer, Delete, Undo and
// Redo (the viewer's undo stack: drawing, deleting, renaming, clearing and importing are each
// one step). Every edit goes through SlideView::set_annotations; the list follows roisChanged.
#pragma once

#include <QPushButton>
#include <QTableWidget>
#include <QWidget>

namespace tessel::gui {

class SlideView;

class AnnotationPanel : public QWidget {
  Q_OBJECT

 public:
  explicit AnnotationPanel(SlideView* view, QWidget* parent = nullptr);

  QTableWidget* table() { return table_; }
  QPushButton* delete_button() { return delete_; }
  QPushButton* undo_button() { return undo_; }
  QPushButton* redo_button() { return redo_; }
  // Deletes the selected rows' annotations as one undoable step. False when none is selected.
  bool delete_selected();

 private:
  void refresh();  // the rows from the viewer's annotations
  void on_edited(QTableWidgetItem* item);

  SlideView* view_;
  QTableWidget* table_;
  QPushButton *delete_, *undo_, *redo_;
  bool refreshing_ = false;
};

}  // namespace tessel::gui
