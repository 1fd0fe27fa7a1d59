// LibTorch (through core/plan/plan.h) before Qt: Qt defines `slots` as a macro, LibTorch uses it as
// a name.
#include "core/plan/plan.h"
// clang-format off
#include "gui/training_models.h"
// clang-format on
#include "gui/words.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <fstream>
#include <limits>
#include <optional>
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

namespace {

bool is_disk(const std::string& category) {
  return category == "disk" || category.ends_with(".disk");
}

QPointF point(double seconds, int64_t bytes) { return {seconds, static_cast<double>(bytes)}; }

}  // namespace

void MemorySeries::add(double seconds, const core::MemorySample& s) {
  const int64_t base = std::max<int64_t>(0, s.baseline);
  const int64_t live = std::max<int64_t>(0, s.live - base);
  const int64_t peak = std::max(live, s.peak - base);
  live_.append(point(seconds, live));
  peak_.append(point(seconds, peak));
  std::optional<int64_t> disk;
  for (const auto& [name, bytes] : s.by_category) {
    if (is_disk(name)) {
      disk = disk.value_or(0) + bytes;
    } else {
      categories_[name].append(point(seconds, bytes));
      largest_ = std::max(largest_, bytes);
    }
  }
  if (disk) {
    disk_.append(point(seconds, *disk));
    largest_disk_ = std::max(largest_disk_, *disk);
  }
  if (s.budget > 0) budget_ = s.budget;
  largest_ = std::max({largest_, live, peak, step_budget()});
  if (live_.size() > kMaxPoints) thin();
}

void MemorySeries::add_slide(double seconds, const pipelines::SlideProgress& s) {
  if (s.budget_bytes > 0) budget_ = s.budget_bytes;
  if (s.phase != "train") return;
  // The plan's prediction comes when the slide starts, the measurement when it is done.
  if (!s.done && s.predicted_peak_bytes > 0) {
    fixed_ = s.fixed_bytes;
    predicted_peak_ = std::max<int64_t>(0, s.predicted_peak_bytes - fixed_);
    predicted_.append(point(seconds, predicted_peak_));
  }
  if (s.done && s.measured_peak_bytes >= 0) {
    measured_peak_ = s.measured_peak_bytes;
    measured_.append(point(seconds, measured_peak_));
  }
  largest_ = std::max({largest_, predicted_peak_, measured_peak_, step_budget()});
  if (predicted_.size() > kMaxPoints || measured_.size() > kMaxPoints) thin();
}

void MemorySeries::thin() {
  const auto halve = [](QVector<QPointF>& points) {
    QVector<QPointF> kept;
    kept.reserve(points.size() / 2 + 1);
    for (qsizetype i = 0; i < points.size(); i += 2) kept.append(points[i]);
    if (!points.isEmpty() && (points.size() - 1) % 2 != 0) kept.append(points.back());
    points = std::move(kept);
  };
  if (live_.size() > kMaxPoints) {
    halve(live_);
    halve(peak_);
    halve(disk_);
    for (auto& [name, points] : categories_) halve(points);
  }
  if (predicted_.size() > kMaxPoints) halve(predicted_);
  if (measured_.size() > kMaxPoints) halve(measured_);
}

void MetricsSeries::clear() { *this = MetricsSeries(); }

void MetricsSeries::add(const pipelines::EpochReport& e) {
  const auto x = static_cast<double>(e.epoch);
  for (QVector<QPointF>* points :
       {&train_loss_, &val_loss_, &val_accuracy_, &val_balanced_, &val_auc_}) {
    points->removeIf([x](const QPointF& p) { return p.x() >= x; });
  }
  skipped_epochs_.removeIf([&e](int epoch) { return epoch >= e.epoch; });
  if (best_epoch_ >= e.epoch) best_epoch_ = 0;
  // An epoch whose slides were all skipped has no loss (NaN): the chart leaves a gap.
  const auto append = [x](QVector<QPointF>& points, double value) {
    if (std::isfinite(value)) points.append(QPointF(x, value));
  };
  epochs_ = static_cast<int>(e.epoch);
  append(train_loss_, e.train_loss);
  if (!std::isfinite(e.train_loss)) skipped_epochs_.append(static_cast<int>(e.epoch));
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

LossScale MetricsSeries::loss_scale() const {
  // Each epoch's largest loss, training or validation.
  std::map<int, double> largest;
  for (const QVector<QPointF>* points : {&train_loss_, &val_loss_}) {
    for (const QPointF& p : *points) {
      double& l = largest[static_cast<int>(p.x())];
      l = std::max(l, p.y());
    }
  }
  const std::vector<std::pair<int, double>> epochs(largest.begin(), largest.end());
  const auto n = epochs.size();
  LossScale scale;
  scale.top = std::max(0.1, largest_loss_ * 1.1);
  // The fewest leading epochs, at most half of them, each over kOutlier × every later one.
  std::vector<double> later(n + 1, 0);  // later[i]: the largest from epoch i on
  for (size_t i = n; i-- > 0;) later[i] = std::max(later[i + 1], epochs[i].second);
  double leading = std::numeric_limits<double>::infinity();  // the smallest of the first k
  for (size_t k = 1; 2 * k <= n; ++k) {
    leading = std::min(leading, epochs[k - 1].second);
    if (leading <= kOutlier * later[k]) continue;
    scale.top = std::max(0.1, later[k] * 1.1);
    scale.above.assign(epochs.begin(), epochs.begin() + static_cast<std::ptrdiff_t>(k));
    break;
  }
  return scale;
}

namespace {

QString loss_text(double loss) { return QString::number(loss, 'g', 3); }

bool at_chance(const QVector<QPointF>& auc) {
  if (auc.size() < 2) return false;
  return std::all_of(auc.begin(), auc.end(),
                     [](const QPointF& p) { return std::abs(p.y() - 0.5) <= kChanceBand; });
}

}  // namespace

RunVerdict judge_run(const MetricsSeries& m) {
  RunVerdict v;
  const QVector<QPointF>& train = m.train_loss();
  const int epochs = m.epochs();
  if (!m.skipped_epochs().isEmpty() && m.skipped_epochs().back() == epochs) {
    v.kind = RunVerdict::kSkipped;
    v.text =
        QStringLiteral("Epoch %1 trained no slide: every one was skipped (the log below says why).")
            .arg(epochs);
    return v;
  }
  const auto n = train.size();
  if (n >= 3 && train[n - 1].x() == epochs && train[n - 1].y() > train[n - 2].y() &&
      train[n - 2].y() > train[n - 3].y() && train[n - 1].y() > train.front().y()) {
    v.kind = RunVerdict::kDiverging;
    v.text = QStringLiteral(
                 "Diverging: the training loss rose two epochs running, to %1, above the first "
                 "epoch's %2. Lower the learning rate.")
                 .arg(loss_text(train[n - 1].y()), loss_text(train.front().y()));
    return v;
  }
  if (at_chance(m.val_auc())) {
    v.kind = RunVerdict::kAtChance;
    v.text = QStringLiteral(
                 "At chance: the validation AUC has stayed within %1 of 0.5 (a coin toss) in all "
                 "%2 validations. The network does not yet tell the classes apart on slides it "
                 "has not trained on.")
                 .arg(kChanceBand)
                 .arg(m.val_auc().size());
    return v;
  }
  if (n >= 2 && train.back().y() <= 0.9 * train.front().y()) {
    v.kind = RunVerdict::kLearning;
    v.text = QStringLiteral("Learning: the training loss fell from %1 to %2")
                 .arg(loss_text(train.front().y()), loss_text(train.back().y()));
    if (!m.val_auc().isEmpty()) {
      v.text += QStringLiteral("; validation AUC %1").arg(m.val_auc().back().y(), 0, 'f', 2);
    }
    if (m.best_epoch() > 0) v.text += QStringLiteral(", best epoch %1").arg(m.best_epoch());
    v.text += QLatin1Char('.');
    return v;
  }
  if (n >= 3) {
    v.kind = RunVerdict::kNotLearning;
    v.text = QStringLiteral(
                 "Not learning yet: the training loss is %1 after %2 epochs, against %3 in the "
                 "first. Try another learning rate.")
                 .arg(loss_text(train.back().y()))
                 .arg(epochs)
                 .arg(loss_text(train.front().y()));
    return v;
  }
  v.text = n == 0 ? QStringLiteral("No epoch finished yet.")
                  : QStringLiteral("Too early to judge after %1.")
                        .arg(counted(epochs, QStringLiteral("epoch"), QStringLiteral("epochs")));
  return v;
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
