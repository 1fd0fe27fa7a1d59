// LibTorch (through core/plan/plan.h) before Qt: Qt defines `slots` as a macro, LibTorch uses it as
// a name.
#include "core/plan/plan.h"
// clang-format off
#include "gui/training_models.h"
// clang-format on

#include <algorithm>
#include <cmath>
#include <exception>
#include <fstream>
#include <limits>
#include <sstream>

namespace tessel::gui {

void TileStateModel::reset() { *this = TileStateModel(); }

void TileStateModel::apply(const core::TileEvent& e) {
  if (e.segment != segment_ || e.pass != pass_ || static_cast<int64_t>(states_.size()) != e.tiles) {
    if (segment_ >= 0) finished_.emplace_back(segment_, pass_);
    segment_ = e.segment;
    pass_ = e.pass;
    states_.assign(static_cast<size_t>(std::max<int64_t>(e.tiles, 0)), TileState::kPending);
    rects_.assign(states_.size(), QRectF());
    extent_ = QRectF();
    cols_ = 0;
    max_row_ = max_col_ = 0;
    current_ = -1;
  }
  segments_ = std::max(segments_, e.segment + 1);
  if (e.tile < 0 || e.tile >= static_cast<int64_t>(states_.size())) return;
  const auto i = static_cast<size_t>(e.tile);
  const QRectF r(static_cast<double>(e.out.x.begin), static_cast<double>(e.out.y.begin),
                 static_cast<double>(e.out.x.size()), static_cast<double>(e.out.y.size()));
  rects_[i] = r;
  extent_ = extent_.isNull() ? r : extent_.united(r);
  if (e.row > 0 && cols_ == 0) cols_ = (e.tile - e.col) / e.row;
  max_row_ = std::max(max_row_, e.row);
  max_col_ = std::max(max_col_, e.col);
  if (e.done) {
    states_[i] = e.glass ? TileState::kGlass : TileState::kDone;
    ++tiles_done_;
  } else {
    states_[i] = e.pass == core::TileEvent::kForward ? TileState::kForward : TileState::kBackward;
    current_ = e.tile;
  }
}

int64_t TileStateModel::grid_cols() const {
  const auto n = static_cast<int64_t>(states_.size());
  // Until a second row shows the width of the grid, guess it square.
  return cols_ > 0 ? cols_
                   : std::max(max_col_ + 1, static_cast<int64_t>(std::ceil(std::sqrt(double(n)))));
}

QRectF TileStateModel::rect(int64_t tile) const {
  const QRectF& seen = rects_.at(static_cast<size_t>(tile));
  if (!seen.isNull()) return seen;
  const QRectF all = extent();
  if (all.isNull()) return {};
  const int64_t cols = grid_cols();
  const int64_t rows = (static_cast<int64_t>(states_.size()) + cols - 1) / cols;
  const double w = all.width() / static_cast<double>(cols);
  const double h = all.height() / static_cast<double>(rows);
  return QRectF(static_cast<double>(tile % cols) * w, static_cast<double>(tile / cols) * h, w, h);
}

QRectF TileStateModel::extent() const {
  const auto n = static_cast<int64_t>(states_.size());
  if (n == 0 || extent_.isNull()) return {};
  const int64_t cols = grid_cols();
  const int64_t rows = (n + cols - 1) / cols;
  return QRectF(0, 0, extent_.right() * static_cast<double>(cols) / double(max_col_ + 1),
                extent_.bottom() * static_cast<double>(rows) / double(max_row_ + 1));
}

int64_t TileStateModel::count(TileState state) const {
  return std::count(states_.begin(), states_.end(), state);
}

bool TileStateModel::segment_done(int segment, core::TileEvent::Pass pass) const {
  return std::find(finished_.begin(), finished_.end(), std::make_pair(segment, pass)) !=
         finished_.end();
}

void MemorySeries::clear() { *this = MemorySeries(); }

void MemorySeries::add(double seconds, const core::MemorySample& s) {
  live_.append(QPointF(seconds, static_cast<double>(s.live)));
  peak_.append(QPointF(seconds, static_cast<double>(s.peak)));
  for (const auto& [name, bytes] : s.by_category) {
    categories_[name].append(QPointF(seconds, static_cast<double>(bytes)));
  }
  if (s.budget > 0) budget_ = s.budget;
  largest_ = std::max({largest_, s.live, s.peak, budget_});
  if (live_.size() > kMaxPoints) thin();
}

void MemorySeries::add_slide(const pipelines::SlideProgress& s) {
  // The plan's prediction comes when the slide starts, the measurement when it is done.
  if (s.predicted_peak_bytes > 0) predicted_peak_ = s.predicted_peak_bytes;
  if (s.done) measured_peak_ = s.measured_peak_bytes;
  if (s.budget_bytes > 0) budget_ = s.budget_bytes;
  largest_ = std::max({largest_, predicted_peak_, measured_peak_, budget_});
}

void MemorySeries::thin() {
  const auto halve = [](QVector<QPointF>& points) {
    QVector<QPointF> kept;
    kept.reserve(points.size() / 2 + 1);
    for (qsizetype i = 0; i < points.size(); i += 2) kept.append(points[i]);
    if (!points.isEmpty() && (points.size() - 1) % 2 != 0) kept.append(points.back());
    points = std::move(kept);
  };
  halve(live_);
  halve(peak_);
  for (auto& [name, points] : categories_) halve(points);
}

void MetricsSeries::clear() { *this = MetricsSeries(); }

void MetricsSeries::add(const pipelines::EpochReport& e) {
  const auto x = static_cast<double>(e.epoch);
  for (QVector<QPointF>* points :
       {&train_loss_, &val_loss_, &val_accuracy_, &val_balanced_, &val_auc_}) {
    points->removeIf([x](const QPointF& p) { return p.x() >= x; });
  }
  if (best_epoch_ >= e.epoch) best_epoch_ = 0;
  // An epoch whose slides were all skipped has no loss (NaN): the chart leaves a gap.
  const auto append = [x](QVector<QPointF>& points, double value) {
    if (std::isfinite(value)) points.append(QPointF(x, value));
  };
  epochs_ = static_cast<int>(e.epoch);
  append(train_loss_, e.train_loss);
  if (std::isfinite(e.train_loss)) largest_loss_ = std::max(largest_loss_, e.train_loss);
  if (e.val.count > 0) {
    append(val_loss_, e.val.loss);
    if (std::isfinite(e.val.loss)) largest_loss_ = std::max(largest_loss_, e.val.loss);
    append(val_accuracy_, e.val.accuracy);
    append(val_balanced_, e.val.balanced_accuracy);
    append(val_auc_, e.val.auc);
  }
  if (e.best) best_epoch_ = static_cast<int>(e.epoch);
}

std::vector<pipelines::EpochReport> read_metrics_csv(const std::filesystem::path& csv) {
  std::vector<pipelines::EpochReport> epochs;
  std::ifstream in(csv);
  std::string header;
  if (!in || !std::getline(in, header)) return epochs;
  // The fields are numbers and names (csv_row quotes none of them): split at commas.
  const auto split = [](const std::string& line) {
    std::vector<std::string> fields;
    std::stringstream stream(line);
    for (std::string field; std::getline(stream, field, ',');) fields.push_back(field);
    if (!line.empty() && line.back() == ',') fields.emplace_back();
    return fields;
  };
  std::map<std::string, size_t> column;
  const std::vector<std::string> names = split(header);
  for (size_t i = 0; i < names.size(); ++i) column[names[i]] = i;
  if (!column.contains("epoch")) return epochs;
  for (std::string line; std::getline(in, line);) {
    const std::vector<std::string> fields = split(line);
    // A missing column or an empty cell: NaN, as the run writes a value it does not have.
    const auto number = [&](const char* name) {
      const auto it = column.find(name);
      if (it == column.end() || it->second >= fields.size() || fields[it->second].empty()) {
        return std::numeric_limits<double>::quiet_NaN();
      }
      try {
        return std::stod(fields[it->second]);
      } catch (const std::exception&) {
        return std::numeric_limits<double>::quiet_NaN();
      }
    };
    const double epoch = number("epoch");
    if (!std::isfinite(epoch) || epoch < 1) continue;  // a half-written line
    pipelines::EpochReport e;
    e.epoch = static_cast<int64_t>(epoch);
    e.lr = number("lr");
    e.train_loss = number("train_loss");
    e.train.accuracy = number("train_accuracy");
    e.val.loss = number("val_loss");
    e.val.accuracy = number("val_accuracy");
    e.val.balanced_accuracy = number("val_balanced_accuracy");
    e.val.auc = number("val_auc");
    e.val.count = std::isfinite(e.val.loss) ? 1 : 0;
    e.best = number("best") == 1;
    e.seconds = number("seconds");
    epochs.push_back(e);
  }
  return epochs;
}

QString format_bytes(int64_t bytes) { return QString::fromStdString(core::format_bytes(bytes)); }

}  // namespace tessel::gui
