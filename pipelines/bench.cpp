#include "pipelines/bench.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <sys/resource.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "core/device/device.h"
#include "core/device/memory.h"
#include "core/device/runtime.h"
#include "core/error.h"
#include "core/exec/executor.h"
#include "core/exec/gradcheck.h"
#include "core/plan/planner.h"
#include "core/plan/split.h"
#include "core/store/offload_prices.h"
#include "models/zoo.h"
#include "pipelines/planning.h"
#include "pipelines/run_files.h"

namespace tessel::pipelines {

namespace {

// The image in memory read as a slide is: each read a new tensor, counted in the step's peak.
// TensorTileSource hands out views of an image allocated before the step, so a tile's input
// held by autograd took no measured bytes; a training step's does (tiny on sample_data's
// slide_009 at 2 µm: bench step measured 24.1 MiB, the training step 26.6, on one plan).
class FreshReads : public core::TileSource {
 public:
  explicit FreshReads(core::TensorTileSource& image) : image_(image) {}
  int64_t channels() const override { return image_.channels(); }
  int64_t height() const override { return image_.height(); }
  int64_t width() const override { return image_.width(); }
  at::Tensor read(const core::Region& r) override {
    return image_.read(r).clone(at::MemoryFormat::Contiguous);
  }
  const core::Background* background() const override { return image_.background(); }

 private:
  core::TensorTileSource& image_;
};

int64_t max_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

// The step's collectives, timed: how long this rank spent in sums and all-gathers over the ranks
// (the transfer and the wait for the slowest rank together).
class TimedRanks : public core::Ranks {
 public:
  explicit TimedRanks(core::Ranks& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void allreduce_sum(const std::vector<at::Tensor>& tensors) override {
    const auto t0 = std::chrono::steady_clock::now();
    inner_.allreduce_sum(tensors);
    ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  void allgather(const at::Tensor& mine, const std::vector<at::Tensor>& all) override {
    const auto t0 = std::chrono::steady_clock::now();
    inner_.allgather(mine, all);
    ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  double ms = 0;

 private:
  core::Ranks& inner_;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One step's memory over time: a poller reads the step device's live and peak bytes (the
// tracking allocator's on the CPU, the caching allocator's on a GPU; so plain steps, which emit
// no tile events, have a timeline too), and the executor's samples after each tile add the tile
// store's categories and which pass and segment ran.
class TimelineRecorder : public core::Observer {
 public:
  explicit TimelineRecorder(c10::Device device)
      : device_(device), start_(std::chrono::steady_clock::now()), start_live_(reading().live) {
    poller_ = std::jthread([this](const std::stop_token& stop) {
      while (!stop.stop_requested()) {
        const core::MemoryReading r = reading();
        add({{"type", "poll"}, {"live", r.live}, {"peak", r.peak}});
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }

  // Each tile's start and end ("tile_start", "tile_done": its time, the memory then, and a
  // glass tile's flag), and the tile the memory samples that follow belong to.
  void on_tile(const core::TileEvent& e) override {
    nlohmann::json tile = {{"segment", e.segment},
                           {"tile", e.tile},
                           {"tiles", e.tiles},
                           {"pass", e.pass == core::TileEvent::kForward ? "forward" : "backward"}};
    const core::MemoryReading r = reading();
    nlohmann::json event = tile;
    event.update({{"type", e.done ? "tile_done" : "tile_start"},
                  {"glass", e.glass},
                  {"live", r.live},
                  {"peak", r.peak}});
    add(std::move(event));
    const std::scoped_lock lock(mutex_);
    last_tile_ = std::move(tile);
  }

  void on_memory(const core::MemorySample& m) override {
    nlohmann::json j = {{"type", "tile"},
                        {"live", m.live},
                        {"peak", m.peak},
                        {"budget", m.budget},
                        {"by_category", m.by_category}};
    {
      const std::scoped_lock lock(mutex_);
      j.update(last_tile_);
    }
    add(std::move(j));
  }

  // Stops polling and writes the header line (the live bytes at the start: parameters,
  // gradients, optimizer state and the image) and every sample in time order.
  void write(const std::filesystem::path& path, const BenchPoint& p, int64_t budget_bytes) {
    poller_.request_stop();
    poller_.join();
    std::ostringstream text;
    text << nlohmann::json{{"type", "step"},
                           {"model", p.model},
                           {"height", p.height},
                           {"width", p.width},
                           {"strategy", core::to_string(p.strategy)},
                           {"budget", budget_bytes},
                           {"start_live", start_live_}}
                .dump()
         << "\n";
    for (const nlohmann::json& j : samples_) text << j.dump() << "\n";
    write_text_atomically(path, text.str());
  }

 private:
  core::MemoryReading reading() const { return core::memory_reading(device_); }

  void add(nlohmann::json j) {
    j["t_ms"] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
                    .count();
    const std::scoped_lock lock(mutex_);
    samples_.push_back(std::move(j));
  }

  c10::Device device_;
  std::chrono::steady_clock::time_point start_;
  int64_t start_live_;
  std::mutex mutex_;
  nlohmann::json last_tile_ = nlohmann::json::object();
  std::vector<nlohmann::json> samples_;
  std::jthread poller_;  // last: stopped before the members it writes to are destroyed
};

core::PlanOptions::Offload parse_offload(const std::string& name) {
  using Offload = core::PlanOptions::Offload;
  if (name == "auto") return Offload::kAuto;
  if (name == "never") return Offload::kNever;
  if (name == "host") return Offload::kHost;
  if (name == "disk") return Offload::kDisk;
  throw Error("unknown offload mode '" + name + "' (auto, never, host or disk)");
}

}  // namespace

BenchResult bench_step(const BenchPoint& p) {
  core::MemoryTracker::install();
  BenchResult r;
  r.threads = core::intra_op_threads();
  const c10::Device device = core::resolve_device(p.device);
  r.device = device.str();
  models::ModelOptions model_options;
  model_options.norm = models::parse_norm(p.norm);
  model_options.global_max_pool = p.pool == "max";
  if (p.pool == "attention") model_options.attention = models::AttentionHead{};
  core::Graph graph = models::build_model(p.model, model_options);
  graph.init_parameters(p.seed);
  graph.module().to(device);
  if (p.image.defined() && p.background) {
    throw Error("a synthetic background goes with random pixels, not a given image");
  }
  const core::Shape input = p.image.defined()
                                ? core::Shape{p.image.size(1), p.image.size(2), p.image.size(3)}
                                : core::Shape{3, p.height, p.width};
  core::PlanOptions options;
  options.strategy = p.strategy;
  options.offload = parse_offload(p.offload);
  options.overrides.keep_graphs = p.keep_graphs;
  if (!p.recompute_inner) options.overrides.drop_inner = core::PlanOptions::DropInner::kNever;
  options.overrides.window_bytes = p.offload_window_bytes;
  if (p.tile > 0) options.overrides.tile_size = p.tile;
  options.prices.measure = [&] {
    if (!p.prices) return core::measure_offload_prices(options.auto_tier, p.scratch_dir, device);
    core::OffloadPrices given = *p.prices;  // not probed; the scratch disk's room is this one's
    given.disk_free_bytes = core::scratch_free_bytes(options.auto_tier, p.scratch_dir);
    return given;
  };
  if (p.checkpoints_under_bytes > 0) {
    std::vector<core::NodeId> set;
    const std::vector<core::Shape> shapes = graph.shapes(input);
    for (core::NodeId v : core::checkpoint_candidates(graph)) {
      const core::Shape& s = shapes[static_cast<size_t>(v)];
      if (s.channels * s.height * s.width * options.element_bytes <= p.checkpoints_under_bytes) {
        set.push_back(v);
      }
    }
    // The last candidates may lie past the last tiled layer: drop those.
    for (; !set.empty(); set.pop_back()) {
      core::PlanOptions unlimited = options;
      unlimited.overrides.checkpoints = set;
      try {
        (void)core::make_plan(graph, input, 0, unlimited);
        break;
      } catch (const Error&) {
      }
    }
    options.overrides.checkpoints = set;
  }
  std::optional<core::Background> background = p.image_background;
  if (p.background) {
    background = core::synthetic_background(input, background_cell(input), *p.background, p.seed);
  }
  // --no-glass runs the same plan (its tiles chosen knowing the glass) dense.
  if (background) options.background = std::make_shared<core::CellMask>(background->cells);
  if (p.ranks != nullptr) options.ranks = p.ranks->size();
  core::Plan plan;
  const int64_t limit = p.strategy == core::Strategy::kNone && p.budget_bytes == 0
                            ? p.memory_limit_bytes
                            : p.budget_bytes;
  try {
    plan = core::make_plan(graph, input, limit, options);
  } catch (const Error& e) {
    r.status = p.budget_bytes == 0 ? "out_of_memory" : "out_of_budget";
    r.message = e.what();
    return r;
  }
  for (const core::Segment& s : plan.segments) {
    if (s.reduction >= 0) continue;
    const core::Shape& out = plan.shapes[static_cast<size_t>(s.output)];
    const int64_t bytes = out.channels * out.height * out.width * plan.element_bytes;
    r.checkpoint_bytes += bytes;
    if (s.tier != core::Tier::kResident) r.offloaded_bytes += bytes;
  }
  r.predicted_moved_bytes = plan.moved_bytes();
  if (p.ranks != nullptr)
    r.summed_bytes_predicted = core::split_bytes(graph, plan, p.ranks->size()).total();
  r.uniform_checkpoint_bytes = plan.glass.uniform_checkpoint_bytes;
  if (p.keep_resident) {
    for (core::Segment& s : plan.segments) s.tier = core::Tier::kResident;
  }
  r.disk_bytes_bound = core::stored_bytes(graph, plan, core::Tier::kDisk);
  r.plan = core::to_string(plan, graph);
  r.plain_flops = plan.plain_flops;
  r.tiled_flops = plan.tiled_flops;
  r.predicted = plan.predicted;
  for (const core::MemoryBreakdown& m : plan.passes) r.predicted_passes.push_back(m.total());
  r.segments = static_cast<int64_t>(plan.segments.size());
  r.window_bytes = plan.window_bytes;
  for (const core::Segment& s : plan.segments) {
    r.write_behind.push_back(s.forward_write_behind);
    r.write_behind.push_back(s.backward_write_behind);
  }
  r.prices = plan.prices;
  for (const core::Segment& s : plan.segments) r.kept_graphs.push_back(s.keeps_graph());
  if (p.memory_limit_bytes > 0 && plan.predicted.total() > p.memory_limit_bytes) {
    r.status = "out_of_memory";
    r.message = "predicted peak " + core::format_bytes(plan.predicted.total()) +
                " exceeds the machine limit of " + core::format_bytes(p.memory_limit_bytes);
    return r;
  }

  auto gen = at::make_generator<at::CPUGeneratorImpl>(p.seed);
  core::TensorTileSource source(p.image.defined() ? p.image.to(at::kFloat).contiguous()
                                                  : at::rand({1, 3, p.height, p.width}, gen));
  if (background) {
    source = core::TensorTileSource(core::paint_background(source.image(), *background));
    r.background_fraction = plan.glass.image_fraction;  // the planner's, which knew the background
    r.glass_flops_fraction = plan.glass.flops_fraction;
    r.glass_filled_fraction = plan.glass.filled_fraction;
    source.set_background(*std::move(background));
  }
  FreshReads fresh(source);
  torch::optim::SGD optimizer(graph.module().parameters(),
                              torch::optim::SGDOptions(1e-3).momentum(0.9));
  const at::Tensor target = at::zeros({1}, at::TensorOptions(at::kLong).device(device));
  const core::LossFn loss = [](const at::Tensor& logits, const at::Tensor& t) {
    return at::cross_entropy_loss(logits, t);
  };
  const std::optional<core::TileFormats> tile_formats = core::parse_tile_formats(p.tile_format);
  // --profile adds one step after the timed ones: the profiler's overhead stays out of them.
  const int steps = p.warmup + p.repeat + (p.profile.empty() ? 0 : 1);
  for (int i = 0; i < steps; ++i) {
    const bool profiled = !p.profile.empty() && i == p.warmup + p.repeat;
    const bool record = !p.timeline.empty() && i == p.warmup + p.repeat - 1;
    std::unique_ptr<TimelineRecorder> timeline;
    core::StepOptions step_options;
    step_options.scratch_dir = p.scratch_dir;
    step_options.bypass_page_cache = p.cold_disk;
    if (p.page_cache) step_options.direct_io = false;
    step_options.precision = p.precision;
    step_options.tile_formats = tile_formats;
    step_options.glass = p.glass;
    std::optional<TimedRanks> timed;
    if (p.ranks != nullptr) step_options.ranks = &timed.emplace(*p.ranks);
    // After zero_grad, which frees the gradients: the timeline's start is then the executor's
    // (what the step's measured peak counts from), whichever step it records.
    optimizer.zero_grad();
    if (record) {
      timeline = std::make_unique<TimelineRecorder>(device);
      step_options.observer = timeline.get();
    }
    std::unique_ptr<StepProfile> profile;
    if (profiled) profile = std::make_unique<StepProfile>(device);
    const int64_t fresh_before = core::MemoryTracker::fresh_bytes();
    const auto t0 = std::chrono::steady_clock::now();
    const core::StepResult s = core::train_step(graph, plan, fresh, target, loss, step_options);
    optimizer.step();
    core::synchronize(device);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (record) timeline->write(p.timeline, p, plan.budget_bytes);
    if (profile) r.profile_top = profile->finish(p.profile);
    if (i < p.warmup || profiled) continue;
    r.step_ms.push_back(ms);
    r.fresh_bytes.push_back(core::MemoryTracker::fresh_bytes() - fresh_before);
    r.forward_ms.push_back(s.forward_ms);
    r.backward_ms.push_back(s.backward_ms);
    r.measured_peak_bytes = std::max(r.measured_peak_bytes, s.measured_peak_bytes);
    r.measured_peak_reserved_bytes =
        std::max(r.measured_peak_reserved_bytes, s.measured_peak_reserved_bytes);
    r.forward_tiles = s.forward_tiles;
    r.backward_tiles = s.backward_tiles;
    r.glass_forward_tiles = s.glass_forward_tiles;
    r.glass_backward_tiles = s.glass_backward_tiles;
    r.glass_filled = s.glass_filled;
    r.summed_bytes = s.summed_bytes;
    if (timed) r.sum_ms.push_back(timed->ms);
    r.moved_bytes.push_back(s.offload.written_bytes + s.offload.read_bytes);
    r.disk_peak_bytes = std::max(r.disk_peak_bytes, s.offload.disk_peak_bytes);
    r.transfer_ms.push_back(s.offload.write_ms + s.offload.read_ms);
    r.wait_ms.push_back(s.offload.wait_ms);
    r.read_wait_ms.push_back(s.offload.read_wait_ms);
    r.write_wait_ms.push_back(s.offload.write_wait_ms);
    r.forward_wait_ms.push_back(s.offload_forward_wait_ms);
    r.unscheduled_reads = s.offload.unscheduled_reads;
  }
  if (p.ranks != nullptr) {
    // Every rank's median step, time in exchanges and measured peak, to rank 0's line: a slower
    // rank's neighbours wait in theirs, and the plan's prediction is the busiest rank's.
    const int ranks = p.ranks->size(), rank = p.ranks->rank();
    const at::Tensor each = at::zeros({3, ranks}, at::kDouble);
    each[0][rank] = median(r.step_ms);
    each[1][rank] = median(r.sum_ms);
    each[2][rank] = static_cast<double>(r.measured_peak_bytes);
    p.ranks->allreduce_sum({each});
    for (int q = 0; q < ranks; ++q) {
      r.step_ms_by_rank.push_back(each[0][q].item<double>());
      r.sum_ms_by_rank.push_back(each[1][q].item<double>());
      r.peak_bytes_by_rank.push_back(static_cast<int64_t>(each[2][q].item<double>()));
    }
  }
  r.max_rss_bytes = max_rss_bytes();
  return r;
}

std::string to_json(const BenchPoint& p, const BenchResult& r) {
  nlohmann::json j;
  j["model"] = p.model;
  j["norm"] = p.norm;
  j["pool"] = p.pool;
  j["height"] = p.height;
  j["width"] = p.width;
  j["strategy"] = core::to_string(p.strategy);
  j["budget_bytes"] = p.budget_bytes;
  j["threads"] = r.threads;
  j["status"] = r.status;
  j["message"] = r.message;
  j["repeat"] = p.repeat;
  j["step_ms"] = r.step_ms;
  j["step_ms_median"] = median(r.step_ms);
  j["forward_ms_median"] = median(r.forward_ms);
  j["backward_ms_median"] = median(r.backward_ms);
  j["measured_peak_bytes"] = r.measured_peak_bytes;
  j["measured_peak_reserved_bytes"] = r.measured_peak_reserved_bytes;
  j["device"] = r.device;
  j["precision"] = core::to_string(p.precision);
  j["tile_format"] = p.tile_format;
  j["recompute_inner"] = p.recompute_inner;
  j["plain_flops"] = r.plain_flops;
  j["tiled_flops"] = r.tiled_flops;
  j["max_rss_bytes"] = r.max_rss_bytes;
  if (p.ranks != nullptr) {
    j["ranks"] = p.ranks->size();
    j["summed_bytes"] = r.summed_bytes;
    j["summed_bytes_predicted"] = r.summed_bytes_predicted;
    j["sum_ms"] = r.sum_ms;
    j["step_ms_by_rank"] = r.step_ms_by_rank;
    j["sum_ms_by_rank"] = r.sum_ms_by_rank;
    j["measured_peak_bytes_by_rank"] = r.peak_bytes_by_rank;
  }
  j["fresh_bytes"] = r.fresh_bytes;
  j["predicted_bytes"] = {{"parameters", r.predicted.parameters},
                          {"gradients", r.predicted.gradients},
                          {"optimizer", r.predicted.optimizer},
                          {"checkpoints", r.predicted.checkpoints},
                          {"working_set", r.predicted.working_set},
                          {"head", r.predicted.tail},
                          {"total", r.predicted.total()}};
  // On the measured peak's basis (core::MemoryBreakdown::step): what the step adds to the
  // bytes live at its start. predicted_passes stay the plan's totals, as `tessel plan` shows.
  j["predicted_step_bytes"] = r.predicted.step();
  j["predicted_passes"] = r.predicted_passes;
  j["segments"] = r.segments;
  j["offload"] = p.keep_resident ? "resident" : p.offload;
  j["cold_disk"] = p.cold_disk;
  j["page_cache"] = p.page_cache;
  j["keep_graphs"] = p.keep_graphs;
  j["offload_window_bytes"] = r.window_bytes;
  j["write_behind_bytes"] = r.write_behind;
  int64_t kept = 0;
  for (bool k : r.kept_graphs) kept += k ? 1 : 0;
  j["segments_kept"] = kept;
  j["checkpoints_under_bytes"] = p.checkpoints_under_bytes;
  j["tile"] = p.tile;
  if (!p.image_name.empty()) j["image"] = p.image_name;
  if (p.background || p.image_background) {
    if (p.background) j["background"] = *p.background;
    j["glass"] = p.glass;
    j["background_fraction"] = r.background_fraction;
    j["glass_flops_fraction"] = r.glass_flops_fraction;
    j["glass_filled_fraction"] = r.glass_filled_fraction;
    j["glass_forward_tiles"] = r.glass_forward_tiles;
    j["glass_backward_tiles"] = r.glass_backward_tiles;
    j["glass_filled"] = r.glass_filled;
    j["forward_tiles"] = r.forward_tiles;
    j["backward_tiles"] = r.backward_tiles;
  }
  j["checkpoint_bytes"] = r.checkpoint_bytes;
  j["offloaded_bytes"] = r.offloaded_bytes;
  j["uniform_checkpoint_bytes"] = r.uniform_checkpoint_bytes;
  j["moved_bytes_predicted"] = r.predicted_moved_bytes;
  if (!r.profile_top.empty()) {
    nlohmann::json top = nlohmann::json::array();
    for (const ProfileEntry& e : r.profile_top) {
      top.push_back({{"name", e.name}, {"device", e.device}, {"calls", e.calls}, {"ms", e.ms}});
    }
    j["profile_top"] = top;
  }
  j["prices"] = {{"measured", r.prices.measured && !r.prices.given},
                 {"given", r.prices.given},
                 {"seconds_per_byte_moved", r.prices.seconds_per_byte_moved},
                 {"seconds_per_flop", r.prices.seconds_per_flop}};
  j["disk_peak_bytes"] = r.disk_peak_bytes;
  j["disk_bytes_bound"] = r.disk_bytes_bound;
  j["moved_bytes"] = r.moved_bytes.empty() ? 0 : r.moved_bytes.back();
  j["transfer_s"] = median(r.transfer_ms) / 1000;
  j["wait_s"] = median(r.wait_ms) / 1000;
  // Its parts: waiting for reads, for writes, and (of both) in the forward.
  j["wait_read_s"] = median(r.read_wait_ms) / 1000;
  j["wait_write_s"] = median(r.write_wait_ms) / 1000;
  j["wait_forward_s"] = median(r.forward_wait_ms) / 1000;
  j["unscheduled_reads"] = r.unscheduled_reads;
  // The share of the I/O thread's transfer time the step did not wait for, over the timed
  // steps.
  double transfer = 0, wait = 0;
  for (double t : r.transfer_ms) transfer += t;
  for (double w : r.wait_ms) wait += w;
  j["hidden_share"] =
      transfer > 0 ? nlohmann::json(std::max(0.0, 1 - wait / transfer)) : nlohmann::json(nullptr);
  j["forward_tiles"] = r.forward_tiles;
  j["backward_tiles"] = r.backward_tiles;
  return j.dump();
}

}  // namespace tessel::pipelines
