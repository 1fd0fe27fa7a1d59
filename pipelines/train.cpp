#include "pipelines/train.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <tuple>

#include "core/device/device.h"
#include "core/device/memory.h"
#include "core/device/runtime.h"
#include "core/error.h"
#include "core/exec/executor.h"
#include "core/plan/planner.h"
#include "core/plan/split.h"
#include "core/store/offload_prices.h"
#include "core/store/tile_store.h"
#include "core/version.h"
#include "io/checkpoint.h"
#include "io/durable.h"
#include "io/manifest.h"
#include "io/slide.h"
#include "models/zoo.h"
#include "pipelines/distributed.h"
#include "pipelines/logging.h"
#include "pipelines/network.h"
#include "pipelines/optimizer.h"
#include "pipelines/run_files.h"
#include "pipelines/slide_input.h"
#include "pipelines/view_source.h"

namespace tessel::pipelines {
namespace {

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Independent, reproducible random streams for (seed, epoch, slide position, purpose), so a run
// resumed mid-epoch draws exactly what the uninterrupted run drew (SplitMix64 finaliser).
uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9E3779B97F4A7C15ULL * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
uint64_t stream(uint64_t seed, int64_t epoch, int64_t position, uint64_t purpose) {
  return mix(mix(mix(seed, static_cast<uint64_t>(epoch)), static_cast<uint64_t>(position)),
             purpose);
}
constexpr uint64_t kOrderStream = 1, kViewStream = 2, kTorchStream = 3, kDropoutStream = 4;

// Fisher–Yates with the raw generator (std::shuffle's draws differ between standard libraries).
std::vector<size_t> shuffled(size_t n, std::mt19937_64& rng) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
  return order;
}

// A trained or validated slide's outcome, by its position in the epoch's order (or the val split).
struct SlideResult {
  int64_t index = 0;
  std::vector<double> probabilities;
  int64_t label = 0;
  double loss = 0;
};

json result_json(const SlideResult& r) {
  return {
      {"index", r.index}, {"probabilities", r.probabilities}, {"label", r.label}, {"loss", r.loss}};
}

SlideResult slide_result(const json& j) {
  return {j.at("index"), j.at("probabilities").get<std::vector<double>>(), j.at("label"),
          j.at("loss")};
}

// The position of a run, saved in every checkpoint (run_state).
struct Position {
  int64_t epoch = 0;          // 0-based epoch in progress
  int64_t slide = 0;          // slides of that epoch already trained
  int64_t step = 0;           // optimizer steps taken
  int64_t batch_slides = 0;   // slides whose gradient is in the current batch (skips excluded)
  double train_loss_sum = 0;  // over the epoch's slides so far
  std::vector<std::vector<double>> train_probabilities;
  std::vector<int64_t> train_labels;
  int64_t best_epoch = 0;  // 1-based; 0: none yet
  double best_metric = 0;
  int64_t epochs_without_improvement = 0;
  // The last epoch end's metrics.csv row and events.jsonl line, so that a resumed run writes them
  // when a crash came between last.h5 and the logs.
  std::vector<std::string> epoch_row;
  json epoch_event;
  // Every slide skipped so far (manifest, train, val) with phase, epoch and reason: summary.json.
  std::vector<json> skipped;
  // A validation stopped at a tile (one process): the val slides before val_next are done, their
  // results in val_done, so that the resumed run validates only the rest.
  int64_t val_next = 0;
  std::vector<SlideResult> val_done;
  int64_t peak_bytes = -1;  // the measured peak over every part of the run so far

  json to_json() const {
    return {{"epoch", epoch},
            {"slide", slide},
            {"step", step},
            {"batch_slides", batch_slides},
            {"train_loss_sum", train_loss_sum},
            {"train_probabilities", train_probabilities},
            {"train_labels", train_labels},
            {"best_epoch", best_epoch},
            {"best_metric", best_metric},
            {"epochs_without_improvement", epochs_without_improvement},
            {"epoch_row", epoch_row},
            {"epoch_event", epoch_event},
            {"skipped", skipped},
            {"val_next", val_next},
            {"peak_bytes", peak_bytes},
            {"val_done", [&] {
               json a = json::array();
               for (const SlideResult& r : val_done) a.push_back(result_json(r));
               return a;
             }()}};
  }
  static Position from_json(const json& j) {
    Position p;
    p.epoch = j.at("epoch");
    p.slide = j.at("slide");
    p.step = j.at("step");
    p.batch_slides = j.at("batch_slides");
    p.train_loss_sum = j.at("train_loss_sum");
    p.train_probabilities = j.at("train_probabilities").get<std::vector<std::vector<double>>>();
    p.train_labels = j.at("train_labels").get<std::vector<int64_t>>();
    p.best_epoch = j.at("best_epoch");
    p.best_metric = j.at("best_metric");
    p.epochs_without_improvement = j.at("epochs_without_improvement");
    // Absent from checkpoints of Tessel before 0.x's crash-safe epoch end.
    p.epoch_row = j.value("epoch_row", std::vector<std::string>());
    p.epoch_event = j.value("epoch_event", json());
    p.skipped = j.value("skipped", std::vector<json>());
    p.val_next = j.value("val_next", int64_t{0});
    p.peak_bytes = j.value("peak_bytes", int64_t{-1});
    for (const json& r : j.value("val_done", json::array())) p.val_done.push_back(slide_result(r));
    return p;
  }
};

constexpr const char* kAccumulatedGrad = ".accumulated_grad";

// The validation an epoch's events.jsonl line records (null: not a number), for the summary of a
// resumed run whose last validation an earlier part of the run made.
ClassificationMetrics last_validation(const json& event) {
  ClassificationMetrics m;
  if (!event.is_object()) return m;
  const auto number = [&](const char* key) {
    return event.contains(key) && event[key].is_number() ? event[key].get<double>()
                                                         : std::numeric_limits<double>::quiet_NaN();
  };
  m.loss = number("val_loss");
  m.accuracy = number("val_accuracy");
  m.balanced_accuracy = number("val_balanced_accuracy");
  m.auc = number("val_auc");
  m.count = event.value("val_slides", int64_t{0});
  return m;
}

std::vector<std::string> metrics_header() {
  return {"epoch",
          "lr",
          "train_loss",
          "train_accuracy",
          "val_loss",
          "val_accuracy",
          "val_balanced_accuracy",
          "val_auc",
          "best",
          "seconds",
          "measured_peak_bytes"};
}

// Thrown from the engine's tile events when TrainRequest::stop_now is set; not a tessel::Error,
// so that no handler takes it for a slide that cannot be read.
struct StoppedAtTile {};

// The engine's events passed on to the run's observer, and the run's stop_now honoured as each
// tile finishes: the engine unwinds from there as from a slide that fails to read. At a tile's
// end, not its start, so that the slide stopped in has shown a finished tile.
class StopAtTile : public core::Observer {
 public:
  StopAtTile(core::Observer* next, const std::atomic<bool>* stop_now)
      : next_(next), stop_now_(stop_now) {}
  void on_tile(const core::TileEvent& e) override {
    if (next_ != nullptr) next_->on_tile(e);
    if (e.done && stop_now_ != nullptr && stop_now_->load()) throw StoppedAtTile{};
  }
  void on_memory(const core::MemorySample& m) override {
    if (next_ != nullptr) next_->on_memory(m);
  }

 private:
  core::Observer* next_;
  const std::atomic<bool>* stop_now_;
};

// A slide opened for a step: its input, the plan for it (in the run's cache), and the seconds
// opening took wherever it ran.
struct Opened {
  SlideInput input;
  const core::Plan* plan = nullptr;
  double seconds = 0;
};

// The next train slide this rank trains, and the one opening ahead of its turn.
struct Upcoming {
  const io::ManifestEntry* entry;
  int64_t index;  // in its phase of the epoch
  View view;
};
// TrainConfig::read_ahead on `device`: slides opened ahead of their turn.
int64_t read_ahead_slides(const std::string& setting, const c10::Device& device) {
  if (setting != "auto") return std::stoi(setting);
  if (device.is_cpu()) return 1;  // the step takes every core: one opening beside it
  return std::clamp<int64_t>(core::hardware_threads() / 4, 1, 4);
}

// The FLOPs a training step under `plan` runs, as the planner prices them (PlanCost::compute):
// the forward, and the backward as 3× its tiles' forward (their recompute and both gradients),
// halos and barriers' passes included, glass not run left out.
double executed_flops(const core::Plan& plan) {
  if (plan.strategy == core::Strategy::kNone) return 3.0 * static_cast<double>(plan.plain_flops);
  return plan.cost.compute;
}

// A slide opening ahead whose plan asks for the offload prices before they are measured: opened
// in turn instead (the measurement runs on the device, which the step is using).
struct OpenInTurn {};
thread_local bool t_opening_ahead = false;

struct Ahead {
  int64_t index;
  std::future<Opened> opened;
};

class Trainer {
 public:
  explicit Trainer(const TrainRequest& request)
      : request_(request),
        config_(request.config),
        run_dir_(config_.output),
        communicator_(request.communicator),
        rank_(communicator_ != nullptr ? communicator_->rank() : 0),
        world_(communicator_ != nullptr ? communicator_->world_size() : 1),
        step_observer_(request.observer, communicator_ == nullptr ? request.stop_now : nullptr) {}

  ~Trainer() {
    // A rank's scratch subfolder, when empty (its scratch files are removed with each step's
    // store).
    std::error_code error;
    if (world_ > 1 && !scratch_dir_.empty()) fs::remove(scratch_dir_, error);
  }

  TrainSummary run() {
    run_start_ = Clock::now();
    // An explicit scratch directory is a command-line option: checked first, like the config.
    scratch_dir_ = request_.scratch_dir.empty() ? run_dir_ : request_.scratch_dir;
    // Ranks on other nodes sharing the folder would take each other's scratch files for those of
    // dead processes (the store knows pids, not hosts): one subfolder per rank.
    if (world_ > 1) scratch_dir_ /= fmt::format("scratch-rank{}", rank_);
    if (!request_.scratch_dir.empty()) core::TileStore::check_scratch_dir(scratch_dir_);
    device_ = core::resolve_device(config_.device);  // a GPU that is not there: before anything
    if (communicator_ != nullptr && device_.is_cuda()) {
      // One GPU per rank on a node (device auto or cuda): rank's local rank mod the GPUs.
      const int gpu = rank_gpu(config_.device, communicator_->local_rank(),
                               static_cast<int>(core::device_report().gpus.size()));
      if (gpu >= 0) device_ = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(gpu));
    }
    join_slide_group();
    load_data();  // before the run folder: a bad manifest leaves no run folder behind
    prepare_run_dir();
    if (request_.scratch_dir.empty()) core::TileStore::check_scratch_dir(scratch_dir_);
    spdlog::info("{}", data_summary_);
    if (!parallel_summary_.empty()) spdlog::info("{}", parallel_summary_);
    build_model();
    if (request_.resume) resume();
    if (communicator_ != nullptr) {
      // Every rank starts from rank 0's weights, whatever it initialised or read.
      std::vector<at::Tensor> weights;
      for (const io::NamedTensor& w : io::named_weights(graph_->module())) {
        weights.push_back(w.tensor);
      }
      at::NoGradGuard no_grad;
      communicator_->broadcast(weights);
      if (config_.batch < groups_) {
        spdlog::warn(
            "batch {} < {} {}: each step trains {} slide(s), so {} {} idle; set batch to a "
            "multiple of {}",
            config_.batch, groups_, slide_ranks_ > 1 ? "slide groups" : "ranks", config_.batch,
            groups_ - config_.batch, slide_ranks_ > 1 ? "group(s)" : "rank(s)",
            slide_ranks_ > 1 ? "the group count" : "the rank count");
      }
    }

    TrainSummary summary;
    summary.run_dir = run_dir_;
    if (request_.resume) summary.last_val = last_validation(position_.epoch_event);
    // Linear in the manifest's rows (200k missing files once took minutes here).
    std::map<std::string, std::string> reasons;
    for (const io::ManifestProblem& p : manifest_.problems) reasons[p.slide] = p.reason;
    std::set<std::string> noted;  // a resumed run's position has the manifest's skips already
    for (const json& s : position_.skipped) {
      if (s["phase"] == "manifest") noted.insert(s["slide"].get<std::string>());
    }
    for (const io::ManifestEntry& e : manifest_.skipped) {
      if (noted.contains(e.slide.string())) continue;
      const auto reason = reasons.find(e.slide.string());
      note_skipped(e, "manifest", reason != reasons.end() ? reason->second : "unreadable");
    }
    try {
      train_epochs(summary);
    } catch (const RunError& e) {
      // The run's record says why it ended, beside what it did until then.
      summary.error = e.what();
      finish_summary(summary);
      throw;
    }
    finish_summary(summary);
    // A rank lost at the very end still fails the others.
    if (communicator_ != nullptr) communicator_->barrier();
    return summary;
  }

 private:
  void train_epochs(TrainSummary& summary) {
    // A resumed run that had stopped early is finished.
    summary.stopped_early =
        config_.patience > 0 && position_.epochs_without_improvement >= config_.patience;
    if (summary.stopped_early) return;
    for (; position_.epoch < config_.epochs; ++position_.epoch) {
      const auto epoch_start = Clock::now();
      if (!train_epoch()) {
        summary.interrupted = true;
        break;
      }
      EpochReport report;
      try {
        report = finish_epoch();
      } catch (const StoppedAtTile&) {
        // finish_epoch changes nothing before its validation: last.h5 holds the epoch trained
        // and the val slides validated so far.
        save_checkpoint("last.h5");
        spdlog::info(
            "stopped on request in the validation of epoch {} after {} of {} slide(s); {} holds "
            "the position (continue with --resume {})",
            position_.epoch + 1, position_.val_next, val_.size(),
            (run_dir_ / "checkpoints" / "last.h5").string(), run_dir_.string());
        summary.interrupted = true;
        break;
      }
      report.seconds = seconds_since(epoch_start);
      summary.last_val = report.val;
      // The record of a run in progress (state "running"): what a run that dies leaves.
      finish_summary(summary, /*running=*/true);
      if (request_.observer) request_.observer->on_epoch(report);
      if (agreed_stop() && position_.epoch + 1 < config_.epochs) {
        ++position_.epoch;  // last.h5 holds the start of the next epoch
        summary.interrupted = true;
        spdlog::info("stopped on request after epoch {}; continue with --resume {}",
                     position_.epoch, run_dir_.string());
        break;
      }
      if (config_.patience > 0 && position_.epochs_without_improvement >= config_.patience) {
        spdlog::info("early stop: {} epoch(s) without a better validation {}", config_.patience,
                     config_.metric);
        summary.stopped_early = true;
        ++position_.epoch;
        break;
      }
    }
  }

  // `running`: written at an epoch's end, where position_.epoch is still the epoch just finished.
  void finish_summary(TrainSummary& summary, bool running = false) {
    summary.epochs_done = position_.epoch + (running ? 1 : 0);
    summary.steps = position_.step;
    summary.best_epoch = position_.best_epoch;
    summary.best_metric = position_.best_metric;
    summary.seconds = seconds_since(run_start_);
    std::set<std::string> slides;
    for (const json& s : position_.skipped) slides.insert(s["slide"].get<std::string>());
    summary.skipped_slides = static_cast<int64_t>(slides.size());
    if (lead()) write_summary(summary, running);
  }

  void prepare_run_dir() {
    std::error_code error;
    fs::create_directories(run_dir_ / "checkpoints", error);
    if (error) {
      throw Error("cannot create the run folder " + run_dir_.string() + ": " + error.message());
    }
    // Before anything in the folder is read or written: one run at a time (rank 0 for all ranks).
    if (lead()) run_lock_ = std::make_unique<RunLock>(run_dir_);
    if (!request_.resume && fs::exists(run_dir_ / "checkpoints" / "last.h5")) {
      throw Error("the run folder " + run_dir_.string() +
                  " already holds a run; continue it with --resume, or choose another output");
    }
    if (request_.resume && !fs::exists(run_dir_ / "checkpoints" / "last.h5")) {
      throw Error("cannot resume: " + (run_dir_ / "checkpoints" / "last.h5").string() +
                  " does not exist");
    }
    // Rank 0 writes the run's files; the others only their own log and slide events. A fresh
    // start (no last.h5: an earlier start died before its first checkpoint) begins the records
    // anew, so they hold each slide and epoch once.
    const fs::path events =
        run_dir_ / (lead() ? "events.jsonl" : fmt::format("events.rank{}.jsonl", rank_));
    if (!request_.resume) {
      fs::remove(events, error);
      if (lead()) fs::remove(run_dir_ / "metrics.csv", error);
    }
    log_file_ = std::make_unique<RunLogFile>(
        run_dir_ / (lead() ? "train.log" : fmt::format("train.rank{}.log", rank_)));
    events_ = std::make_unique<JsonLines>(events);
    if (!lead()) return;
    // A resumed run's config.yaml is rewritten only once last.h5 has accepted the config
    // (resume()): a model or classes that do not fit would otherwise leave a folder that no
    // longer resumes.
    if (!request_.resume) write_text_atomically(run_dir_ / "config.yaml", config_.to_yaml());
    metrics_csv_ = std::make_unique<CsvLog>(run_dir_ / "metrics.csv", metrics_header());
  }

  void load_data() {
    io::ManifestOptions options;
    options.classes = config_.classes;
    manifest_ = io::load_manifest(config_.manifest, options);
    if (!manifest_.has_split_column) {
      io::assign_splits(manifest_, config_.val_fraction, config_.test_fraction,
                        static_cast<uint64_t>(config_.seed));
    }
    // The first few, then a count: 200k missing files once printed 200k lines.
    constexpr size_t kShown = 10;
    for (size_t i = 0; i < manifest_.problems.size() && i < kShown; ++i) {
      spdlog::warn("{}: {}", config_.manifest.string(),
                   (std::ostringstream() << manifest_.problems[i]).str());
    }
    if (manifest_.problems.size() > kShown) {
      spdlog::warn(
          "{}: {} more problems (`tessel manifest check {}` lists every one; summary.json "
          "names each skipped slide)",
          config_.manifest.string(), manifest_.problems.size() - kShown, config_.manifest.string());
    }
    const std::string unusable = manifest_.unusable_reason();
    if (!unusable.empty()) {
      throw Error("manifest " + config_.manifest.string() + " cannot be used: " + unusable);
    }
    for (const io::ManifestEntry& e : manifest_.entries) {
      (e.split == io::Split::kTrain ? train_
       : e.split == io::Split::kVal ? val_
                                    : test_)
          .push_back(&e);
    }
    if (train_.empty())
      throw Error("manifest " + config_.manifest.string() + " has no train slides");
    std::string classes;
    for (size_t i = 0; i < manifest_.classes.size(); ++i) {
      classes += (i ? ", " : "") + std::to_string(i) + " " + manifest_.classes[i];
    }
    data_summary_ = fmt::format(
        "classes: {} · slides: {} train, {} val, {} test{}", classes, train_.size(), val_.size(),
        test_.size(),
        manifest_.skipped.empty() ? std::string()
                                  : " · " + std::to_string(manifest_.skipped.size()) + " skipped");
    if (manifest_.classes.size() < 2) {
      throw Error("manifest " + config_.manifest.string() +
                  " has one class only; a classifier needs at least two");
    }
    // Loss weights for `balance: weighted` and `class_weights: auto`: N / (K · n_k) over the
    // train split; `class_weights: [...]` as given.
    std::vector<double> counts(manifest_.classes.size(), 0);
    for (const io::ManifestEntry* e : train_) counts[static_cast<size_t>(e->class_index)] += 1;
    std::vector<double> weights(counts.size(), 1.0);
    if (config_.class_weights_mode == "list") {
      if (config_.class_weights.size() != counts.size()) {
        std::string names;
        for (const std::string& c : manifest_.classes) names += (names.empty() ? "" : ", ") + c;
        throw Error("class_weights has " + std::to_string(config_.class_weights.size()) +
                    " numbers for the manifest's " + std::to_string(counts.size()) + " classes (" +
                    names + ")");
      }
      weights = config_.class_weights;
    } else if (config_.balance == "weighted" || config_.class_weights_mode == "auto") {
      double present = 0;
      for (double n : counts) present += n > 0 ? 1 : 0;
      for (size_t k = 0; k < counts.size(); ++k) {
        weights[k] = counts[k] > 0 ? static_cast<double>(train_.size()) / (present * counts[k]) : 0;
      }
    }
    class_weights_ = at::tensor(weights, at::kFloat);
  }

  // init_weights starts a run from another run's trunk: every parameter but the head's (the
  // classifier and the attention network, which may be the run's own, e.g. for other classes)
  // must come from the checkpoint, or the run would train a mix of loaded and random weights.
  void require_whole_trunk(const io::WeightLoadReport& report) const {
    using models::in_head;
    std::vector<std::string> unfilled;
    for (const std::string& name : report.missing) {
      if (!in_head(name)) unfilled.push_back(name + " (not in the checkpoint)");
    }
    for (const std::string& line : report.mismatched) {  // "name: shape in the weights, ..."
      if (!in_head(line.substr(0, line.find(':')))) unfilled.push_back(line);
    }
    if (unfilled.empty()) return;
    throw Error(fmt::format(
        "init_weights {} does not fit model '{}': {} of its {} trunk parameters cannot be taken "
        "from it (the first: {}); was it trained with another model?",
        config_.init_weights.string(), config_.model, unfilled.size(),
        unfilled.size() + std::count_if(report.loaded.begin(), report.loaded.end(),
                                        [&](const std::string& n) { return !in_head(n); }),
        unfilled.front()));
  }

  void build_model() {
    precision_ = core::parse_precision(config_.precision);
    const std::string slow = core::slow_precision_reason(device_, precision_);
    if (!slow.empty())
      spdlog::warn("precision {} on {}: {}", config_.precision, device_.str(), slow);
    const models::ModelOptions options =
        model_options(config_, static_cast<int64_t>(manifest_.classes.size()));
    Network network = build_network(config_.model, options);
    graph_ = std::make_unique<core::Graph>(std::move(network.graph));
    trunk_ = std::move(network.trunk);
    graph_->init_parameters(static_cast<uint64_t>(config_.seed));
    if (config_.init_weights.empty() && !network.trunk_weights.empty() && !request_.resume) {
      // A network from a file starts from the file's weights; the head is the run's own.
      io::WeightLoadReport report;
      try {
        report = io::load_weights(graph_->module(), network.trunk_weights, /*strict=*/false);
      } catch (const Error& e) {
        throw Error("cannot take the weights of " + config_.model + ": " + e.what());
      }
      spdlog::info("initial weights from {}: {}", config_.model, report.to_string());
    }
    if (!config_.init_weights.empty()) {
      const io::CheckpointState initial = io::read_checkpoint(config_.init_weights);
      io::WeightLoadReport report;
      try {
        report = io::load_weights(graph_->module(), initial.weights, /*strict=*/false);
      } catch (const Error& e) {
        throw Error("cannot take the initial weights from " + config_.init_weights.string() + ": " +
                    e.what());
      }
      spdlog::info("initial weights from {}: {}", config_.init_weights.string(),
                   report.to_string());
      require_whole_trunk(report);
    }
    // Weights, gradients and optimizer state live on the device; checkpoints are written from it.
    graph_->module().to(device_);
    optimizer_ = make_optimizer(config_, graph_->module());
    core::MemoryTracker::install();
    budget_bytes_ = core::parse_bytes(config_.budget);
    check_budget_fits_device();
    spdlog::info("training on {} in {}, budget {}", core::describe(device_), config_.precision,
                 core::format_bytes(budget_bytes_));
    ahead_slides_ = read_ahead_slides(config_.read_ahead, device_);
    spdlog::info("slides opened ahead of their turn: {} (read_ahead: {})", ahead_slides_,
                 config_.read_ahead);
    plan_options_ = training_plan_options(config_);
    // Asked for by the planner only when it prices offloading plans (no plan with every
    // checkpoint resident fits, or the resident one recomputes much); measured once per process
    // and scratch directory (core/store/offload_prices.h).
    plan_options_.prices.measure = [this] {
      // Measured on the device, beside a step they would disturb (and take memory from): on the
      // training thread only, where a read-ahead's plan first asks (take_opened).
      if (t_opening_ahead && !prices_measured_) throw OpenInTurn{};
      const core::OffloadPrices p =
          core::measure_offload_prices(plan_options_.auto_tier, scratch_dir_, device_);
      if (!prices_logged_) {
        spdlog::info(
            "offload prices measured for the {} tier in {}: {:.3g} ns per "
            "byte moved there and back, {:.3g} GFLOP/s of recompute",
            core::to_string(plan_options_.auto_tier), scratch_dir_.string(),
            p.seconds_per_byte_moved * 1e9, 1e-9 / p.seconds_per_flop);
        prices_logged_ = true;
      }
      prices_measured_ = true;
      return p;
    };
  }

  // A budget beyond what the GPU has free would run into out-of-memory errors mid-epoch.
  void check_budget_fits_device() const {
    const core::DeviceMemory m = core::device_memory(device_);
    if (m.free_bytes < 0 || budget_bytes_ <= m.free_bytes) return;
    throw Error("budget " + core::format_bytes(budget_bytes_) + " is more than " +
                core::describe(device_) + " has free (" + core::format_bytes(m.free_bytes) +
                " of " + core::format_bytes(m.total_bytes) + "); lower `budget`");
  }

  // An out-of-memory inside a step (fragmentation, another process on the GPU) as a message with
  // the numbers; the run stops there, its checkpoints as the last finished epoch left them.
  OutOfDeviceMemory out_of_memory(const io::ManifestEntry& entry, const SlideProgress& progress,
                                  const c10::OutOfMemoryError& e) const {
    const core::MemoryReading r = core::memory_reading(device_);
    const core::DeviceMemory m = core::device_memory(device_);
    return OutOfDeviceMemory(fmt::format(
        "out of memory on {} in {} ({}×{}): the plan predicted {} within the budget {}; the "
        "allocator held {} ({} in use), the device had {} free of {}. Lower `budget` or free the "
        "GPU, then continue with --resume {} ({})",
        core::describe(device_), entry.slide.string(), progress.width, progress.height,
        core::format_bytes(progress.predicted_peak_bytes), core::format_bytes(budget_bytes_),
        core::format_bytes(r.reserved), core::format_bytes(r.live),
        core::format_bytes(m.free_bytes), core::format_bytes(m.total_bytes), run_dir_.string(),
        first_line(e.what())));
  }

  // Stops the run at the first non-finite loss or gradient, before an optimizer step takes it
  // into the weights: the checkpoints keep the last good state (lr: inf, lr: 1e30 trained on).
  void check_finite(const core::StepResult& r, const io::ManifestEntry& entry, int64_t index) {
    at::Tensor finite = at::isfinite(r.loss).all();
    for (const at::Tensor& p : graph_->module().parameters()) {
      if (p.grad().defined()) finite = finite.logical_and(at::isfinite(p.grad()).all());
    }
    if (finite.item<bool>()) return;
    std::string message = fmt::format(
        "training diverged at step {} (epoch {}, slide {} of the epoch, {}): the loss is {} or "
        "a gradient is not finite; the weights were not updated and the checkpoints hold the last "
        "finished epoch. Lower `lr` (now {:g}), then start again or continue with --resume {}",
        position_.step + 1, position_.epoch + 1, index + 1, entry.slide.string(),
        r.loss.item<double>(), lr_, run_dir_.string());
    // With several ranks every rank must stop, at the batch's collective call (record_batch):
    // one rank leaving alone would let the others wait out the timeout and blame a lost rank.
    if (communicator_ != nullptr) {
      if (diverged_.empty()) diverged_ = std::move(message);
      return;
    }
    throw Diverged(message);
  }

  void note_skipped(const io::ManifestEntry& entry, const std::string& phase,
                    const std::string& reason) {
    position_.skipped.push_back({{"slide", entry.slide.string()},
                                 {"phase", phase},
                                 {"epoch", position_.epoch + 1},
                                 {"reason", reason}});
  }

  void resume() {
    const fs::path last = run_dir_ / "checkpoints" / "last.h5";
    const io::CheckpointState state = io::read_checkpoint(last);
    if (state.class_names != manifest_.classes) {
      const auto list = [](const std::vector<std::string>& names) {
        std::string text;
        for (const std::string& n : names) text += (text.empty() ? "" : ", ") + n;
        return "[" + text + "]";
      };
      throw Error("cannot resume from " + last.string() + ": it was trained on the classes " +
                  list(state.class_names) + ", the manifest " + config_.manifest.string() +
                  " has " + list(manifest_.classes) +
                  " (set `classes` in the config when only the order differs)");
    }
    try {
      io::load_weights(graph_->module(), state.weights, /*strict=*/true);
    } catch (const Error& e) {
      throw Error("cannot resume from " + last.string() + " with model '" + config_.model +
                  "': " + e.what());
    }
    std::vector<io::NamedTensor> optimizer_tensors;
    std::map<std::string, at::Tensor> accumulated;
    for (const io::NamedTensor& t : state.optimizer) {
      if (t.name.ends_with(kAccumulatedGrad)) {
        accumulated[t.name.substr(0, t.name.size() - std::string(kAccumulatedGrad).size())] =
            t.tensor.to(device_);
      } else {
        optimizer_tensors.push_back({t.name, t.tensor.to(device_)});
      }
    }
    restore_optimizer_state(config_, *optimizer_, graph_->module(), optimizer_tensors);
    // A checkpoint written mid-batch (by one process) holds the batch's gradient so far: rank 0
    // carries it, so that the sum over the ranks counts it once.
    for (auto& item : graph_->module().named_parameters()) {
      const auto it = accumulated.find(item.key());
      if (it != accumulated.end() && lead()) item.value().mutable_grad() = it->second.clone();
    }
    try {
      position_ = Position::from_json(json::parse(state.run_state));
    } catch (const json::exception& e) {
      throw Error("cannot resume from " + last.string() + ": its run state is unreadable (" +
                  e.what() + ")");
    }
    peak_bytes_ = position_.peak_bytes;
    spdlog::info("resuming {} at epoch {}, slide {} (step {})", run_dir_.string(),
                 position_.epoch + 1, position_.slide, position_.step);
    if (lead()) {
      write_text_atomically(run_dir_ / "config.yaml", config_.to_yaml());
      complete_epoch_end();
    } else {
      // This rank's slide lines past the position: trained again by the resumed run.
      repair_events(run_dir_ / fmt::format("events.rank{}.jsonl", rank_), position_.epoch,
                    position_.slide, json());
    }
  }

  // Brings the run folder to what last.h5 records, after a crash at any instant of an epoch end
  // (finish_epoch writes last.h5, then best.h5, the logs' lines, summary.json).
  void complete_epoch_end() {
    const fs::path checkpoints = run_dir_ / "checkpoints";
    remove_partial_files(checkpoints);
    remove_partial_files(run_dir_);
    // last.h5 at the end of the best epoch is best.h5's content, byte for byte.
    const fs::path best = checkpoints / "best.h5";
    if (position_.best_epoch > 0 && position_.best_epoch == position_.epoch &&
        position_.slide == 0) {
      // Compared by their headers (size and CRC-32), not by reading a large best.h5 whole.
      const std::string header = io::checkpoint_header(checkpoints / "last.h5");
      if (header.empty() || io::checkpoint_header(best) != header) {
        spdlog::warn("{} was not written (the run stopped at the end of epoch {}): copied from {}",
                     best.string(), position_.epoch, (checkpoints / "last.h5").string());
        io::copy_file_atomically(checkpoints / "last.h5", best, "checkpoint");
      }
    } else if (position_.best_epoch > 0 && !fs::exists(best)) {
      spdlog::warn("{} is missing (the best epoch was {}); it cannot be recovered", best.string(),
                   position_.best_epoch);
    }
    repair_metrics(run_dir_ / "metrics.csv", metrics_header(), position_.epoch,
                   position_.epoch_row);
    repair_events(run_dir_ / "events.jsonl", position_.epoch, position_.slide,
                  position_.epoch_event);
  }

  bool stop_requested() const { return request_.stop != nullptr && request_.stop->load(); }

  bool lead() const { return rank_ == 0; }

  // The group of ranks sharing each of this rank's slides (TrainConfig::parallel): every rank
  // for slide, groups of slide_ranks consecutive ranks for hybrid, none for data.
  void join_slide_group() {
    group_ = rank_;  // data: groups of one rank
    groups_ = world_;
    if (config_.parallel == "data") return;
    if (communicator_ == nullptr) {
      spdlog::info("parallel: {} in one process: each slide's step runs here whole",
                   config_.parallel);
      return;
    }
    slide_ranks_ = config_.parallel == "slide" ? world_ : static_cast<int>(config_.slide_ranks);
    if (config_.slide_ranks > world_ || world_ % slide_ranks_ != 0) {
      throw Error(fmt::format(
          "parallel: hybrid with slide_ranks {} cannot group the {} ranks of this job: give "
          "slide_ranks=N with N dividing {} (or parallel=slide, or parallel=data)",
          config_.slide_ranks, world_, world_));
    }
    group_ = rank_ / slide_ranks_;
    groups_ = world_ / slide_ranks_;
    if (slide_ranks_ == world_) {
      slide_group_ = communicator_;
    } else {
      own_group_ = communicator_->subgroup(slide_ranks_);
      slide_group_ = own_group_.get();
    }
    parallel_summary_ = fmt::format(
        "slide-parallel: {} group(s) of {} ranks; this rank is {} of group {}, which runs its "
        "share of the tiles of every step of its slides (validation: each rank its own slides)",
        groups_, slide_ranks_, slide_group_->rank(), group_ + 1);
  }

  // Whether this rank gives its group's results and gradients to the batch's sums (the ranks of
  // a slide group end each step with the same ones).
  bool reports() const { return slide_group_ == nullptr || slide_group_->rank() == 0; }

  // Whether to stop: with several ranks, whether any rank was asked to (a collective call).
  bool agreed_stop() {
    if (communicator_ == nullptr) return stop_requested();
    const at::Tensor flag = at::full({1}, stop_requested() ? 1.0 : 0.0, at::kDouble);
    communicator_->allreduce_sum({flag});
    return flag.item<double>() > 0;
  }

  // Every rank's results for the positions [begin, end) (each position trained by at most one
  // rank), in order. A table with a row per position, zero where a rank has no result, summed over
  // the ranks: adding zeros is exact, so every rank ends with the same numbers. `with` are summed
  // in the same collective call.
  std::vector<SlideResult> gathered(const std::vector<SlideResult>& mine, int64_t begin,
                                    int64_t end, std::vector<at::Tensor> with = {}) {
    if (communicator_ == nullptr || (end == begin && with.empty())) return mine;
    const auto classes = static_cast<int64_t>(manifest_.classes.size());
    at::Tensor table = at::zeros({end - begin, classes + 3}, at::kDouble);
    auto rows = table.accessor<double, 2>();
    for (const SlideResult& r : mine) {
      const int64_t row = r.index - begin;
      rows[row][0] = 1;
      rows[row][1] = r.loss;
      rows[row][2] = static_cast<double>(r.label);
      for (int64_t k = 0; k < classes; ++k)
        rows[row][3 + k] = r.probabilities[static_cast<size_t>(k)];
    }
    with.push_back(table);
    communicator_->allreduce_sum(with);
    std::vector<SlideResult> all;
    for (int64_t row = 0; row < end - begin; ++row) {
      if (rows[row][0] < 0.5) continue;
      SlideResult r{begin + row, {}, static_cast<int64_t>(std::lround(rows[row][2])), rows[row][1]};
      for (int64_t k = 0; k < classes; ++k) r.probabilities.push_back(rows[row][3 + k]);
      all.push_back(std::move(r));
    }
    return all;
  }

  // The batch's trained slides into the position, in order; with several ranks, the batch's
  // gradients summed over the ranks first.
  void record_batch(int64_t begin, int64_t end) {
    std::vector<at::Tensor> grads;
    if (communicator_ != nullptr) {
      for (at::Tensor& p : graph_->module().parameters()) {
        // A rank without a slide in this batch (or whose slides were skipped) adds zeros.
        if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
        // A slide group's ranks hold the same gradients: its first rank gives them.
        if (!reports()) p.mutable_grad().zero_();
        grads.push_back(p.grad());
      }
    }
    at::Tensor diverged;  // how many ranks saw a non-finite loss or gradient in the batch
    if (communicator_ != nullptr) {
      diverged = at::full({1}, diverged_.empty() ? 0.0 : 1.0, at::kDouble);
      grads.push_back(diverged);
    }
    const auto t0 = Clock::now();
    const std::vector<SlideResult> batch =
        gathered(reports() ? pending_ : std::vector<SlideResult>{}, begin, end, grads);
    if (communicator_ != nullptr) {
      allreduce_seconds_ += seconds_since(t0);
      ++allreduce_calls_;
      if (diverged.item<double>() > 0) {
        throw Diverged(!diverged_.empty()
                           ? diverged_
                           : fmt::format("training diverged at step {} (epoch {}) on another rank "
                                         "(its log names the slide); the weights were not updated",
                                         position_.step + 1, position_.epoch + 1));
      }
    }
    for (const SlideResult& r : batch) {
      position_.train_probabilities.push_back(r.probabilities);
      position_.train_labels.push_back(r.label);
      position_.train_loss_sum += r.loss;
      ++position_.batch_slides;
    }
    pending_.clear();
  }

  SlideOptions options_of(const io::ManifestEntry& entry) const {
    return slide_options(entry.metadata, manifest_.path, entry.line);
  }

  // The plan for a slide's image: by its size, and where it has a background whose glass the
  // step skips (tissue_fill, config key glass), by slide too: the planner picks tiles for its
  // glass (a flipped or rotated view of it gets the same plan; the step finds its glass tiles
  // anew, so only how many it finds can differ). `ranks`: the ranks that split its step (a split
  // step with barrier statistics computes its glass as tissue: the planner plans it dense).
  const core::Plan& plan_for(const core::TileSource& source, const std::string& slide, int ranks) {
    const int64_t height = source.height(), width = source.width();
    const core::Background* background = config_.glass ? source.background() : nullptr;
    const PlanKey key{height, width, background != nullptr ? slide : "", ranks};
    {
      const std::lock_guard lock(caches_);
      const auto it = plans_.find(key);
      if (it != plans_.end()) return it->second;
    }
    check_input_size(*graph_, config_, height, width);
    core::PlanOptions options = plan_options_;
    options.ranks = ranks;
    if (background != nullptr) {
      options.background = std::make_shared<core::CellMask>(background->cells);
    }
    core::Plan plan = core::make_plan(*graph_, {3, height, width}, budget_bytes_, options);
    spdlog::debug("plan for {}×{}:\n{}", width, height, core::to_string(plan, *graph_));
    if (plan.glass.any_background()) {
      const core::GlassSummary& g = plan.glass;
      spdlog::info(
          "{}: background {:.0f}% of the image; {} of {} tiles glass (computed once), {:.0f}% "
          "of the forward's FLOPs, {:.0f}% more filled in tiles that also see tissue",
          slide, 100.0 * g.image_fraction, g.glass_forward_tiles, g.forward_tiles,
          100.0 * g.flops_fraction, 100.0 * g.filled_fraction);
    }
    const std::lock_guard lock(caches_);
    return plans_.emplace(key, std::move(plan)).first->second;  // one made meanwhile stays
  }

  // Whether a step of `plan` over `ranks` skips its glass (the executor's choice: Step's
  // find_glass), for the pixels it reads first.
  bool skips_glass(const core::Plan& plan, int ranks) const {
    return config_.glass &&
           (ranks == 1 || core::glass_split_refusal(*graph_, plan, /*training=*/true).empty());
  }

  // The train split's order for this epoch: shuffled, or balanced draws by class.
  std::vector<const io::ManifestEntry*> epoch_order() {
    std::mt19937_64 rng(
        stream(static_cast<uint64_t>(config_.seed), position_.epoch, 0, kOrderStream));
    std::vector<const io::ManifestEntry*> order;
    if (config_.balance == "sampling") {
      std::map<int, std::vector<const io::ManifestEntry*>> by_class;
      for (const io::ManifestEntry* e : train_) by_class[e->class_index].push_back(e);
      std::vector<const std::vector<const io::ManifestEntry*>*> classes;
      for (const auto& [k, entries] : by_class) classes.push_back(&entries);
      for (size_t i = 0; i < train_.size(); ++i) {
        const auto& pool = *classes[rng() % classes.size()];
        order.push_back(pool[rng() % pool.size()]);
      }
    } else {
      for (size_t i : shuffled(train_.size(), rng)) order.push_back(train_[i]);
    }
    return order;
  }

  // Whether train slide `i` of an epoch is this rank's (slides of a batch go round the ranks, or
  // round the slide groups, whose ranks all train each of their slides).
  bool mine(int64_t i) const { return (i % config_.batch) % groups_ == group_; }

  // The slides this rank trains after slide `i` of `order` that open ahead of their turn
  // (TrainConfig::read_ahead).
  std::vector<Upcoming> upcoming(const std::vector<const io::ManifestEntry*>& order,
                                 int64_t i) const {
    std::vector<Upcoming> out;
    for (auto j = static_cast<size_t>(i + 1);
         j < order.size() && static_cast<int64_t>(out.size()) < ahead_slides_; ++j) {
      const auto k = static_cast<int64_t>(j);
      if (mine(k)) out.push_back({order[j], k, view_of(k)});
    }
    return out;
  }

  // Trains the rest of the current epoch; false when stopped on request.
  bool train_epoch() {
    // Slides read ahead in an epoch that stopped are not the next epoch's (nor a resumed one's).
    struct DropAhead {
      std::deque<Ahead>& ahead;
      ~DropAhead() { ahead.clear(); }
    } drop{ahead_};
    const std::vector<const io::ManifestEntry*> order = epoch_order();
    const auto count = static_cast<int64_t>(order.size());
    if (position_.slide == 0) {
      position_.train_loss_sum = 0;
      position_.train_probabilities.clear();
      position_.train_labels.clear();
      optimizer_->zero_grad();
    }
    for (; position_.slide < count; ++position_.slide) {
      const int64_t i = position_.slide;
      const int64_t batch_start = i - i % config_.batch;
      // The rate of the optimizer step this slide's gradient goes into.
      lr_ = learning_rate(config_, position_.epoch,
                          static_cast<double>(batch_start) / static_cast<double>(count));
      if (mine(i)) {
        try {
          train_slide(*order[static_cast<size_t>(i)], i, count, upcoming(order, i));
        } catch (const StoppedAtTile&) {
          save_checkpoint("last.h5");  // position_.slide is i: this slide again on resume
          spdlog::info(
              "stopped on request in slide {} of epoch {}, at a tile boundary; {} holds the "
              "position before it (the slide is trained again; continue with --resume {})",
              i + 1, position_.epoch + 1, (run_dir_ / "checkpoints" / "last.h5").string(),
              run_dir_.string());
          return false;
        }
      }
      const bool batch_end = (i + 1) % config_.batch == 0 || i + 1 == count;
      // One process records each slide at once (a stop mid-batch saves it); several ranks once
      // per batch, in one collective call with the gradients.
      if (communicator_ == nullptr || batch_end) {
        record_batch(communicator_ != nullptr ? batch_start : i, i + 1);
      }
      // The optimizer steps after every `batch` slides and after the epoch's last slide, unless
      // every slide of the batch was skipped (a step on zero gradients would still move Adam's
      // and momentum's weights).
      if (batch_end) {
        if (position_.batch_slides > 0) {
          set_learning_rate(*optimizer_, lr_);
          optimizer_->step();
          ++position_.step;
        }
        optimizer_->zero_grad();
        position_.batch_slides = 0;
      }
      // Several ranks agree to stop at a step's end, so that no rank holds half a batch.
      const bool stop = communicator_ == nullptr ? stop_requested() : batch_end && agreed_stop();
      if (stop && i + 1 < count) {
        ++position_.slide;
        save_checkpoint("last.h5");
        spdlog::info(
            "stopped on request after slide {} of epoch {}; {} holds the position "
            "(continue with --resume {})",
            i + 1, position_.epoch + 1, (run_dir_ / "checkpoints" / "last.h5").string(),
            run_dir_.string());
        return false;
      }
    }
    return true;
  }

  // Training and validation steps: progress to the observer, offloaded checkpoints to the run's
  // scratch directory.
  core::StepOptions step_options() const {
    core::StepOptions options;
    options.observer = &step_observer_;
    options.scratch_dir = scratch_dir_;
    options.precision = precision_;
    options.inject = request_.inject;
    options.glass = config_.glass;
    return options;
  }

  // Train slide `index`'s view of its slide (flips, rotations, colour): drawn from its own
  // stream, so that a slide read ahead sees what it would have seen opened in turn.
  View view_of(int64_t index) const {
    std::mt19937_64 view_rng(
        stream(static_cast<uint64_t>(config_.seed), position_.epoch, index, kViewStream));
    return random_view({}, config_.flips, config_.rotations, config_.color_jitter, view_rng);
  }

  // Opens `entry`'s slide through `view` and plans for it, on whichever thread, several at once
  // (the run's caches of masks and plans are shared under caches_). With `read_pixels`, the
  // pixels the step's first tiles read are scheduled on the slide's reader threads. `ranks`: the
  // ranks that split its step (plan_for).
  Opened open_and_plan(const io::ManifestEntry& entry, const View& view, bool read_pixels,
                       int ranks) {
    const auto t0 = Clock::now();
    TissueMaskCache masks;  // this slide's, from the run's cache and back to it
    {
      const std::lock_guard lock(caches_);
      const auto it = tissue_masks_.find(entry.slide.string());
      if (it != tissue_masks_.end()) masks.insert(*it);
    }
    Opened o{open_slide_input(config_, entry.slide, options_of(entry), view, &masks)};
    {
      const std::lock_guard lock(caches_);
      tissue_masks_.insert(masks.begin(), masks.end());
    }
    o.plan = &plan_for(*o.input.view, entry.slide.string(), ranks);
    if (read_pixels) {
      o.input.view->will_read(first_reads(*graph_, *o.plan, *o.input.view,
                                          skips_glass(*o.plan, ranks),
                                          ranks > 1 ? slide_group_->rank() : 0, ranks));
    }
    o.seconds = seconds_since(t0);
    return o;
  }

  // Slide `now` of this epoch opened: the one read ahead, or opened now; the slides `next`
  // (upcoming's) opening meanwhile, each planned for `ranks` (plan_for). Errors opening it are
  // thrown here.
  Opened take_opened(std::deque<Ahead>& ahead, const Upcoming& now,
                     const std::vector<Upcoming>& next, int ranks, double& waited) {
    const auto t0 = Clock::now();
    const int64_t index = now.index;
    // Openings of slides before this one (skipped ones'): dropped, once finished.
    while (!ahead.empty() && ahead.front().index < index) ahead.pop_front();
    std::optional<Ahead> mine;
    if (!ahead.empty() && ahead.front().index == index) {
      mine = std::move(ahead.front());
      ahead.pop_front();
    }
    for (const Upcoming& u : next) {
      if (!ahead.empty() && u.index <= ahead.back().index) continue;  // opening already
      ahead.push_back(
          {u.index, std::async(std::launch::async, [this, e = u.entry, v = u.view, ranks] {
             // Host bytes beside the step's: not its measured peak (budgets are
             // the step's).
             const core::MemoryTracker::Uncounted beside;
             t_opening_ahead = true;
             return open_and_plan(*e, v, true, ranks);
           })});
    }
    std::optional<Opened> o;
    if (mine) {
      try {
        o = mine->opened.get();
      } catch (const OpenInTurn&) {
      }
    }
    if (!o) o = open_and_plan(*now.entry, now.view, false, ranks);
    waited = seconds_since(t0);
    return std::move(*o);
  }

  // Trains one slide into the batch's gradients; false when it had to be skipped.
  bool train_slide(const io::ManifestEntry& entry, int64_t index, int64_t count,
                   const std::vector<Upcoming>& next) {
    const auto t0 = Clock::now();
    at::manual_seed(
        stream(static_cast<uint64_t>(config_.seed), position_.epoch, index, kTorchStream));
    SlideProgress progress{"train", position_.epoch + 1,        config_.epochs, index,
                           count,   io::slide_name(entry.slide)};
    double flops = 0;          // executed_flops
    int64_t summed_bytes = 0;  // given to the sums over the slide group's ranks
    // Gradients accumulate over a batch; a slide that fails halfway must not leave a part of
    // its gradient behind.
    std::vector<at::Tensor> saved_grads;
    for (const at::Tensor& p : graph_->module().parameters()) {
      saved_grads.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
    }
    try {
      const Opened opened = take_opened(ahead_, {&entry, index, view_of(index)}, next, slide_ranks_,
                                        progress.open_wait_seconds);
      const SlideInput& input = opened.input;
      const std::shared_ptr<core::TileSource>& source = input.view;
      progress.height = source->height();
      progress.width = source->width();
      const core::Plan& plan = *opened.plan;
      progress.predicted_peak_bytes = plan.predicted.total();
      progress.fixed_bytes = plan.predicted.total() - plan.predicted.step();
      progress.budget_bytes = budget_bytes_;
      progress.open_seconds = opened.seconds;
      flops = executed_flops(plan);
      if (request_.observer) request_.observer->on_slide(progress);

      const int64_t batch_start = index - index % config_.batch;
      const double batch_size = static_cast<double>(std::min(config_.batch, count - batch_start));
      const at::Tensor weights = class_weights_;
      const core::LossFn loss = [weights, batch_size](const at::Tensor& logits,
                                                      const at::Tensor& target) {
        // In float32 at least (bf16 logits under autocast), as autocast computes losses.
        const at::Tensor l = logits.to(at::promote_types(logits.scalar_type(), at::kFloat));
        return at::cross_entropy_loss(l, target, weights.to(l.options()), at::Reduction::Sum) /
               batch_size;
      };
      const at::Tensor target = at::tensor({static_cast<int64_t>(entry.class_index)}, at::kLong);
      core::StepResult r;
      const auto step_start = Clock::now();
      core::StepOptions options = step_options();
      // Spatial dropout's masks (core/exec/dropout.h): a resumed run draws the same.
      options.dropout_seed =
          stream(static_cast<uint64_t>(config_.seed), position_.epoch, index, kDropoutStream);
      if (slide_ranks_ > 1) options.ranks = slide_group_;
      try {
        r = core::train_step(*graph_, plan, *source, target.to(device_), loss, options);
      } catch (const c10::OutOfMemoryError& e) {
        throw out_of_memory(entry, progress, e);
      } catch (const Error& e) {
        if (slide_ranks_ == 1 || dynamic_cast<const RunError*>(&e) != nullptr) throw;
        // The other ranks of the group wait in the step's sums: skipping the slide here alone
        // would leave them waiting, and then out of step with this rank.
        throw RunError(fmt::format("{} failed in a step split over {} ranks: {}",
                                   entry.slide.string(), slide_ranks_, e.what()));
      }
      progress.step_seconds = seconds_since(step_start);
      check_finite(r, entry, index);
      // The slide's own (unweighted) cross-entropy, for the logs and the epoch's mean.
      const at::Tensor logits = r.logits.to(at::kCPU, at::kDouble);
      progress.loss = at::cross_entropy_loss(logits, target).item<double>();
      const at::Tensor p = at::softmax(logits, 1).flatten();
      pending_.push_back({index,
                          {p.data_ptr<double>(), p.data_ptr<double>() + p.numel()},
                          entry.class_index,
                          progress.loss});
      progress.tiles = r.forward_tiles + r.backward_tiles;
      summed_bytes = r.summed_bytes;
      progress.wait_seconds = static_cast<double>(input.pixels->cache_stats().wait_ns) * 1e-9;
      progress.measured_peak_bytes = r.measured_peak_bytes;
      peak_bytes_ = std::max(peak_bytes_, r.measured_peak_bytes);
    } catch (const RunError&) {
      throw;  // the scratch space, the device or the weights, not the slide
    } catch (const StoppedAtTile&) {
      auto params = graph_->module().parameters();
      for (size_t k = 0; k < params.size(); ++k) params[k].mutable_grad() = saved_grads[k];
      throw;
    } catch (const Error& e) {
      auto params = graph_->module().parameters();
      for (size_t k = 0; k < params.size(); ++k) params[k].mutable_grad() = saved_grads[k];
      spdlog::warn("skipping {} in epoch {}: {}", entry.slide.string(), position_.epoch + 1,
                   e.what());
      note_skipped(entry, "train", e.what());
      ++skipped_in_epoch_;
      return false;
    }
    progress.done = true;
    progress.seconds = seconds_since(t0);
    if (request_.observer) request_.observer->on_slide(progress);
    events_->write({{"type", "slide"},
                    {"phase", "train"},
                    {"epoch", progress.epoch},
                    {"index", index},
                    {"slide", progress.slide},
                    {"label", entry.label},
                    {"height", progress.height},
                    {"width", progress.width},
                    {"loss", progress.loss},
                    {"seconds", progress.seconds},
                    {"wait_seconds", progress.wait_seconds},
                    {"open_seconds", progress.open_seconds},
                    {"open_wait_seconds", progress.open_wait_seconds},
                    {"step_seconds", progress.step_seconds},
                    {"tiles", progress.tiles},
                    {"ranks", slide_ranks_},
                    {"summed_bytes", summed_bytes},
                    {"flops", flops},
                    {"lr", lr_},
                    {"step", position_.step},
                    {"measured_peak_bytes", progress.measured_peak_bytes},
                    {"predicted_peak_bytes", progress.predicted_peak_bytes}});
    return true;
  }

  // Validation over the val split: the network's probabilities per slide.
  // With several ranks, rank r validates slides r, r + N, ... and the results are gathered.
  // A Stop at a tile (one process only) leaves the slides done so far in position_, which
  // last.h5 keeps: the resumed run validates the rest with the same weights.
  ClassificationMetrics validate() {
    std::vector<SlideResult> mine = position_.val_done;
    const auto count = static_cast<int64_t>(val_.size());
    // The val slides this rank runs after slide `i`, opened ahead as train slides are.
    const auto upcoming_val = [&](int64_t i) {
      std::vector<Upcoming> out;
      for (int64_t j = i + world_; j < count && static_cast<int64_t>(out.size()) < ahead_slides_;
           j += world_) {
        out.push_back({val_[static_cast<size_t>(j)], j, View{}});
      }
      return out;
    };
    std::deque<Ahead> ahead;  // declared after what its openings use; finished when it goes
    for (int64_t i = rank_ + position_.val_next; i < count; i += world_) {
      const io::ManifestEntry& entry = *val_[static_cast<size_t>(i)];
      const auto t0 = Clock::now();
      SlideProgress progress{"val", position_.epoch + 1,        config_.epochs, i,
                             count, io::slide_name(entry.slide)};
      try {
        double waited = 0;
        // Whole on this rank: validation shares the slides, not their steps.
        const Opened opened = take_opened(ahead, {&entry, i, View{}}, upcoming_val(i), 1, waited);
        const std::shared_ptr<core::TileSource>& source = opened.input.view;
        progress.height = source->height();
        progress.width = source->width();
        const core::Plan& plan = *opened.plan;
        progress.predicted_peak_bytes = plan.predicted.total();
        progress.fixed_bytes = plan.predicted.total() - plan.predicted.step();
        progress.budget_bytes = budget_bytes_;
        if (request_.observer) request_.observer->on_slide(progress);
        at::Tensor logits;
        try {
          logits = core::infer(*graph_, plan, *source, step_options()).to(at::kCPU, at::kDouble);
        } catch (const c10::OutOfMemoryError& e) {
          throw out_of_memory(entry, progress, e);
        }
        const at::Tensor target = at::tensor({static_cast<int64_t>(entry.class_index)}, at::kLong);
        progress.loss = at::cross_entropy_loss(logits, target).item<double>();
        const at::Tensor p = at::softmax(logits, 1).flatten();
        mine.push_back({i,
                        {p.data_ptr<double>(), p.data_ptr<double>() + p.numel()},
                        entry.class_index,
                        progress.loss});
      } catch (const RunError&) {
        throw;
      } catch (const Error& e) {
        spdlog::warn("skipping {} in validation: {}", entry.slide.string(), e.what());
        note_skipped(entry, "val", e.what());
        note_validated(mine, i);
        continue;
      }
      note_validated(mine, i);
      progress.done = true;
      progress.seconds = seconds_since(t0);
      if (request_.observer) request_.observer->on_slide(progress);
    }
    position_.val_next = 0;
    position_.val_done.clear();
    std::vector<std::vector<double>> probabilities;
    std::vector<int64_t> labels;
    double loss_sum = 0;
    for (const SlideResult& r : gathered(mine, 0, count)) {
      probabilities.push_back(r.probabilities);
      labels.push_back(r.label);
      loss_sum += r.loss;
    }
    ClassificationMetrics m = classification_metrics(probabilities, labels);
    m.loss = labels.empty() ? std::nan("") : loss_sum / static_cast<double>(labels.size());
    return m;
  }

  // Val slide `i` done (or skipped): where a stopped validation resumes. Only one process can
  // be stopped at a tile (StopAtTile), so the others keep no partial state.
  void note_validated(const std::vector<SlideResult>& mine, int64_t i) {
    if (world_ != 1) return;
    position_.val_next = i + 1;
    position_.val_done = mine;
  }

  double metric_value(const ClassificationMetrics& m) const {
    if (config_.metric == "accuracy") return m.accuracy;
    if (config_.metric == "auc") return m.auc;
    if (config_.metric == "loss") return m.loss;
    return m.balanced_accuracy;
  }

  // " (the first: SLIDE: REASON)" of the slides skipped in `phase` this run, or "".
  std::string first_skipped(const std::string& phase) const {
    for (const json& s : position_.skipped) {
      if (s["phase"] == phase) {
        return " (the first: " + s["slide"].get<std::string>() + ": " +
               s["reason"].get<std::string>() + ")";
      }
    }
    return {};
  }

  EpochReport finish_epoch() {
    if (position_.train_labels.empty()) {
      // Exit 0 with untrained weights would be a false success.
      throw RunError(fmt::format(
          "no train slide could be used in epoch {}: all {} were skipped{}; nothing was trained",
          position_.epoch + 1, train_.size(), first_skipped("train")));
    }
    EpochReport report;
    report.epoch = position_.epoch + 1;
    report.epochs = config_.epochs;
    report.lr = lr_;
    report.train = classification_metrics(position_.train_probabilities, position_.train_labels);
    report.train_loss =
        position_.train_labels.empty()
            ? std::nan("")
            : position_.train_loss_sum / static_cast<double>(position_.train_labels.size());
    report.train.loss = report.train_loss;
    report.val = validate();
    if (!val_.empty() && report.val.count == 0) {
      // "finished" with no validation and no best.h5 would be a false success too.
      throw RunError(fmt::format(
          "no val slide could be used in epoch {}: all {} were skipped{}; nothing was validated, "
          "and the checkpoints keep the last validated epoch",
          position_.epoch + 1, val_.size(), first_skipped("val")));
    }
    if (report.val.count > 0) {
      const double value = metric_value(report.val);
      const bool lower_is_better = config_.metric == "loss";
      const bool better =
          !std::isnan(value) &&
          (position_.best_epoch == 0 ||
           (lower_is_better ? value < position_.best_metric : value > position_.best_metric));
      if (better) {
        position_.best_epoch = report.epoch;
        position_.best_metric = value;
        position_.epochs_without_improvement = 0;
        report.best = true;
      } else {
        ++position_.epochs_without_improvement;
      }
    }
    spdlog::info("epoch {}/{} · lr {:.3g} · train {} · val {}{}", report.epoch, report.epochs,
                 report.lr, to_string(report.train),
                 report.val.count > 0 ? to_string(report.val) : std::string("(no val split)"),
                 report.best ? " · best" : "");
    if (report.val.count > 0 && manifest_.classes.size() > 2) {
      spdlog::info("epoch {}/{} · val by class: {}", report.epoch, report.epochs,
                   per_class_string(report.val, manifest_.classes));
    }
    const auto number = [](double v) { return std::isnan(v) ? std::string() : std::to_string(v); };
    const auto nullable = [](double v) { return std::isnan(v) ? json() : json(v); };
    // {"class": value} of each class (null where undefined): the metrics per class, for more than
    // two classes especially.
    const auto per_class = [&](const std::vector<double>& values) {
      json out = json::object();
      for (size_t c = 0; c < values.size() && c < manifest_.classes.size(); ++c) {
        out[manifest_.classes[c]] = nullable(values[c]);
      }
      return out;
    };
    position_.epoch_row = {std::to_string(report.epoch),
                           number(report.lr),
                           number(report.train_loss),
                           number(report.train.accuracy),
                           number(report.val.loss),
                           number(report.val.accuracy),
                           number(report.val.balanced_accuracy),
                           number(report.val.auc),
                           report.best ? "1" : "0",
                           number(seconds_since(epoch_clock_)),
                           std::to_string(peak_bytes_)};
    position_.epoch_event = {{"type", "epoch"},
                             {"epoch", report.epoch},
                             {"lr", report.lr},
                             {"train_loss", nullable(report.train_loss)},
                             {"train_accuracy", nullable(report.train.accuracy)},
                             {"val_loss", nullable(report.val.loss)},
                             {"val_accuracy", nullable(report.val.accuracy)},
                             {"val_balanced_accuracy", nullable(report.val.balanced_accuracy)},
                             {"val_auc", nullable(report.val.auc)},
                             {"val_recall", per_class(report.val.recall)},
                             {"val_auc_per_class", per_class(report.val.auc_per_class)},
                             {"best", report.best},
                             {"measured_peak_bytes", peak_bytes_},
                             {"val_slides", report.val.count},
                             {"skipped", skipped_in_epoch_}};
    // The epoch is complete: the checkpoints hold the start of the next one. last.h5 is the
    // commit: everything written after it (best.h5, the logs' lines, summary.json) is in its run
    // state, and a resumed run completes what a crash interrupted (complete_epoch_end).
    position_.slide = 0;
    ++position_.epoch;
    position_.train_probabilities.clear();
    position_.train_labels.clear();
    position_.train_loss_sum = 0;
    save_checkpoint("last.h5");
    if (report.best && lead()) {
      io::copy_file_atomically(run_dir_ / "checkpoints" / "last.h5",
                               run_dir_ / "checkpoints" / "best.h5", "checkpoint");
    }
    --position_.epoch;
    if (metrics_csv_) metrics_csv_->write(position_.epoch_row);
    epoch_clock_ = Clock::now();
    events_->write(position_.epoch_event);
    if (communicator_ != nullptr) {
      // The gradient exchanges of the epoch: the wait for the slowest rank plus the transfer.
      events_->write({{"type", "allreduce"},
                      {"epoch", report.epoch},
                      {"ranks", world_},
                      {"calls", allreduce_calls_},
                      {"seconds", allreduce_seconds_}});
    }
    allreduce_seconds_ = 0;
    allreduce_calls_ = 0;
    skipped_in_epoch_ = 0;
    return report;
  }

  void save_checkpoint(const std::string& name) {
    position_.peak_bytes = peak_bytes_;
    if (!lead()) return;
    io::CheckpointState state;
    state.weights = io::named_weights(graph_->module());
    state.optimizer = optimizer_state(config_, *optimizer_, graph_->module());
    // Mid-batch, the gradients accumulated so far are part of the position.
    if (position_.slide % config_.batch != 0) {
      for (const auto& item : graph_->module().named_parameters()) {
        if (item.value().grad().defined()) {
          state.optimizer.push_back({item.key() + kAccumulatedGrad, item.value().grad()});
        }
      }
    }
    state.epoch = position_.epoch;
    state.step = position_.step;
    state.seed = static_cast<uint64_t>(config_.seed);
    state.class_names = manifest_.classes;
    state.config = config_.to_yaml();
    state.run_state = position_.to_json().dump(-1, ' ', false, json::error_handler_t::replace);
    state.tessel_version = kVersion;
    state.network = trunk_;  // a network from a file travels with its checkpoints
    io::write_checkpoint(run_dir_ / "checkpoints" / name, state);
  }

  void write_summary(const TrainSummary& s, bool running) const {
    const auto nullable = [](double v) { return std::isnan(v) ? json() : json(v); };
    const char* state = running            ? "running"
                        : !s.error.empty() ? "failed"
                        : s.interrupted    ? "stopped"
                                           : "finished";
    const json j = {{"run_dir", s.run_dir.string()},
                    {"state", state},
                    {"epochs_done", s.epochs_done},
                    {"steps", s.steps},
                    {"best_epoch", s.best_epoch},
                    {"best_metric", nullable(s.best_metric)},
                    {"metric", config_.metric},
                    {"last_val",
                     {{"loss", nullable(s.last_val.loss)},
                      {"accuracy", nullable(s.last_val.accuracy)},
                      {"balanced_accuracy", nullable(s.last_val.balanced_accuracy)},
                      {"auc", nullable(s.last_val.auc)},
                      {"slides", s.last_val.count}}},
                    {"interrupted", s.interrupted},
                    {"stopped_early", s.stopped_early},
                    {"skipped_slides", s.skipped_slides},
                    {"skipped", position_.skipped},
                    {"error", s.error.empty() ? json() : json(s.error)},
                    {"classes", manifest_.classes},
                    {"measured_peak_bytes", peak_bytes_},
                    {"seconds", s.seconds},
                    {"tessel_version", kVersion}};
    write_text_atomically(run_dir_ / "summary.json",
                          j.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
  }

  const TrainRequest& request_;
  TrainConfig config_;
  fs::path run_dir_;
  Communicator* communicator_;
  int rank_, world_;
  // Slide-parallel (parallel: slide or hybrid, docs/slide-parallel.md): the ranks that share this
  // rank's slides, each running a share of every step (null: this rank alone), their count,
  // and which of the groups_ groups (each taking its own slides) this rank's is.
  Communicator* slide_group_ = nullptr;
  std::unique_ptr<Communicator> own_group_;  // hybrid's group, when not the whole job
  int slide_ranks_ = 1, group_ = 0, groups_ = 1;
  std::string parallel_summary_;      // for the run's log, once it is open
  std::vector<SlideResult> pending_;  // this rank's slides of the batch, not yet recorded
  double allreduce_seconds_ = 0;      // in this epoch
  int64_t allreduce_calls_ = 0;
  io::Manifest manifest_;
  std::vector<const io::ManifestEntry*> train_, val_, test_;
  std::string data_summary_;
  at::Tensor class_weights_;
  std::unique_ptr<core::Graph> graph_;
  std::string trunk_;  // the network's trunk when `model` is a file (pipelines/network.h)
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  c10::Device device_{c10::kCPU};
  core::Precision precision_ = core::Precision::kFloat32;
  int64_t budget_bytes_ = 0;
  core::PlanOptions plan_options_;
  fs::path scratch_dir_;  // the disk tier's: --scratch or the run folder
  bool prices_logged_ = false;
  std::atomic<bool> prices_measured_ = false;
  std::mutex caches_;  // plans_ and tissue_masks_: open_and_plan runs on read-ahead threads too
  // height, width, slide (glass), ranks splitting the step
  using PlanKey = std::tuple<int64_t, int64_t, std::string, int>;
  std::map<PlanKey, core::Plan> plans_;
  TissueMaskCache tissue_masks_;
  Position position_;
  double lr_ = 0;
  int64_t peak_bytes_ = -1;
  int64_t skipped_in_epoch_ = 0;
  std::string diverged_;  // this rank's non-finite step, with several ranks (check_finite)
  Clock::time_point epoch_clock_ = Clock::now();
  Clock::time_point run_start_ = Clock::now();
  mutable StopAtTile step_observer_;      // the engine's events, to request_.observer
  std::unique_ptr<RunLock> run_lock_;     // released last: after every file of the run is closed
  std::unique_ptr<RunLogFile> log_file_;  // train.log, for this run only
  std::unique_ptr<CsvLog> metrics_csv_;
  std::unique_ptr<JsonLines> events_;
  // The next slides opening, each on its thread, in the order they train (TrainConfig::
  // read_ahead: ahead_slides_ of them); last, so that they finish before anything they use goes.
  int64_t ahead_slides_ = 0;
  std::deque<Ahead> ahead_;
};

}  // namespace

TrainSummary train(const TrainRequest& request) {
  // The allocator's cache of freed blocks goes back to the system when the run ends, after the
  // trainer's own tensors (core/device/memory.h): a GUI session would otherwise keep the run's
  // peak.
  struct ReleaseCache {
    ~ReleaseCache() { core::MemoryTracker::release_cache(); }
  } release;
  return Trainer(request).run();
}

}  // namespace tessel::pipelines
