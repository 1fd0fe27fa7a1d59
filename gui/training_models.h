// The models behind the training views, fed from the observer's events on the UI thread and free
// of widgets so tests drive them with synthetic events: the current segment's tile grid and each
// tile's state, the memory series over time, and the per-epoch metrics.
#pragma once

#include <QPointF>
#include <QRectF>
#include <QString>
#include <QVector>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/observer.h"
#include "pipelines/train.h"

namespace tessel::gui {

// kGlass: a tile that sees only the background, computed once for all of them (docs/glass.md).
enum class TileState : uint8_t { kPending, kForward, kBackward, kDone, kGlass };

// The tiles of the segment and pass that runs now. A new (segment, pass) starts a new grid of
// pending tiles: partitions differ between segments and between forward and backward.
class TileStateModel {
 public:
  void reset();  // a new slide
  void apply(const core::TileEvent& event);

  bool empty() const { return states_.empty(); }
  int segment() const { return segment_; }
  int segments() const { return segments_; }  // segments seen on this slide
  core::TileEvent::Pass pass() const { return pass_; }
  int64_t tiles() const { return static_cast<int64_t>(states_.size()); }
  TileState state(int64_t tile) const { return states_.at(static_cast<size_t>(tile)); }
  int64_t count(TileState state) const;
  int64_t current_tile() const { return current_; }  // -1: none yet
  // A tile's rectangle in the segment's output activation: as its event said, or for a tile not
  // reached yet, its cell of the estimated grid (extent() divided evenly).
  QRectF rect(int64_t tile) const;
  // The segment's output, where the grid is drawn: the tiles seen so far scaled up to the whole
  // grid (its columns follow from any tile past the first row: tile = row · cols + col).
  QRectF extent() const;
  int64_t grid_cols() const;  // known from a second-row tile, else guessed near-square
  int64_t tiles_done() const { return tiles_done_; }  // finished tiles on this slide, all passes
  // Segments whose pass has finished on this slide, by direction.
  bool segment_done(int segment, core::TileEvent::Pass pass) const;

 private:
  int segment_ = -1;
  int segments_ = 0;
  core::TileEvent::Pass pass_ = core::TileEvent::kForward;
  std::vector<TileState> states_;
  std::vector<QRectF> rects_;
  QRectF extent_;     // of the tiles seen
  int64_t cols_ = 0;  // 0: not known yet
  int64_t max_row_ = 0, max_col_ = 0;
  int64_t current_ = -1;
  int64_t tiles_done_ = 0;
  std::vector<std::pair<int, core::TileEvent::Pass>> finished_;
};

// The memory a step uses over time, by category, the budget, and per training slide the plan's
// predicted peak next to the measured one, all on one basis: the bytes live above those live when
// the step began (MemorySample::baseline), where the network's weights and the optimizer's state
// already were. The plan's prediction and the budget hold those too (SlideProgress::fixed_bytes):
// they are drawn less them, the budget as what it leaves the step. Disk is kept apart: it is not
// memory, and on the memory axis it would read as a blown budget. Bounded: past kMaxPoints every
// other point is dropped, so a long run keeps its shape at a fixed cost.
class MemorySeries {
 public:
  static constexpr int kMaxPoints = 2000;

  void clear();
  void add(double seconds, const core::MemorySample& sample);
  // A training slide's predicted peak (when it starts) and measured peak (when it is done), at
  // `seconds`. Validation's slides run without gradients under another plan: left out, so the
  // last training slide's figures stay.
  void add_slide(double seconds, const pipelines::SlideProgress& slide);

  const QVector<QPointF>& live() const { return live_; }
  const QVector<QPointF>& peak() const { return peak_; }
  // The categories in memory (a disk tier's, named "disk" or "….disk", is in disk()).
  const std::map<std::string, QVector<QPointF>>& by_category() const { return categories_; }
  const QVector<QPointF>& disk() const { return disk_; }
  // Per training slide: its plan's predicted peak from its start, and its measured peak at its
  // end (one point each).
  const QVector<QPointF>& predicted() const { return predicted_; }
  const QVector<QPointF>& measured() const { return measured_; }
  int64_t budget() const { return budget_; }
  // What the budget leaves the step: less the last training slide's plan's fixed bytes.
  int64_t step_budget() const { return budget_ > 0 ? std::max<int64_t>(0, budget_ - fixed_) : 0; }
  // The current slide's plan's prediction, on the step's basis (less its fixed bytes); 0: none.
  int64_t predicted_peak() const { return predicted_peak_; }
  int64_t measured_peak() const { return measured_peak_; }  // the last slide's, -1: unknown
  int64_t largest() const { return largest_; }              // for the memory axis
  int64_t largest_disk() const { return largest_disk_; }    // for the disk axis, 0: no disk
  double last_seconds() const { return live_.isEmpty() ? 0 : live_.back().x(); }

 private:
  void thin();

  QVector<QPointF> live_, peak_, disk_, predicted_, measured_;
  std::map<std::string, QVector<QPointF>> categories_;
  int64_t budget_ = 0;
  int64_t predicted_peak_ = 0;
  int64_t measured_peak_ = -1;
  int64_t largest_ = 0;
  int64_t largest_disk_ = 0;
  int64_t fixed_ = 0;
};

// The loss axis of a run whose first epochs' losses dwarf the rest (a large first epoch flattens
// every later one to zero): `top` is the axis's top, `above` the epochs over it with their
// largest loss (training or validation).
struct LossScale {
  double top = 0.1;
  std::vector<std::pair<int, double>> above;
};

// Per epoch: training loss, validation loss and the validation metrics. An epoch added again (a
// resumed run repeats the epochs after its checkpoint's) replaces it and every later one.
class MetricsSeries {
 public:
  void clear();
  void add(const pipelines::EpochReport& epoch);

  int epochs() const { return epochs_; }  // the last epoch added
  const QVector<QPointF>& train_loss() const { return train_loss_; }
  const QVector<QPointF>& val_loss() const { return val_loss_; }
  const QVector<QPointF>& val_accuracy() const { return val_accuracy_; }
  const QVector<QPointF>& val_balanced_accuracy() const { return val_balanced_; }
  const QVector<QPointF>& val_auc() const { return val_auc_; }  // NaN values are left out
  // The epochs without a training loss (every slide skipped), in order. (A loss or gradient
  // that is not finite stops the run with an error before its epoch is reported.)
  const QVector<int>& skipped_epochs() const { return skipped_epochs_; }
  double largest_loss() const { return largest_loss_; }
  int best_epoch() const { return best_epoch_; }  // 0: none yet
  // The loss axis: up to the largest loss, unless leading epochs' losses are more than
  // kOutlier times every later one's; then up to the rest's largest, those epochs above it.
  static constexpr double kOutlier = 3;
  LossScale loss_scale() const;

 private:
  QVector<QPointF> train_loss_, val_loss_, val_accuracy_, val_balanced_, val_auc_;
  QVector<int> skipped_epochs_;
  int epochs_ = 0;
  double largest_loss_ = 0;
  int best_epoch_ = 0;
};

// What the epochs so far say, in a sentence for the user next to the numbers.
struct RunVerdict {
  enum Kind : uint8_t { kTooEarly, kLearning, kAtChance, kDiverging, kNotLearning, kSkipped };
  Kind kind = kTooEarly;
  QString text;
};
// - skipped: the last epoch trained no slide (every one skipped; the log says why);
// - diverging: the training loss rose two epochs running, to above the first epoch's (a loss
//   that is not finite stops the run itself);
// - at chance: two validations or more, every one's AUC within kChanceBand of 0.5 (it ranks
//   slides it has not trained on no better than a coin; AUC, binary or macro one-vs-rest, is 0.5
//   at chance for any number of classes, and undefined where validation holds one class);
// - learning: the training loss fell by at least 10% from the first epoch, and validation (when
//   there is one) is not at chance;
// - not learning: three epochs or more and the training loss has not fallen 10%;
// - too early: otherwise (one epoch, or two without a clear trend).
RunVerdict judge_run(const MetricsSeries& metrics);
inline constexpr double kChanceBand = 0.05;

// The epochs of a run folder's metrics.csv (pipelines/train.cpp writes a row per epoch), for a
// resumed run's charts: columns found by their header names, an empty cell a missing value (NaN;
// val.count 0 when the row has no validation loss); rows that do not parse are left out. Empty
// when the file does not exist or cannot be read.
std::vector<pipelines::EpochReport> read_metrics_csv(const std::filesystem::path& csv);

QString format_bytes(int64_t bytes);

}  // namespace tessel::gui
