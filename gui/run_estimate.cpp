#include "gui/run_estimate.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <sstream>

#include "core/device/device.h"
#include "core/error.h"
#include "core/exec/executor.h"
#include "core/plan/plan.h"
#include "core/plan/planner.h"
#include "core/tile_source.h"
#include "io/manifest.h"
#include "io/resolution.h"
#include "pipelines/network.h"
#include "pipelines/slide_input.h"

namespace tessel::gui {

namespace {

// Beyond this many distinct slide sizes, the smaller ones are priced per pixel from the
// smallest size planned instead of planned each: a cohort's slides all differ in size, and
// plans of large slides take up to a few tenths of a second each. The largest are planned,
// so the peak and a budget too small are those of the slides that need the most.
constexpr size_t kMaxPlans = 12;
// The image the FLOP rate is timed on: large enough that the network's ops run as on a slide's
// tiles (a 3×3 conv alone ran twice as fast as resnet50's mix of convs, batch norms, ReLUs and
// adds, bench/NOTES.md, session 25), small enough to take about a second on 2 cores.
constexpr int64_t kRateSize = 384;

std::string size_text(int64_t height, int64_t width) {
  return std::to_string(width) + "×" + std::to_string(height) + " px";
}

}  // namespace

double step_flops(const core::Plan& plan) {
  if (plan.segments.empty()) return 3.0 * static_cast<double>(plan.plain_flops);
  const double per_tile = core::PlanOptions().prices.per_tile;
  double flops = 0;
  for (const core::Segment& s : plan.segments) {
    const auto forward = static_cast<double>(s.halo_flops);
    flops += forward * (s.keeps_graph() ? 3.0 : 4.0) +
             per_tile * static_cast<double>(s.forward.tiles() + s.backward.tiles());
  }
  return flops;
}

double forward_flops(const core::Plan& plan) {
  const double per_tile = core::PlanOptions().prices.per_tile;
  double tiles = 0;
  for (const core::Segment& s : plan.segments) tiles += static_cast<double>(s.forward.tiles());
  return static_cast<double>(plan.tiled_flops) + per_tile * tiles;
}

struct RunEstimator::Caches {
  std::map<std::string, std::pair<int64_t, int64_t>> sizes;  // height, width by slide and view
  pipelines::TissueMaskCache tissue_masks;
  std::map<std::string, std::shared_ptr<core::Graph>> networks;

  // The slide as the run sees it at `config`'s resolution (tissue box, ROI).
  std::pair<int64_t, int64_t> slide_size(const pipelines::TrainConfig& config,
                                         const std::filesystem::path& slide,
                                         const pipelines::SlideOptions& options) {
    std::ostringstream key;
    key << slide.string() << '|' << pipelines::resolution_of(config) << '|'
        << options.base_mpp.value_or(0) << '|' << options.roi.string() << '|' << config.tissue_bbox;
    const auto hit = sizes.find(key.str());
    if (hit != sizes.end()) return hit->second;
    const pipelines::SlideInput input =
        pipelines::open_slide_input(config, slide, options, {}, &tissue_masks);
    const std::pair<int64_t, int64_t> size{input.view->height(), input.view->width()};
    sizes.emplace(key.str(), size);
    return size;
  }

  // The run's network (pipelines::build_network, as the run builds it), once per model and head.
  const core::Graph& network(const pipelines::TrainConfig& config, int64_t classes) {
    std::ostringstream key;
    key << config.model << '|' << classes << '|' << config.pool << '|' << config.norm << '|'
        << config.dropout << '|' << config.attention_hidden << '|' << config.attention_gated << '|'
        << config.attention_branches << '|' << config.attention_dropout;
    auto it = networks.find(key.str());
    if (it == networks.end()) {
      const models::ModelOptions options = pipelines::model_options(config, classes);
      pipelines::Network network = pipelines::build_network(config.model, options);
      it = networks.emplace(key.str(), std::make_shared<core::Graph>(std::move(network.graph)))
               .first;
    }
    return *it->second;
  }
};

RunEstimator::RunEstimator() : caches_(std::make_unique<Caches>()) {}
RunEstimator::~RunEstimator() = default;

RunEstimate RunEstimator::estimate(const pipelines::TrainConfig& config,
                                   const std::atomic<bool>* cancelled) {
  Caches& cache = *caches_;
  const auto stop = [cancelled] { return cancelled != nullptr && cancelled->load(); };
  // The manifest as the run reads it (pipelines/train.cpp, load_data).
  io::ManifestOptions manifest_options;
  manifest_options.classes = config.classes;
  io::Manifest manifest = io::load_manifest(config.manifest, manifest_options);
  if (!manifest.has_split_column) {
    io::assign_splits(manifest, config.val_fraction, config.test_fraction,
                      static_cast<uint64_t>(config.seed));
  }
  const std::string unusable = manifest.unusable_reason();
  if (!unusable.empty()) {
    throw Error("manifest " + config.manifest.string() + " cannot be used: " + unusable);
  }
  if (manifest.classes.size() < 2) {
    throw Error("manifest " + config.manifest.string() +
                " has one class only; a classifier needs at least two");
  }
  const core::Graph& graph = cache.network(config, static_cast<int64_t>(manifest.classes.size()));
  const int64_t channels = graph.node(graph.input()).channels;

  RunEstimate estimate;
  estimate.budget_bytes = core::parse_bytes(config.budget);
  // The sizes of the train and val slides, and how many of each split have each size.
  struct Count {
    int64_t train = 0, val = 0;
    std::string slide;  // one slide of that size, for messages
  };
  std::map<std::pair<int64_t, int64_t>, Count> sizes;
  for (const io::ManifestEntry& entry : manifest.entries) {
    if (stop()) return {};
    if (entry.split == io::Split::kTest) continue;
    std::pair<int64_t, int64_t> size;
    try {
      size = cache.slide_size(config, entry.slide,
                              pipelines::slide_options(entry.metadata, manifest.path, entry.line));
    } catch (const Error& e) {
      estimate.skipped.push_back(entry.slide.filename().string() + ": " + e.what());
      continue;
    }
    Count& count = sizes[size];
    (entry.split == io::Split::kTrain ? count.train : count.val) += 1;
    if (count.slide.empty()) count.slide = entry.slide.filename().string();
    (entry.split == io::Split::kTrain ? estimate.train_slides : estimate.val_slides) += 1;
  }
  if (estimate.train_slides == 0) {
    throw Error("no train slide of " + config.manifest.string() + " opens at " +
                io::to_string(pipelines::resolution_of(config)) +
                (estimate.skipped.empty() ? std::string() : ": " + estimate.skipped.front()));
  }

  // As the run plans each slide (pipelines/train.cpp, plan_for).
  core::PlanOptions options;
  options.strategy = core::parse_strategy(config.strategy);
  options.optimizer_state_per_param = config.optimizer == "sgd" ? 1 : 2;
  std::vector<std::pair<std::pair<int64_t, int64_t>, Count>> by_area(sizes.begin(), sizes.end());
  std::sort(by_area.begin(), by_area.end(), [](const auto& a, const auto& b) {
    return a.first.first * a.first.second > b.first.first * b.first.second;
  });
  double step_per_pixel = 0, forward_per_pixel = 0;
  for (size_t i = 0; i < by_area.size(); ++i) {
    if (stop()) return {};
    const auto [height, width] = by_area[i].first;
    const Count& count = by_area[i].second;
    const auto pixels = static_cast<double>(height * width);
    double step = 0, forward = 0;
    if (i < kMaxPlans) {
      core::Plan plan;
      try {
        pipelines::check_input_size(graph, config, height, width);
        plan = core::make_plan(graph, {channels, height, width}, estimate.budget_bytes, options);
      } catch (const Error& e) {
        throw Error(count.slide + " (" + size_text(height, width) + "): " + e.what());
      }
      if (plan.predicted.total() > estimate.peak_bytes) {
        estimate.peak_bytes = plan.predicted.total();
        estimate.peak_height = height;
        estimate.peak_width = width;
      }
      step = step_flops(plan);
      forward = forward_flops(plan);
      step_per_pixel = step / pixels;
      forward_per_pixel = forward / pixels;
    } else {
      step = step_per_pixel * pixels;
      forward = forward_per_pixel * pixels;
    }
    estimate.train_flops += step * static_cast<double>(count.train);
    estimate.val_flops += forward * static_cast<double>(count.val);
  }
  return estimate;
}

double measure_flops_per_second(const pipelines::TrainConfig& config) {
  const c10::Device device = core::resolve_device(config.device);
  const models::ModelOptions options = pipelines::model_options(config, 2);
  pipelines::Network network = pipelines::build_network(config.model, options);
  core::Graph& graph = network.graph;
  graph.module().to(device);
  const int64_t channels = graph.node(graph.input()).channels;
  core::PlanOptions plain;
  plain.strategy = core::Strategy::kNone;
  const core::Plan plan = core::make_plan(graph, {channels, kRateSize, kRateSize}, 0, plain);
  core::TensorTileSource source(at::rand({1, channels, kRateSize, kRateSize}));
  const at::Tensor target = at::zeros({1}, at::kLong).to(device);
  const core::LossFn loss = [](const at::Tensor& logits, const at::Tensor& t) {
    return at::cross_entropy_loss(logits.to(at::kFloat), t);
  };
  const auto step = [&] {
    (void)core::train_step(graph, plan, source, target, loss);
    core::synchronize(device);
  };
  step();  // oneDNN's primitives for these shapes, the allocator's first pages
  double best = 0;
  for (int i = 0; i < 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = i == 0 ? s : std::min(best, s);
  }
  return best > 0 ? step_flops(plan) / best : 0;
}

}  // namespace tessel::gui
