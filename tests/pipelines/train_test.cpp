// `pipelines::train` end to end on tiny generated slides: the run folder's files, exact resume
// (after an epoch, and mid-epoch in the middle of a gradient-accumulation batch, with
// augmentation on), and tiled training equal to plain training.
#include "pipelines/train.h"

#include "pipelines/evaluate.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/exec/gradcheck.h"
#include "io/checkpoint.h"
#include "io/sample_slides.h"
#include "io/slide.h"
#include "models/network_json.h"
#include "models/zoo.h"
#include "pipelines/slide_input.h"
#include "temp_folder.h"

namespace tessel::pipelines {
namespace {

namespace fs = std::filesystem;

// Eight 512² slides (4 train, 2 val, 2 test), made once for the suite.
class TrainTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new test::TempFolder();
    io::SampleDataOptions options;
    options.slides = 8;
    options.size = 512;
    options.seed = 5;
    io::write_sample_data(data_->path() / "slides", options);
  }
  static void TearDownTestSuite() {
    delete data_;
    data_ = nullptr;
  }

  TrainConfig config(const std::string& run) const {
    TrainConfig c =
        parse_train_config("manifest: " + (data_->path() / "slides" / "manifest.csv").string() +
                               "\nmodel: tiny\nlevel: 1\nepochs: 2\nbudget: 64MiB\n",
                           "test");
    c.output = runs_.path() / run;
    return c;
  }

  // The suite's manifest, each row for which `unreadable` (given the row's columns after the
  // slide, such as ",tumour,val,p3") says so pointing at its own copy of the shared unreadable
  // slide (a slide listed twice is refused), written as `name` in the runs' folder.
  fs::path manifest_with_unreadable(const std::string& name,
                                    const std::function<bool(const std::string&)>& unreadable) {
    const fs::path slides = data_->path() / "slides";
    std::ifstream in(slides / "manifest.csv");
    std::string text, line;
    std::getline(in, line);
    EXPECT_EQ(line, "slide,label,split,patient");
    text = line + "\n";
    for (int row = 0; std::getline(in, line); ++row) {
      const size_t comma = line.find(',');
      const std::string rest = line.substr(comma);
      fs::path slide = slides / line.substr(0, comma);
      if (unreadable(rest)) {
        slide = runs_.path() / ("unreadable-" + name + "-" + std::to_string(row) + ".svs");
        fs::copy_file(fs::path(TESSEL_SHARED_SLIDES) / "unreadable.svs", slide);
      }
      text += slide.string() + rest + "\n";
    }
    return runs_.write(name + ".csv", text);
  }

  static std::vector<io::NamedTensor> weights(const fs::path& run) {
    return io::read_checkpoint(run / "checkpoints" / "last.h5").weights;
  }

  static void expect_identical(const std::vector<io::NamedTensor>& a,
                               const std::vector<io::NamedTensor>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].name, b[i].name);
      EXPECT_TRUE(at::equal(a[i].tensor, b[i].tensor)) << a[i].name;
    }
  }

  static int64_t lines(const fs::path& file) {
    std::ifstream in(file);
    int64_t n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  }

  static test::TempFolder* data_;
  test::TempFolder runs_;
};
test::TempFolder* TrainTest::data_ = nullptr;

// Sets the stop flag when `after` train slides have finished.
class StopAfter : public TrainObserver {
 public:
  StopAfter(std::atomic<bool>& stop, int after) : stop_(stop), after_(after) {}
  void on_slide(const SlideProgress& s) override {
    if (s.done && s.phase == "train" && ++done_ == after_) stop_ = true;
  }
  int slides = 0;

 private:
  std::atomic<bool>& stop_;
  int after_;
  int done_ = 0;
};

TEST_F(TrainTest, WritesTheRunFolder) {
  TrainRequest request{config("run")};
  const TrainSummary s = train(request);
  const fs::path run = runs_.path() / "run";
  EXPECT_EQ(s.epochs_done, 2);
  EXPECT_EQ(s.steps, 8);  // 4 train slides, batch 1, 2 epochs
  EXPECT_FALSE(s.interrupted);
  for (const char* file : {"config.yaml", "train.log", "metrics.csv", "events.jsonl",
                           "summary.json", "checkpoints/last.h5", "checkpoints/best.h5"}) {
    EXPECT_TRUE(fs::exists(run / file)) << file;
  }
  EXPECT_EQ(lines(run / "metrics.csv"), 3);
  EXPECT_EQ(lines(run / "events.jsonl"), 2 * 4 + 2);  // a line per train slide and per epoch
  const nlohmann::json summary = nlohmann::json::parse(std::ifstream(run / "summary.json"));
  EXPECT_EQ(summary["epochs_done"], 2);
  EXPECT_EQ(summary["classes"], (std::vector<std::string>{"normal", "tumour"}));
  EXPECT_EQ(summary["last_val"]["slides"], 2);
  const io::CheckpointState last = io::read_checkpoint(run / "checkpoints" / "last.h5");
  EXPECT_EQ(last.epoch, 2);
  EXPECT_EQ(last.step, 8);
  EXPECT_NE(last.config.find("model: tiny"), std::string::npos);
  EXPECT_FALSE(last.optimizer.empty());  // Adam's moments

  // The folder now holds a run: starting another in it is refused.
  EXPECT_THROW(train(TrainRequest{config("run")}), Error);
}

// Reads summary.json as each epoch ends: what a run that died right then would leave.
class SummaryAtEpochEnd : public TrainObserver {
 public:
  explicit SummaryAtEpochEnd(fs::path file) : file_(std::move(file)) {}
  void on_epoch(const EpochReport& r) override {
    const nlohmann::json s = nlohmann::json::parse(std::ifstream(file_));
    seen.push_back({s["state"].get<std::string>(), s["epochs_done"].get<int64_t>(), r.epoch});
  }
  std::vector<std::tuple<std::string, int64_t, int64_t>> seen;  // state, epochs_done, epoch

 private:
  fs::path file_;
};

TEST_F(TrainTest, SummaryJsonSaysRunningWithTheEpochsDoneAfterEveryEpoch) {
  TrainConfig c = config("running");
  SummaryAtEpochEnd observer(c.output / "summary.json");
  TrainRequest request{c};
  request.observer = &observer;
  train(request);
  using Seen = std::tuple<std::string, int64_t, int64_t>;
  EXPECT_EQ(observer.seen, (std::vector<Seen>{{"running", 1, 1}, {"running", 2, 2}}));
  const nlohmann::json s = nlohmann::json::parse(std::ifstream(c.output / "summary.json"));
  EXPECT_EQ(s["state"], "finished");
  EXPECT_EQ(s["epochs_done"], 2);
}

TEST_F(TrainTest, ResumingAfterAnEpochEndsWithTheSameWeightsAsAnUninterruptedRun) {
  train(TrainRequest{config("whole")});
  TrainConfig first = config("split");
  first.epochs = 1;
  train(TrainRequest{first});
  TrainRequest rest{config("split")};
  rest.resume = true;
  const TrainSummary s = train(rest);
  EXPECT_EQ(s.epochs_done, 2);
  expect_identical(weights(runs_.path() / "whole"), weights(runs_.path() / "split"));
  EXPECT_EQ(lines(runs_.path() / "split" / "metrics.csv"), 3);  // appended, one header
}

TEST_F(TrainTest, StoppingMidBatchAndResumingIsExactWithAugmentationOn) {
  const auto configure = [&](const std::string& run) {
    TrainConfig c = config(run);
    c.batch = 3;  // 4 slides per epoch: batches of 3 and 1
    c.optimizer = "sgd";
    c.flips = c.rotations = true;
    c.color_jitter = 0.1;
    c.tissue_bbox = c.tissue_fill = true;  // the slide inputs the pipeline builds, all of them
    c.schedule = "cosine";
    c.warmup_epochs = 0.5;
    return c;
  };
  train(TrainRequest{configure("whole")});

  std::atomic<bool> stop{false};
  StopAfter stopper(stop, 2);  // inside the first batch of the first epoch
  TrainRequest first{configure("split")};
  first.stop = &stop;
  first.observer = &stopper;
  const TrainSummary interrupted = train(first);
  EXPECT_TRUE(interrupted.interrupted);
  EXPECT_EQ(interrupted.steps, 0);
  const io::CheckpointState mid =
      io::read_checkpoint(runs_.path() / "split" / "checkpoints" / "last.h5");
  bool has_accumulated = false;
  for (const io::NamedTensor& t : mid.optimizer) {
    has_accumulated |= t.name.ends_with(".accumulated_grad");
  }
  EXPECT_TRUE(has_accumulated);

  TrainRequest rest{configure("split")};
  rest.resume = true;
  train(rest);
  expect_identical(weights(runs_.path() / "whole"), weights(runs_.path() / "split"));
}

// Sets the stop flag at the first tile of the `slide`-th slide (1-based) started in `phase`.
class StopInSlide : public TrainObserver {
 public:
  StopInSlide(std::atomic<bool>& stop, std::string phase, int slide)
      : stop_(stop), phase_(std::move(phase)), slide_(slide) {}
  void on_slide(const SlideProgress& s) override {
    if (!s.done && s.phase == phase_ && ++started_ == slide_) armed_ = true;
    if (s.done && armed_) finished_in_stopped_slide = true;
  }
  void on_tile(const core::TileEvent&) override {
    if (armed_) stop_ = true;
  }
  bool finished_in_stopped_slide = false;

 private:
  std::atomic<bool>& stop_;
  std::string phase_;
  int slide_;
  int started_ = 0;
  bool armed_ = false;
};

// The (epoch, index) of each val slide started.
class SlideLog : public TrainObserver {
 public:
  void on_slide(const SlideProgress& s) override {
    if (!s.done && s.phase == "val") val_started.emplace_back(s.epoch, s.index);
  }
  std::vector<std::pair<int64_t, int64_t>> val_started;
};

// The GUI's Stop (stop_now): the run ends as the next tile finishes, in a slide (its part of the
// batch's gradient dropped) or in validation (the val slides done are kept), and each resume
// trains or validates from the position before it, ending with the weights of an uninterrupted run.
TEST_F(TrainTest, StoppingAtATileInASlideOrInValidationAndResumingIsExact) {
  const auto configure = [&](const std::string& run) {
    TrainConfig c = config(run);
    c.batch = 3;
    c.optimizer = "sgd";
    c.flips = true;
    return c;
  };
  train(TrainRequest{configure("whole")});

  std::atomic<bool> stop{false};
  StopInSlide in_slide(stop, "train", 2);  // mid-batch: slide 1's gradient is kept, 2's dropped
  TrainRequest first{configure("split")};
  first.stop_now = &stop;
  first.observer = &in_slide;
  TrainSummary s = train(first);
  EXPECT_TRUE(s.interrupted);
  EXPECT_FALSE(in_slide.finished_in_stopped_slide);
  EXPECT_EQ(s.steps, 0);
  const nlohmann::json position = nlohmann::json::parse(
      io::read_checkpoint(runs_.path() / "split" / "checkpoints" / "last.h5").run_state);
  EXPECT_EQ(position.at("slide"), 1) << position.dump();  // before the slide stopped in

  stop = false;
  StopInSlide in_validation(stop, "val", 2);  // the first val slide is done, the second not
  TrainRequest second{configure("split")};
  second.resume = true;
  second.stop_now = &stop;
  second.observer = &in_validation;
  s = train(second);
  EXPECT_TRUE(s.interrupted);
  EXPECT_FALSE(in_validation.finished_in_stopped_slide);
  EXPECT_EQ(s.epochs_done, 0);
  EXPECT_EQ(lines(runs_.path() / "split" / "metrics.csv"), 1);  // the header: no epoch ended
  const nlohmann::json in_val = nlohmann::json::parse(
      io::read_checkpoint(runs_.path() / "split" / "checkpoints" / "last.h5").run_state);
  EXPECT_EQ(in_val.at("val_next"), 1) << in_val.dump();
  EXPECT_EQ(in_val.at("val_done").size(), 1u) << in_val.dump();

  // The resumed run validates only the slide it stopped in, and ends as the uninterrupted run.
  SlideLog log;
  TrainRequest rest{configure("split")};
  rest.resume = true;
  rest.observer = &log;
  s = train(rest);
  EXPECT_EQ(s.epochs_done, 2);
  ASSERT_FALSE(log.val_started.empty());
  EXPECT_EQ(log.val_started.front(), std::make_pair(int64_t{1}, int64_t{1}));  // epoch 1, slide 1
  expect_identical(weights(runs_.path() / "whole"), weights(runs_.path() / "split"));
  EXPECT_EQ(lines(runs_.path() / "split" / "metrics.csv"), 3);
  // The validation metrics of both epochs equal the uninterrupted run's (not the time or memory).
  const auto columns = [](const fs::path& csv) {
    std::ifstream in(csv);
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) {
      std::vector<std::string> cells;
      std::stringstream row(line);
      for (std::string cell; std::getline(row, cell, ',');) cells.push_back(cell);
      if (cells.size() >= 9) out.push_back(cells[4] + cells[5] + cells[6] + cells[7] + cells[8]);
    }
    return out;
  };
  EXPECT_EQ(columns(runs_.path() / "split" / "metrics.csv"),
            columns(runs_.path() / "whole" / "metrics.csv"));
}

// The updates (w − w0) of four SGD steps, tiled against plain, at a tolerance that a halo one
// pixel short in one tile (core::Fault::kHalo) breaks: final weights are mostly the
// initialisation, and would hide it.
TEST_F(TrainTest, TiledTrainingUpdatesTheWeightsAsUntiledTrainingDoes) {
  const auto configure = [&](const std::string& run, const std::string& strategy, double lr) {
    TrainConfig c = config(run);
    c.optimizer = "sgd";
    c.lr = lr;
    c.epochs = 1;
    c.strategy = strategy;
    c.budget = strategy == "none" ? "1GiB" : "6MiB";  // 6 MiB forces several tiles at 256²
    return c;
  };
  train(TrainRequest{configure("start", "none", 0)});  // lr 0: the initial weights
  train(TrainRequest{configure("plain", "none", 0.01)});
  train(TrainRequest{configure("tiled", "grid", 0.01)});
  TrainRequest faulty{configure("halo", "grid", 0.01)};
  faulty.inject = core::Fault::kHalo;
  train(faulty);
  const auto start = weights(runs_.path() / "start");
  const auto updates = [&](const std::string& run) {
    const auto w = weights(runs_.path() / run);
    EXPECT_EQ(w.size(), start.size()) << run;
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < w.size() && i < start.size(); ++i) {
      out.push_back(w[i].tensor - start[i].tensor);
    }
    return out;
  };
  const auto plain = updates("plain"), tiled = updates("tiled"), halo = updates("halo");
  // float32, four steps: summing in another order moves the updates by ~1e-6 of their norm (a
  // bias's by up to ~1e-4 of its small value, where its gradient cancels: hence the updates as
  // one vector). The engine's exactness itself is checked in float64 by the core tests.
  constexpr double kTolerance = 1e-4;
  const double tiled_error = core::norm_relative_error(tiled, plain);
  const double halo_error = core::norm_relative_error(halo, plain);
  EXPECT_LT(tiled_error, kTolerance);
  EXPECT_GT(halo_error, kTolerance) << "a one-tile error must fail this test's bar";
  double moved = 0;
  for (const at::Tensor& u : plain) moved += u.abs().sum().item<double>();
  EXPECT_GT(moved, 0) << "the steps moved no weight";
  std::cout << "updates, norm-wise against plain: tiled " << tiled_error
            << ", halo one pixel short " << halo_error << "\n";
  // The tiled run really ran several tiles per slide.
  std::ifstream events(runs_.path() / "tiled" / "events.jsonl");
  std::string line;
  std::getline(events, line);
  EXPECT_GT(nlohmann::json::parse(line)["tiles"].get<int64_t>(), 2) << line;
}

TEST_F(TrainTest, HeatmapsAgreeWithEvaluationAndAreWrittenInThreeForms) {
  for (const std::string pool : {"avg", "max"}) {
    TrainConfig c = config("run-" + pool);
    c.pool = pool;
    c.epochs = 1;
    train(TrainRequest{c});
  }
  fs::rename(runs_.path() / "run-avg", runs_.path() / "run");
  const fs::path checkpoint = runs_.path() / "run" / "checkpoints" / "last.h5";
  EvaluationRequest eval;
  eval.checkpoint = checkpoint;
  eval.split = "all";
  eval.predictions_csv = runs_.path() / "predictions.csv";
  const EvaluationResult r = evaluate(eval);
  ASSERT_EQ(r.predictions.size(), 8U);
  EXPECT_EQ(lines(eval.predictions_csv), 9);
  {
    // Issue 51: inputs it could not save (a full disk: the third slide's partial file is
    // /dev/full) skipped the slide and the evaluation "succeeded" without them.
    EvaluationRequest saving = eval;
    saving.predictions_csv.clear();
    saving.inputs_dir = runs_.path() / "inputs";
    fs::create_directories(saving.inputs_dir);
    const fs::path third = fs::path(r.predictions[2].slide).stem().string() + ".input.f32.partial";
    fs::create_symlink("/dev/full", saving.inputs_dir / third);
    try {
      (void)evaluate(saving);
      ADD_FAILURE() << "an evaluation that could not save its inputs succeeded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot save the input of " + r.predictions[2].slide),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("(the disk is full)"), std::string::npos) << e.what();
    }
  }

  {
    // The heatmap TIFF carries the level-0 scale the run used, --base-mpp's over the file's, for
    // QuPath and ASAP to overlay it by (read back here by OpenSlide).
    HeatmapRequest request;
    request.checkpoint = checkpoint;
    request.slide = r.predictions[0].slide;
    request.out_dir = runs_.path() / "heatmaps-rescaled";
    request.base_mpp = 0.3;
    const io::Slide tiff(make_heatmap(request).tiff);
    ASSERT_TRUE(tiff.mpp_x() && tiff.mpp_y());
    EXPECT_NEAR(*tiff.mpp_x(), 0.3, 1e-6);
    EXPECT_NEAR(*tiff.mpp_y(), 0.3, 1e-6);
  }
  for (const SlidePrediction& p : {r.predictions[0], r.predictions[3]}) {
    HeatmapRequest request;
    request.checkpoint = checkpoint;
    request.slide = p.slide;
    request.out_dir = runs_.path() / "heatmaps";
    const HeatmapResult h = make_heatmap(request);
    // The class map's mean is the pooled model's logits: the same slide-level prediction.
    ASSERT_EQ(h.slide_probabilities.size(), p.probabilities.size());
    for (size_t k = 0; k < p.probabilities.size(); ++k) {
      EXPECT_NEAR(h.slide_probabilities[k], p.probabilities[k], 1e-5) << p.slide;
    }
    // 512² slides read at level 1 (256²) by a network of stride 4: 64×64 cells of 8 level-0 px.
    EXPECT_EQ(h.heatmap.rows, 64);
    EXPECT_EQ(h.heatmap.cols, 64);
    EXPECT_DOUBLE_EQ(h.heatmap.cell_width, 8);
    for (const fs::path& file : {h.tiff, h.png, h.geojson}) EXPECT_TRUE(fs::exists(file)) << file;
    const nlohmann::json geojson = nlohmann::json::parse(std::ifstream(h.geojson));
    // One feature per cell on tissue: the sample slides have glass around their tissue.
    ASSERT_EQ(h.heatmap.tissue.size(), 64U * 64U);
    const auto on_tissue = static_cast<size_t>(
        std::count(h.heatmap.tissue.begin(), h.heatmap.tissue.end(), uint8_t{1}));
    EXPECT_GT(on_tissue, 64U * 64U / 8);
    EXPECT_LT(on_tissue, 64U * 64U);
    ASSERT_EQ(geojson["features"].size(), on_tissue);
    const nlohmann::json& cell = geojson["features"][on_tissue / 2];
    EXPECT_EQ(cell["properties"]["objectType"], "tile");
    const double normal = cell["properties"]["measurements"]["normal"];
    const double tumour = cell["properties"]["measurements"]["tumour"];
    EXPECT_NEAR(normal + tumour, 1.0, 1e-5);
    // Cell (row 10, column 20) lies at level-0 (160, 80), whether it is drawn or not.
    EXPECT_EQ(h.heatmap.cell(10, 20).x.begin, 160);
    EXPECT_EQ(h.heatmap.cell(10, 20).y.begin, 80);
    for (const nlohmann::json& f : geojson["features"]) {
      const int64_t x = f["geometry"]["coordinates"][0][0][0],
                    y = f["geometry"]["coordinates"][0][0][1];
      ASSERT_TRUE(h.heatmap.on_tissue(y / 8, x / 8)) << "a glass cell at " << x << ", " << y;
    }
  }
  // A max-pool head: the heatmap's slide prediction is the pooled network's.
  EvaluationRequest eval_max = eval;
  eval_max.checkpoint = runs_.path() / "run-max" / "checkpoints" / "last.h5";
  eval_max.predictions_csv.clear();
  const EvaluationResult m = evaluate(eval_max);
  HeatmapRequest max_request;
  max_request.checkpoint = eval_max.checkpoint;
  max_request.slide = m.predictions[0].slide;
  max_request.out_dir = runs_.path() / "heatmaps-max";
  const HeatmapResult hm = make_heatmap(max_request);
  for (size_t k = 0; k < hm.slide_probabilities.size(); ++k) {
    EXPECT_NEAR(hm.slide_probabilities[k], m.predictions[0].probabilities[k], 1e-5);
  }

  HeatmapRequest wrong;
  wrong.checkpoint = checkpoint;
  wrong.slide = r.predictions[0].slide;
  wrong.out_dir = runs_.path() / "heatmaps";
  wrong.class_name = "fibrosis";
  EXPECT_THROW(make_heatmap(wrong), Error);
}

// pool: attention (core/exec/attention.h), one branch and one per class: training runs, and the
// heatmap's slide prediction (each class map weighted by its branch's attention) is the pooled
// network's; its maps are the attention, drawn in the TIFF and PNG, measured in the GeoJSON.
TEST_F(TrainTest, AttentionHeadsTrainAndDrawTheirAttentionMaps) {
  for (const std::string branches : {"1", "classes"}) {
    TrainConfig c = config("attention-" + branches);
    c.pool = "attention";
    c.attention_hidden = 8;
    c.attention_branches = branches;
    c.attention_gated = branches == "1";
    c.epochs = 1;
    train(TrainRequest{c});
    EvaluationRequest eval;
    eval.checkpoint = c.output / "checkpoints" / "last.h5";
    eval.split = "test";
    const EvaluationResult r = evaluate(eval);
    ASSERT_FALSE(r.predictions.empty());
    HeatmapRequest request;
    request.checkpoint = eval.checkpoint;
    request.slide = r.predictions[0].slide;
    request.out_dir = runs_.path() / ("heatmaps-attention-" + branches);
    const HeatmapResult h = make_heatmap(request);
    ASSERT_EQ(h.slide_probabilities.size(), 2U);
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_NEAR(h.slide_probabilities[k], r.predictions[0].probabilities[k], 1e-5) << branches;
    }
    const std::string drawn = branches == "1" ? "attention" : "attention:tumour";
    EXPECT_EQ(h.drawn, drawn);
    const std::vector<float>& attention = h.heatmap.of(drawn);
    EXPECT_FLOAT_EQ(*std::max_element(attention.begin(), attention.end()), 1.0F);
    EXPECT_GE(*std::min_element(attention.begin(), attention.end()), 0.0F);
    for (const fs::path& file : {h.tiff, h.png, h.geojson}) EXPECT_TRUE(fs::exists(file)) << file;
    const nlohmann::json geojson = nlohmann::json::parse(std::ifstream(h.geojson));
    ASSERT_FALSE(geojson["features"].empty());
    const nlohmann::json& m = geojson["features"][0]["properties"]["measurements"];
    EXPECT_TRUE(m.contains(drawn)) << m.dump();
    EXPECT_TRUE(m.contains("tumour")) << m.dump();
    if (branches == "classes") {
      EXPECT_TRUE(m.contains("attention:normal")) << m.dump();
    }
  }
  // Asked for a branch count the classes do not have: refused before any slide is read.
  EXPECT_THROW(
      parse_train_config("manifest: m.csv\npool: attention\nattention_branches: 3\n", "test"),
      Error);
  EXPECT_THROW(parse_train_config("manifest: m.csv\npool: max\nattention_hidden: 64\n", "test"),
               Error);
}

// Three classes end to end with a multi-branch attention head (one branch and classifier per
// class) and class weights: training, evaluation's per-class metrics, and a heatmap per class
// (each class's score and each branch's attention in the GeoJSON; --class picks the branch drawn).
TEST_F(TrainTest, ThreeClassesTrainEvaluateAndDrawAnAttentionMapPerClass) {
  const fs::path slides = data_->path() / "slides";
  std::ifstream in(slides / "manifest.csv");
  std::string text, line;
  std::getline(in, line);
  text = line + "\n";
  const std::vector<std::string> labels{"normal", "tumour", "other"};
  for (int i = 0; std::getline(in, line); ++i) {
    // slide,label,split,patient: the label becomes one of three, in turn.
    const size_t a = line.find(','), b = line.find(',', a + 1);
    text += line.substr(0, a + 1) + labels[static_cast<size_t>(i % 3)] + line.substr(b) + "\n";
  }
  const fs::path manifest = slides / "three.csv";
  std::ofstream(manifest) << text;
  TrainConfig c = config("three");
  c.manifest = manifest;
  c.classes = labels;
  c.pool = "attention";
  c.attention_hidden = 8;
  c.attention_branches = "classes";
  c.attention_dropout = 0.25;
  c.class_weights_mode = "list";
  c.class_weights = {1, 2, 3};
  c.epochs = 1;
  train(TrainRequest{c});
  EvaluationRequest eval;
  eval.checkpoint = c.output / "checkpoints" / "last.h5";
  eval.split = "all";
  const EvaluationResult r = evaluate(eval);
  EXPECT_EQ(r.classes, labels);
  ASSERT_EQ(r.metrics.recall.size(), 3U);
  ASSERT_EQ(r.metrics.auc_per_class.size(), 3U);
  for (const SlidePrediction& p : r.predictions) ASSERT_EQ(p.probabilities.size(), 3U);
  HeatmapRequest request;
  request.checkpoint = eval.checkpoint;
  request.slide = r.predictions[0].slide;
  request.out_dir = runs_.path() / "heatmaps-three";
  request.class_name = "other";
  const HeatmapResult h = make_heatmap(request);
  EXPECT_EQ(h.drawn, "attention:other");
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_NEAR(h.slide_probabilities[k], r.predictions[0].probabilities[k], 1e-5);
  }
  const nlohmann::json geojson = nlohmann::json::parse(std::ifstream(h.geojson));
  const nlohmann::json& m = geojson["features"][0]["properties"]["measurements"];
  for (const char* name :
       {"normal", "tumour", "other", "attention:normal", "attention:tumour", "attention:other"}) {
    EXPECT_TRUE(m.contains(name)) << name << " " << m.dump();
  }
}

// class_weights: a list gives the loss its weights (a list of the wrong length, or with balance,
// is refused); auto is balance: weighted.
TEST_F(TrainTest, ClassWeightsWeighTheLoss) {
  EXPECT_THROW(parse_train_config("manifest: m.csv\nclass_weights: [1, 0]\n", "test"), Error);
  EXPECT_THROW(
      parse_train_config("manifest: m.csv\nclass_weights: auto\nbalance: weighted\n", "test"),
      Error);
  EXPECT_THROW(
      parse_train_config("manifest: m.csv\nclasses: [a, b]\nclass_weights: [1, 2, 3]\n", "test"),
      Error);
  const TrainConfig listed =
      parse_train_config("manifest: m.csv\nclass_weights: [1, 4.5]\n", "test");
  EXPECT_EQ(listed.class_weights_mode, "list");
  EXPECT_EQ(listed.class_weights, (std::vector<double>{1, 4.5}));
  // Round trip through the run's config.yaml.
  const TrainConfig back = parse_train_config(listed.to_yaml(), "yaml");
  EXPECT_EQ(back.class_weights, listed.class_weights);
  EXPECT_EQ(parse_train_config(
                parse_train_config("manifest: m.csv\nclass_weights: auto\n", "t").to_yaml(), "yaml")
                .class_weights_mode,
            "auto");
  // A weight per class of the manifest, or the run fails with both counts.
  TrainConfig three = config("weights-3");
  three.class_weights_mode = "list";
  three.class_weights = {1, 2, 3};
  try {
    train(TrainRequest{three});
    ADD_FAILURE() << "three weights for two classes were taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 numbers for the manifest's 2 classes"),
              std::string::npos)
        << e.what();
  }
  // The weights reach the loss: the same run with tumour's weight 9 ends elsewhere, and with
  // weights 1, 1 where a run without weights ends.
  std::vector<std::vector<io::NamedTensor>> trained;
  for (const int tumour : {0, 1, 9}) {
    TrainConfig c = config("weights-" + std::to_string(tumour));
    if (tumour > 0) {
      c.class_weights_mode = "list";
      c.class_weights = {1, static_cast<double>(tumour)};
    }
    c.epochs = 1;
    train(TrainRequest{c});
    trained.push_back(weights(c.output));
  }
  expect_identical(trained[0], trained[1]);
  bool differ = false;
  for (size_t i = 0; i < trained[0].size(); ++i) {
    differ = differ || !at::equal(trained[0][i].tensor, trained[2][i].tensor);
  }
  EXPECT_TRUE(differ);
}

TEST_F(TrainTest, HeatmapCellsSitAtTheNetworksStrideOnASlideThatIsNotAMultipleOfIt) {
  TrainConfig c = config("stride");
  c.epochs = 1;
  train(TrainRequest{c});
  // 524² at level 1 is 262²: the stride-4 tiny network gives floor(262 / 4) = 65 cells a side,
  // each 4 pixels (8 level-0 px) from the first; the last 2 pixels are in no cell. Spread over
  // the image (262 / 65 per cell) the last row would sit 4 level-0 px too low.
  io::SampleSlide slide;
  slide.label = "tumour";
  const fs::path file = runs_.path() / "odd.tif";
  io::write_sample_slide(file, slide, 524, 0.5, 11);
  HeatmapRequest request;
  request.checkpoint = runs_.path() / "stride" / "checkpoints" / "last.h5";
  request.slide = file;
  request.out_dir = runs_.path() / "heatmaps-odd";
  const io::Heatmap h = make_heatmap(request).heatmap;
  ASSERT_EQ(h.rows, 65);
  ASSERT_EQ(h.cols, 65);
  EXPECT_DOUBLE_EQ(h.cell_height, 8);
  EXPECT_DOUBLE_EQ(h.cell_width, 8);
  // Same padding throughout: cell 0's receptive field is centred on the first 4×4 pixels.
  EXPECT_DOUBLE_EQ(h.origin_y, 0);
  EXPECT_DOUBLE_EQ(h.origin_x, 0);
  EXPECT_EQ(h.cell(64, 64), (core::Region{{512, 520}, {512, 520}}));
}

TEST_F(TrainTest, InitialWeightsComeFromACheckpointByNameWithAReport) {
  train(TrainRequest{config("first")});
  const fs::path first = runs_.path() / "first" / "checkpoints" / "last.h5";
  TrainConfig c = config("second");
  c.init_weights = first;
  c.epochs = 1;
  c.lr = 1e-12;  // the step leaves the weights (almost) where they were loaded
  train(TrainRequest{c});
  const auto loaded = weights(runs_.path() / "second");
  const auto source = io::read_checkpoint(first).weights;
  ASSERT_EQ(loaded.size(), source.size());
  for (size_t i = 0; i < loaded.size(); ++i) {
    EXPECT_LT(core::relative_error(loaded[i].tensor, source[i].tensor), 1e-6) << loaded[i].name;
  }
  TrainConfig missing = config("missing");
  missing.init_weights = runs_.path() / "no-such.h5";
  try {
    train(TrainRequest{missing});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such.h5"), std::string::npos) << e.what();
  }
  // Another model's checkpoint (a name or two in common) is refused, not loaded in part.
  core::Graph other = models::build_model("resnet18");
  io::CheckpointState foreign;
  foreign.weights = io::named_weights(other.module());
  const fs::path resnet = runs_.path() / "resnet18.h5";
  io::write_checkpoint(resnet, foreign);
  TrainConfig wrong = config("wrong");
  wrong.init_weights = resnet;
  try {
    train(TrainRequest{wrong});
    FAIL() << "a foreign checkpoint was taken";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("init_weights " + resnet.string() + " does not fit model 'tiny'"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("trunk parameters cannot be taken"), std::string::npos) << message;
  }
  EXPECT_FALSE(fs::exists(runs_.path() / "wrong" / "checkpoints" / "last.h5"));
}

// The real vendor files of ../shared/slides: an Aperio SVS with an mpp (CMU-1) and one without
// (TCGA, given by the manifest's mpp column), one epoch, and a heatmap of CMU-1.
TEST_F(TrainTest, TrainsOnRealVendorSlidesAndDrawsAHeatmapOfCmu1) {
  const std::string slides = TESSEL_SHARED_SLIDES;
  const fs::path csv = runs_.write("real.csv", "slide,label,split,mpp\n" + slides +
                                                   "/cmu-1-small-region.svs,a,train,\n" + slides +
                                                   "/tcga-cr-7395-01a-01-ts1.svs,b,train,0.25\n");
  TrainConfig c = config("real");
  c.manifest = csv;
  c.level.reset();
  c.mpp = 4.0;
  c.epochs = 1;
  const TrainSummary s = train(TrainRequest{c});
  EXPECT_EQ(s.steps, 2);
  EXPECT_EQ(s.skipped_slides, 0);
  HeatmapRequest h;
  h.checkpoint = runs_.path() / "real" / "checkpoints" / "last.h5";
  h.slide = slides + "/cmu-1-small-region.svs";
  h.out_dir = runs_.path() / "real" / "heatmaps";
  const HeatmapResult r = make_heatmap(h);
  EXPECT_TRUE(fs::exists(r.png));
  // CMU-1 is 2220×2967 at 0.499 µm: at 4 µm 277×370 px, 69×92 cells of stride 4.
  EXPECT_EQ(r.heatmap.cols, 69);
  EXPECT_EQ(r.heatmap.rows, 92);
  // Without its mpp column the TCGA slide (no mpp in the file) is refused with the reason.
  const fs::path bad = runs_.write(
      "bad-real.csv", "slide,label,split\n" + slides + "/cmu-1-small-region.svs,a,train\n" +
                          slides + "/tcga-cr-7395-01a-01-ts1.svs,b,train\n");
  c.manifest = bad;
  c.output = runs_.path() / "bad-real";
  const TrainSummary skipped = train(TrainRequest{c});
  EXPECT_EQ(skipped.steps, 1);  // CMU-1 trained, TCGA skipped with a warning
}

TEST_F(TrainTest, AManifestWithoutUsableSlidesIsAClearError) {
  const fs::path csv = runs_.write("bad.csv", "slide,label\nmissing.svs,tumour\n");
  TrainConfig c = config("bad");
  c.manifest = csv;
  try {
    train(TrainRequest{c});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.csv"), std::string::npos) << e.what();
  }
}

// Issue 18: exit 0 with untrained weights was a false success.
TEST_F(TrainTest, ARunInWhichEverySlideIsSkippedFailsAndItsSummarySaysWhy) {
  for (const auto& [name, key, value] :
       {std::tuple<std::string, std::string, std::string>{"budget", "budget", "1KiB"},
        {"none-over-budget", "strategy", "none"}}) {
    TrainConfig c = config("skipped-" + name);
    c.epochs = 1;
    if (key == "budget") c.budget = value;
    if (key == "strategy") {
      c.strategy = value;
      c.budget = "64KiB";
    }
    try {
      train(TrainRequest{c});
      ADD_FAILURE() << name << ": expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no train slide could be used in epoch 1: all 4 were "
                                           "skipped"),
                std::string::npos)
          << name << ": " << e.what();
    }
    const nlohmann::json summary = nlohmann::json::parse(std::ifstream(c.output / "summary.json"));
    EXPECT_EQ(summary["skipped_slides"], 4) << name;
    EXPECT_EQ(summary["skipped"].size(), 4u) << name;
    EXPECT_EQ(summary["skipped"][0]["phase"], "train");
    EXPECT_FALSE(summary["skipped"][0]["reason"].get<std::string>().empty());
    EXPECT_NE(summary["error"].get<std::string>().find("no train slide"), std::string::npos);
    EXPECT_FALSE(fs::exists(c.output / "checkpoints" / "best.h5")) << name;
  }
}

// Issue 51: a val split whose every slide failed to read ended "finished", no best.h5, its log
// saying "no val split".
TEST_F(TrainTest, ARunWhoseEveryValSlideIsSkippedFailsAndSaysWhy) {
  TrainConfig c = config("val-unreadable");
  c.manifest = manifest_with_unreadable(
      "val-unreadable", [](const std::string& rest) { return rest.find(",val,") != rest.npos; });
  c.epochs = 1;
  try {
    train(TrainRequest{c});
    FAIL() << "a run that validated nothing finished";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no val slide could be used in epoch 1: all 2 were "
                                         "skipped (the first: "),
              std::string::npos)
        << e.what();
  }
  const nlohmann::json summary = nlohmann::json::parse(std::ifstream(c.output / "summary.json"));
  EXPECT_EQ(summary["state"], "failed");
  EXPECT_NE(summary["error"].get<std::string>().find("no val slide"), std::string::npos);
}

// Issue 52: the next slide opened (mask, plan, first pixels) on a thread while the current one
// trains. The same run either way, augmentation and tissue_fill on, with an unreadable train slide
// among those opened ahead: skipped with its reason as when opened in turn.
TEST_F(TrainTest, ReadingAheadTrainsTheSameWeightsAndSkipsABrokenSlideOpenedAhead) {
  bool broken = false;  // the first train slide
  const fs::path manifest =
      manifest_with_unreadable("one-unreadable", [&broken](const std::string& rest) {
        const bool first = !broken && rest.find(",train,") != rest.npos;
        broken = broken || first;
        return first;
      });
  const auto run = [&](const std::string& name, const std::string& read_ahead) {
    TrainConfig c = config(name);
    c.manifest = manifest;
    c.read_ahead = read_ahead;
    c.flips = c.rotations = true;
    c.color_jitter = 0.1;
    c.tissue_fill = true;
    return train(TrainRequest{c});
  };
  // Two at once: openings side by side share the run's caches of masks and plans.
  const TrainSummary ahead = run("ahead", "2"), in_turn = run("in-turn", "0");
  expect_identical(weights(runs_.path() / "ahead"), weights(runs_.path() / "in-turn"));
  for (const TrainSummary& s : {ahead, in_turn}) {
    EXPECT_EQ(s.skipped_slides, 1);
    const nlohmann::json summary = nlohmann::json::parse(std::ifstream(s.run_dir / "summary.json"));
    EXPECT_NE(summary["skipped"][0]["slide"].get<std::string>().find("unreadable-one"),
              std::string::npos);
  }
  // Every slide's opening is timed, and so is what training waited for it: all of it in turn;
  // opened ahead, the wait for its end (no more than the time it took, up to the clocks' reads).
  for (const auto& [name, ahead_on] : {std::pair{"ahead", true}, {"in-turn", false}}) {
    std::ifstream events(runs_.path() / name / "events.jsonl");
    int slides = 0;
    for (std::string e; std::getline(events, e);) {
      const nlohmann::json j = nlohmann::json::parse(e);
      if (j["type"] != "slide") continue;
      ++slides;
      const double open = j["open_seconds"], wait = j["open_wait_seconds"];
      EXPECT_GT(open, 0) << name;
      EXPECT_GT(j["flops"].get<double>(), 0) << name;  // what the plan runs: a cohort's TFLOP/s
      if (ahead_on) {
        EXPECT_LE(wait, open + 0.05) << name;
      } else {
        EXPECT_GE(wait, open) << name;
      }
    }
    EXPECT_EQ(slides, 2 * 3) << name;  // 3 readable train slides, 2 epochs
  }
}

TEST_F(TrainTest, ANonFiniteLossStopsTrainingBeforeTheWeightsTakeIt) {
  TrainConfig fresh = config("diverged");
  fresh.lr = 1e30;
  fresh.optimizer = "sgd";
  fresh.momentum = 0;
  try {
    train(TrainRequest{fresh});
    FAIL() << "expected the run to stop";
  } catch (const Diverged& e) {
    EXPECT_NE(std::string(e.what()).find("training diverged at step"), std::string::npos)
        << e.what();
  }
  const nlohmann::json summary =
      nlohmann::json::parse(std::ifstream(fresh.output / "summary.json"));
  EXPECT_NE(summary["error"].get<std::string>().find("diverged"), std::string::npos);
  // Nothing non-finite was written: no checkpoint holds NaN weights.
  for (const char* name : {"last.h5", "best.h5"}) {
    const fs::path file = fresh.output / "checkpoints" / name;
    if (!fs::exists(file)) continue;
    for (const io::NamedTensor& w : io::read_checkpoint(file).weights) {
      EXPECT_TRUE(at::isfinite(w.tensor).all().item<bool>()) << name << " " << w.name;
    }
  }
}

TEST_F(TrainTest, WeightsHoldingNanAreRefusedWhenLoaded) {
  TrainConfig c = config("nan");
  c.epochs = 1;
  train(TrainRequest{c});
  io::CheckpointState state = io::read_checkpoint(c.output / "checkpoints" / "last.h5");
  state.weights[0].tensor = state.weights[0].tensor.clone();
  state.weights[0].tensor.view(-1)[0] = std::nan("");
  const fs::path poisoned = c.output / "checkpoints" / "poisoned.h5";
  io::write_checkpoint(poisoned, state);  // valid checksums, NaN inside
  try {
    load_trained_model(poisoned, false, "cpu");
    FAIL() << "expected NaN weights to be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NaN or infinite values in " + state.weights[0].name),
              std::string::npos)
        << e.what();
  }
}

TEST_F(TrainTest, ResumingFromAnotherModelsOrClassesCheckpointNamesTheFileAndBothSides) {
  TrainConfig c = config("other");
  c.epochs = 1;
  train(TrainRequest{c});
  const fs::path last = c.output / "checkpoints" / "last.h5";
  io::CheckpointState state = io::read_checkpoint(last);
  // Another model's weights (one tensor of another shape) in last.h5.
  io::CheckpointState wrong = state;
  wrong.weights[0].tensor = at::zeros({1, 2, 3});
  io::write_checkpoint(last, wrong);
  TrainRequest resume{config("other")};
  resume.resume = true;
  try {
    train(resume);
    FAIL() << "expected the resume to be refused";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cannot resume from " + last.string()), std::string::npos) << message;
    EXPECT_NE(message.find(wrong.weights[0].name), std::string::npos) << message;
  }
  // Other classes: both lists, not a blame on the manifest alone.
  wrong = state;
  wrong.class_names = {"normal", "tumoor"};
  io::write_checkpoint(last, wrong);
  try {
    train(resume);
    FAIL() << "expected the resume to be refused";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("[normal, tumoor]"), std::string::npos) << message;
    EXPECT_NE(message.find("[normal, tumour]"), std::string::npos) << message;
  }
}

TEST_F(TrainTest, ANetworkFromACheckpointTrainsAsTheZooModelStartedFromItsWeights) {
  // NET.h5 as `tessel import` will write it: tiny's trunk without a head, and its weights.
  core::Graph g = models::build_model("tiny");
  core::randomise(g, 5);
  io::CheckpointState net;
  net.network = models::network_json(g, /*trunk_only=*/true);
  for (const io::NamedTensor& w : io::named_weights(g.module())) {
    if (!w.name.starts_with("classifier.")) net.weights.push_back(w);
  }
  const fs::path file = runs_.path() / "NET.h5";
  io::write_checkpoint(file, net);

  TrainConfig from_file = config("from-file");
  from_file.model = file.string();
  from_file.epochs = 1;
  TrainConfig from_zoo = config("from-zoo");
  from_zoo.init_weights = file;
  from_zoo.epochs = 1;
  train(TrainRequest{from_file});
  train(TrainRequest{from_zoo});
  expect_identical(weights(from_file.output), weights(from_zoo.output));

  // The run's checkpoints carry the network: eval and heatmaps need no NET.h5.
  fs::remove(file);
  const fs::path last = from_file.output / "checkpoints" / "last.h5";
  EXPECT_FALSE(io::read_checkpoint(last).network.empty());
  EvaluationRequest eval;
  eval.checkpoint = last;
  eval.split = "all";
  const EvaluationResult r = evaluate(eval);
  eval.checkpoint = from_zoo.output / "checkpoints" / "last.h5";
  const EvaluationResult z = evaluate(eval);
  ASSERT_EQ(r.predictions.size(), z.predictions.size());
  for (size_t i = 0; i < r.predictions.size(); ++i) {
    EXPECT_EQ(r.predictions[i].probabilities, z.predictions[i].probabilities);
  }
  HeatmapRequest heatmap;
  heatmap.checkpoint = last;
  heatmap.slide = r.predictions[0].slide;
  heatmap.out_dir = runs_.path() / "heatmaps-from-file";
  EXPECT_EQ(make_heatmap(heatmap).heatmap.rows, 64);

  // A zoo model's checkpoint holds no network to train from.
  TrainConfig wrong = config("wrong");
  wrong.model = (from_zoo.output / "checkpoints" / "last.h5").string();
  try {
    train(TrainRequest{wrong});
    FAIL() << "expected a checkpoint without a network to be refused as a model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds no network"), std::string::npos) << e.what();
  }
}

TEST(CheckInputSize, SaysTheSizeTheResolutionAndTheSmallestTheNetworkTakes) {
  const core::Graph graph = models::build_model("vgg-mini");
  TrainConfig c = parse_train_config("manifest: m.csv\nmodel: vgg-mini\nmpp: 32\n", "test");
  EXPECT_NO_THROW(check_input_size(graph, c, 32, 40));
  try {
    check_input_size(graph, c, 16, 100);
    FAIL() << "expected a 100×16 image to be too small for vgg-mini";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "too small at 32 µm/px: 100×16 px, and the network vgg-mini needs at least "
                 "32×32 px (use a finer resolution or a larger region)");
  }
}

// The names of the tile store's scratch files in `dir` (core/store/tile_store.h).
std::vector<std::string> scratch_files(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir, ec)) {
    const std::string name = f.path().filename().string();
    if (name.starts_with("tessel-offload-") && name.ends_with(".scratch")) names.push_back(name);
  }
  return names;
}

// Looks for scratch files in a folder when a step's backward pass starts; stops the run after
// its first slide.
class ScratchWatcher : public TrainObserver {
 public:
  ScratchWatcher(fs::path dir, std::atomic<bool>& stop) : dir_(std::move(dir)), stop_(stop) {}
  void on_tile(const core::TileEvent& e) override {
    if (e.pass == core::TileEvent::kBackward && !scratch_files(dir_).empty()) seen = true;
  }
  void on_slide(const SlideProgress& s) override {
    if (s.done) stop_ = true;
  }
  bool seen = false;

 private:
  fs::path dir_;
  std::atomic<bool>& stop_;
};

// vgg-mini on 512² in 16 MiB: no plan with every checkpoint resident fits, and none without
// maxpool4's checkpoint (`tessel plan --model vgg-mini --size 512x512 --budget 16MiB`), so the
// planner offloads it to disk whatever the prices it measures in the scratch directory.
TrainConfig offloading(TrainConfig c) {
  c.model = "vgg-mini";
  c.level = 0;
  c.optimizer = "sgd";
  c.epochs = 1;
  c.strategy = "grid";
  c.budget = "16MiB";
  return c;
}

TEST_F(TrainTest, OffloadedCheckpointsGoToTheRunFolderOrScratchAndNoScratchFileIsLeft) {
  for (const bool explicit_scratch : {false, true}) {
    const TrainConfig c = offloading(config(explicit_scratch ? "offload-scratch" : "offload"));
    TrainRequest request{c};
    if (explicit_scratch) request.scratch_dir = runs_.path() / "scratch" / "here";
    const fs::path where = explicit_scratch ? request.scratch_dir : c.output;
    // A crashed run's leftover (a pid that cannot exist) is removed at the start.
    fs::create_directories(where);
    std::ofstream(where / "tessel-offload-999999999-0.scratch") << "x";
    std::atomic<bool> stop{false};
    ScratchWatcher watcher(where, stop);
    request.observer = &watcher;
    request.stop = &stop;
    const TrainSummary s = train(request);
    EXPECT_TRUE(s.interrupted);
    EXPECT_EQ(s.skipped_slides, 0);
    EXPECT_TRUE(watcher.seen) << "a scratch file in " << where << " during the steps";
    EXPECT_EQ(scratch_files(where), std::vector<std::string>{}) << "none left after the run";
    if (explicit_scratch) {
      EXPECT_TRUE(scratch_files(c.output).empty());
    }
  }
}

// Empties the scratch files in a folder once the first backward pass starts (a full or swapped
// disk, a cleaner run amok): the store's next read comes back short.
class ScratchThief : public TrainObserver {
 public:
  explicit ScratchThief(fs::path dir) : dir_(std::move(dir)) {}
  void on_tile(const core::TileEvent& e) override {
    if (struck || e.pass != core::TileEvent::kBackward) return;
    for (const std::string& name : scratch_files(dir_)) {
      fs::resize_file(dir_ / name, 0);
      struck = true;
    }
  }
  bool struck = false;

 private:
  fs::path dir_;
};

TEST_F(TrainTest, AScratchFileLostMidRunEndsTheRunInsteadOfSkippingEverySlide) {
  const TrainConfig c = offloading(config("scratch-lost"));
  TrainRequest request{c};
  ScratchThief thief(c.output);
  request.observer = &thief;
  try {
    train(request);
    FAIL() << "expected the run to end on the lost scratch file";
  } catch (const ScratchError& e) {
    EXPECT_NE(std::string(e.what()).find("scratch file"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(thief.struck);
  EXPECT_EQ(scratch_files(c.output), std::vector<std::string>{}) << "none left after the run";
}

TEST_F(TrainTest, AnUnusableScratchDirectoryIsAClearErrorBeforeTheRunStarts) {
  const fs::path file = runs_.write("not-a-folder", "x");
  TrainRequest request{config("no-scratch")};
  request.scratch_dir = file / "scratch";
  try {
    train(request);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find((file / "scratch").string()), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--scratch"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(runs_.path() / "no-scratch")) << "no run folder was made";
}

}  // namespace
}  // namespace tessel::pipelines

namespace tessel::pipelines {
namespace {

// What a slide opened ahead reads first (first_reads): the first segment's forward tiles in order,
// and, for a step split over ranks, only this rank's (the tiles the executor gives it).
TEST(FirstReads, AreTheFirstSegmentsTilesAndARanksOwnWhenSplit) {
  core::Graph g = models::build_model("tiny");
  core::PlanOptions o;
  o.strategy = core::Strategy::kGrid;
  o.overrides.tiles_y = 3;
  o.overrides.tiles_x = 2;
  const core::Plan plan = core::make_plan(g, {3, 90, 70}, 0, o);
  const core::TensorTileSource source(at::zeros({1, 3, 90, 70}));
  const std::vector<core::Region> all = first_reads(g, plan, source, false);
  ASSERT_EQ(static_cast<int64_t>(all.size()), plan.segments.front().forward.tiles());
  ASSERT_EQ(all.size(), 6U);
  std::vector<core::Region> split;
  for (int rank = 0; rank < 4; ++rank) {
    const std::vector<core::Region> mine = first_reads(g, plan, source, false, rank, 4);
    EXPECT_LE(mine.size(), 2U) << "rank " << rank;
    split.insert(split.end(), mine.begin(), mine.end());
  }
  ASSERT_EQ(split.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(split[i], all[i]) << "tile " << i;
}

}  // namespace
}  // namespace tessel::pipelines
