#include "pipelines/evaluate.h"

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "core/device/device.h"
#include "core/error.h"
#include "core/exec/attention.h"
#include "core/exec/executor.h"
#include "core/plan/planner.h"
#include "core/store/offload_prices.h"
#include "core/store/tile_store.h"
#include "io/checkpoint.h"
#include "io/durable.h"
#include "io/manifest.h"
#include "io/slide.h"
#include "models/network_json.h"
#include "models/zoo.h"
#include "pipelines/network.h"
#include "pipelines/run_files.h"
#include "pipelines/slide_input.h"

namespace tessel::pipelines {
namespace {

namespace fs = std::filesystem;

core::Plan plan_for(const TrainedModel& model, int64_t height, int64_t width,
                    const std::string& budget, const fs::path& scratch_dir) {
  const TrainConfig& config = model.config;
  check_input_size(model.graph, config, height, width);
  core::PlanOptions options;
  options.strategy = core::parse_strategy(config.strategy);
  options.optimizer_state_per_param = 0;  // no optimizer in inference
  // Offload or recompute at this machine's prices, when the planner prices offloading plans:
  // measured where the scratch file goes.
  options.prices.measure = [tier = options.auto_tier, scratch_dir, device = model.device] {
    return core::measure_offload_prices(tier, scratch_dir, device);
  };
  return core::make_plan(model.graph, {3, height, width},
                         core::parse_bytes(budget.empty() ? config.budget : budget), options);
}

// Where the request's offloaded checkpoints go, who hears of the tiles, and the precision the
// network was trained in.
template <typename Request>
core::StepOptions step_options(const Request& request, const TrainedModel& model) {
  core::StepOptions options;
  options.observer = request.observer;
  options.scratch_dir = request.scratch_dir;
  options.precision = core::parse_precision(model.config.precision);
  return options;
}

std::vector<double> to_vector(const at::Tensor& t) {
  const at::Tensor d = t.to(at::kCPU, at::kDouble).contiguous().flatten();
  return {d.data_ptr<double>(), d.data_ptr<double>() + d.numel()};
}

}  // namespace

TrainedModel load_trained_model(const fs::path& checkpoint, bool class_map,
                                const std::string& device) {
  const c10::Device where = core::resolve_device(device);
  const io::CheckpointState state = io::read_checkpoint(checkpoint);
  TrainConfig config;
  try {
    config = parse_train_config(state.config, checkpoint.string() + " (saved config)");
  } catch (const Error& e) {
    throw Error("checkpoint " + checkpoint.string() + " has no usable run config: " + e.what());
  }
  if (state.class_names.size() < 2) {
    throw Error("checkpoint " + checkpoint.string() + " names fewer than two classes");
  }
  models::ModelOptions options =
      model_options(config, static_cast<int64_t>(state.class_names.size()));
  options.head = class_map ? models::Head::kClassMap : models::Head::kPool;
  // A network that came from a file travels in the checkpoint: the file need not exist now.
  core::Graph graph = state.network.empty()
                          ? models::build_model(config.model, options)
                          : models::network_with_head(state.network, checkpoint.string(), options);
  std::vector<io::NamedTensor> weights = state.weights;
  if (class_map) {
    // The linear classifier K×C is the 1×1 convolution K×C×1×1.
    for (io::NamedTensor& w : weights) {
      if (w.name == "classifier.weight" && w.tensor.dim() == 2) {
        w.tensor = w.tensor.view({w.tensor.size(0), w.tensor.size(1), 1, 1});
      }
    }
  }
  try {
    io::load_weights(graph.module(), weights, /*strict=*/true);
  } catch (const Error& e) {
    throw Error("checkpoint " + checkpoint.string() + " does not fit model '" + config.model +
                "': " + e.what());
  }
  graph.module().to(where);
  return {std::move(config), state.class_names, std::move(graph), where};
}

namespace {

// EvaluationRequest::inputs_dir: the whole input as the network sees it, and its logits.
void write_input(const std::filesystem::path& dir, const std::filesystem::path& slide,
                 core::TileSource& view, const at::Tensor& logits) {
  std::filesystem::create_directories(dir);
  const at::Tensor image = view.read({{0, view.height()}, {0, view.width()}}).to(at::kFloat);
  const std::string name = io::slide_stem(slide) + ".input.f32";
  write_text_atomically(dir / name,
                        std::string(static_cast<const char*>(image.contiguous().data_ptr()),
                                    static_cast<size_t>(image.nbytes())));
  const nlohmann::json line = {{"slide", slide.string()},
                               {"input", name},
                               {"shape", image.sizes().vec()},
                               {"logits", to_vector(logits)}};
  io::append_line(dir / "inputs.jsonl", line.dump());
}

}  // namespace

EvaluationResult evaluate(const EvaluationRequest& request) {
  if (!request.scratch_dir.empty()) core::TileStore::check_scratch_dir(request.scratch_dir);
  TrainedModel model = load_trained_model(request.checkpoint, false, request.device);
  const fs::path manifest_path =
      request.manifest.empty() ? model.config.manifest : request.manifest;
  io::ManifestOptions options;
  options.classes = model.classes;  // the checkpoint's class order
  io::Manifest manifest = io::load_manifest(manifest_path, options);
  if (!manifest.has_split_column) {
    io::assign_splits(manifest, model.config.val_fraction, model.config.test_fraction,
                      static_cast<uint64_t>(model.config.seed));
  }
  const std::string unusable = manifest.unusable_reason();
  if (!unusable.empty()) {
    throw Error("manifest " + manifest_path.string() + " cannot be used: " + unusable);
  }
  if (request.split != "all" && request.split != "train" && request.split != "val" &&
      request.split != "test") {
    throw Error("split '" + request.split + "' is not train, val, test or all");
  }
  std::vector<const io::ManifestEntry*> entries;
  for (const io::ManifestEntry& e : manifest.entries) {
    if (request.split == "all" || io::to_string(e.split) == request.split) entries.push_back(&e);
  }
  if (entries.empty()) {
    throw Error("manifest " + manifest_path.string() + " has no slides in split '" + request.split +
                "'");
  }
  if (!request.inputs_dir.empty()) std::filesystem::remove(request.inputs_dir / "inputs.jsonl");
  EvaluationResult result;
  result.classes = model.classes;
  std::vector<std::vector<double>> probabilities;
  std::vector<int64_t> labels;
  double loss_sum = 0;
  TissueMaskCache masks;
  std::string first_skipped;  // "slide: reason", for the error when every slide is skipped
  for (size_t i = 0; i < entries.size(); ++i) {
    const io::ManifestEntry& e = *entries[i];
    SlideProgress progress{"eval",
                           1,
                           1,
                           static_cast<int64_t>(i),
                           static_cast<int64_t>(entries.size()),
                           io::slide_name(e.slide)};
    try {
      const SlideInput input = open_slide_input(
          model.config, e.slide, slide_options(e.metadata, manifest.path, e.line), {}, &masks);
      progress.height = input.view->height();
      progress.width = input.view->width();
      if (request.observer) request.observer->on_slide(progress);
      const core::Plan plan =
          plan_for(model, progress.height, progress.width, request.budget, request.scratch_dir);
      const at::Tensor logits =
          core::infer(model.graph, plan, *input.view, step_options(request, model))
              .to(at::kCPU, at::kDouble);
      const at::Tensor target = at::tensor({static_cast<int64_t>(e.class_index)}, at::kLong);
      progress.loss = at::cross_entropy_loss(logits, target).item<double>();
      loss_sum += progress.loss;
      if (!request.inputs_dir.empty()) {
        // Not the slide's fault (a full disk): every later slide would fail the same way, and
        // an evaluation missing inputs it was asked to save did not do its work.
        try {
          write_input(request.inputs_dir, e.slide, *input.view, logits);
        } catch (const std::exception& w) {
          throw RunError("cannot save the input of " + e.slide.string() + " in " +
                         request.inputs_dir.string() + ": " + w.what());
        }
      }
      std::vector<double> p = to_vector(at::softmax(logits, 1));
      result.predictions.push_back({e.slide.string(), e.label, p});
      probabilities.push_back(std::move(p));
      labels.push_back(e.class_index);
    } catch (const RunError&) {
      throw;  // the scratch space, not the slide: every later slide would fail the same way
    } catch (const Error& error) {
      spdlog::warn("skipping {}: {}", e.slide.string(), error.what());
      if (result.skipped++ == 0) first_skipped = e.slide.string() + ": " + error.what();
      continue;
    }
    progress.done = true;
    if (request.observer) request.observer->on_slide(progress);
  }
  if (result.predictions.empty() && result.skipped > 0) {
    // Metrics of nothing, exit 0: a false success.
    throw Error("no slide of the " + request.split + " split could be evaluated: all " +
                std::to_string(result.skipped) + " were skipped (the first: " + first_skipped +
                ")");
  }
  result.metrics = classification_metrics(probabilities, labels);
  result.metrics.loss =
      labels.empty() ? std::nan("") : loss_sum / static_cast<double>(labels.size());
  if (!request.predictions_csv.empty()) {
    std::vector<std::string> header{"slide", "label", "predicted"};
    for (const std::string& c : model.classes) header.push_back("p_" + c);
    // Written whole (a temporary name and a rename): a run killed at the end leaves the previous
    // file or the complete new one, never a part.
    std::string text = csv_row(header) + "\n";
    for (const SlidePrediction& p : result.predictions) {
      const auto best = std::max_element(p.probabilities.begin(), p.probabilities.end()) -
                        p.probabilities.begin();
      std::vector<std::string> row{p.slide, p.label, model.classes[static_cast<size_t>(best)]};
      for (double v : p.probabilities) row.push_back(std::to_string(v));
      text += csv_row(row) + "\n";
    }
    write_text_atomically(request.predictions_csv, text);
  }
  return result;
}

HeatmapResult make_heatmap(const HeatmapRequest& request) {
  if (!request.scratch_dir.empty()) core::TileStore::check_scratch_dir(request.scratch_dir);
  TrainedModel model = load_trained_model(request.checkpoint, /*class_map=*/true, request.device);
  const std::string class_name =
      request.class_name.empty() ? model.classes.back() : request.class_name;
  if (std::find(model.classes.begin(), model.classes.end(), class_name) == model.classes.end()) {
    throw Error("class '" + class_name + "' is not one of the checkpoint's classes");
  }
  SlideOptions options;
  options.base_mpp = request.base_mpp;
  options.roi = request.roi;
  const SlideInput input = open_slide_input(model.config, request.slide, options);
  const int64_t height = input.view->height(), width = input.view->width();
  SlideProgress progress{"heatmap", 1, 1, 0, 1, io::slide_name(request.slide), height, width};
  if (request.observer) request.observer->on_slide(progress);
  core::Plan plan;
  try {
    plan = plan_for(model, height, width, request.budget, request.scratch_dir);
  } catch (const RunError&) {
    throw;
  } catch (const Error& e) {
    throw Error(request.slide.string() + ": " + e.what());
  }
  // 1×K×h×w class maps; their mean over positions is the pooled model's logits (average pool).
  // An attention head's are preceded by its B score maps (models::add_head).
  const int64_t classes = static_cast<int64_t>(model.classes.size());
  const bool attention = model.config.pool == "attention";
  const int64_t branches =
      attention ? (model.config.attention_branches == "classes" ? classes : 1) : 0;
  const at::Tensor outputs =
      core::infer(model.graph, plan, *input.view, step_options(request, model)).to(at::kCPU);
  const at::Tensor maps = outputs.narrow(1, branches, classes).to(at::kFloat);
  const int64_t rows = maps.size(2), cols = maps.size(3);
  HeatmapResult result;
  at::Tensor alpha;  // 1×B×h×w: each branch's attention over the positions
  if (attention) {
    // The pool weights each position's features by its attention, and the classifier is
    // linear: class k's logit is its class map weighted by its branch's attention (exact).
    alpha = core::attention_weights(outputs.narrow(1, 0, branches).to(at::kDouble));
    const at::Tensor weights = branches == 1 ? alpha.expand({1, classes, rows, cols}) : alpha;
    const at::Tensor logits = (weights * maps.to(at::kDouble)).sum({2, 3});
    result.slide_probabilities = to_vector(at::softmax(logits, 1));
  } else if (model.config.pool == "max") {
    // A max over positions does not commute with the classifier (max of W·f ≠ W·max f): the
    // slide's prediction comes from the pooled network itself, one more pass.
    TrainedModel pooled = load_trained_model(request.checkpoint, false, request.device);
    const at::Tensor logits = core::infer(
        pooled.graph, plan_for(pooled, height, width, request.budget, request.scratch_dir),
        *input.view, step_options(request, pooled));
    result.slide_probabilities = to_vector(at::softmax(logits.to(at::kDouble), 1));
  } else {
    // An average commutes with the classifier: the mean class map is the slide's logits.
    result.slide_probabilities = to_vector(at::softmax(maps.mean({2, 3}).to(at::kDouble), 1));
  }
  const at::Tensor scores = at::softmax(maps, 1).contiguous();

  io::Heatmap& h = result.heatmap;
  h.rows = rows;
  h.cols = cols;
  h.classes = model.classes;
  h.slide_width = input.slide->level(0).width;
  h.slide_height = input.slide->level(0).height;
  // Cell i sits where the network looked: its receptive field's centre, one stride per cell. Not
  // H/rows: floor-mode pooling drops the last H mod stride rows, and spreading the cells over
  // them put the last row ~20 px (350 level-0 px on CMU-1) too low on a 32-stride network.
  const auto place = [&](int axis, double& origin, double& cell, int64_t crop_begin) {
    const core::NodeId out = model.graph.output();
    const core::Window first = core::receptive_field(model.graph, out, axis, {0, 1});
    const core::Window second = core::receptive_field(model.graph, out, axis, {1, 2});
    const double stride = static_cast<double>(second.begin - first.begin);
    const double centre = static_cast<double>(first.begin + first.end) / 2.0;
    cell = stride * input.level0_per_pixel;
    origin = (static_cast<double>(crop_begin) + centre - stride / 2.0) * input.level0_per_pixel;
  };
  place(0, h.origin_y, h.cell_height, input.crop.y.begin);
  place(1, h.origin_x, h.cell_width, input.crop.x.begin);
  for (int64_t k = 0; k < classes; ++k) {
    const at::Tensor map = scores[0][k].contiguous();
    h.scores.emplace_back(map.data_ptr<float>(), map.data_ptr<float>() + map.numel());
  }
  std::string drawn = class_name;
  for (int64_t b = 0; b < branches; ++b) {
    // Shown relative to the branch's largest weight (α itself sums to 1 over the slide).
    const at::Tensor a = alpha[0][b];
    const at::Tensor map = (a / a.max()).to(at::kFloat).contiguous();
    const std::string name =
        branches == 1 ? "attention" : "attention:" + model.classes[static_cast<size_t>(b)];
    h.classes.push_back(name);
    h.scores.emplace_back(map.data_ptr<float>(), map.data_ptr<float>() + map.numel());
    if (branches == 1 || model.classes[static_cast<size_t>(b)] == class_name) drawn = name;
  }
  io::mark_tissue(h, io::tissue_mask(*input.slide));

  std::error_code error;
  fs::create_directories(request.out_dir, error);
  if (error) {
    throw Error("cannot create " + request.out_dir.string() + ": " + error.message());
  }
  const std::string stem = io::slide_stem(request.slide);
  result.tiff = request.out_dir / (stem + ".heatmap.tif");
  result.png = request.out_dir / (stem + ".heatmap.png");
  result.geojson = request.out_dir / (stem + ".heatmap.geojson");
  result.drawn = drawn;
  // The level-0 scale the run used (the file's, or --base-mpp's over it), so that QuPath and ASAP
  // overlay the heatmap at the slide's scale even when the file carries none.
  std::optional<double> level0_mpp;
  if (input.choice.mpp) level0_mpp = *input.choice.mpp / input.level0_per_pixel;
  io::write_heatmap_tiff(result.tiff, h, drawn, level0_mpp ? level0_mpp : input.slide->mpp_x());
  io::write_heatmap_overlay(result.png, *input.slide, h, drawn);
  io::write_heatmap_geojson(result.geojson, h);
  progress.done = true;
  if (request.observer) request.observer->on_slide(progress);
  return result;
}

}  // namespace tessel::pipelines
