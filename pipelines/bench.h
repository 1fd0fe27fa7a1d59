// One benchmark point: training steps of a model on a random image of a given size under a
// strategy and budget, timed and measured (`tessel bench step`; bench/run runs one process per
// point so peaks do not leak between points).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/device/precision.h"
#include "core/exec/ranks.h"
#include "core/plan/plan.h"
#include "core/tile_source.h"
#include "pipelines/step_profile.h"

namespace tessel::pipelines {

struct BenchPoint {
  std::string model = "vgg-mini";
  std::string norm = "frozen";  // the zoo's batch norms: frozen, batch or group
  std::string pool = "avg";     // the head: avg, max or attention (TrainConfig::pool)
  int64_t height = 1024, width = 1024;
  core::Strategy strategy = core::Strategy::kAuto;
  int64_t budget_bytes = 0;  // 0: none (plain runs are still refused above memory_limit_bytes)
  int64_t memory_limit_bytes = 0;  // the machine's: points predicted above it are not run
  int repeat = 3;
  int warmup = 1;
  uint64_t seed = 1;
  // When set, the last timed step's memory timeline is written here as JSON lines: live and
  // peak bytes polled every millisecond or two, and the executor's per-tile samples (with the
  // tile store's categories) — bench/plot.py draws it.
  std::filesystem::path timeline;
  // When set, one more step after the timed ones runs under LibTorch's profiler and its trace
  // is written here (pipelines/step_profile.h); the longest kernels or operators go in the JSON
  // line.
  std::filesystem::path profile;
  // Offload (bench/run --only offload): where the planner may move checkpoints, and the
  // comparison point: the plan made under the budget, run with every checkpoint kept resident
  // (the same tiles, so only the transfers differ; its peak exceeds the budget).
  std::string offload = "auto";  // auto, never, host or disk (core::PlanOptions::Offload)
  bool keep_resident = false;
  // Checkpoints at every candidate whose activation is at most this many bytes, instead of the
  // planner's search (which may stream the whole network as one segment and offload nothing).
  int64_t checkpoints_under_bytes = 0;
  std::filesystem::path scratch_dir;  // empty: the system's temporary directory
  bool cold_disk = false;             // the disk tier bypasses the page cache
  // The disk tier goes through the page cache even where the device's choice is direct I/O
  // (core/device/device.h direct_disk_io: on the CPU); the comparison point.
  bool page_cache = false;
  // Segments keep their autograd graphs where the budget leaves room (core::PlanOptions);
  // false: every segment recomputes its forward in the backward (the comparison point).
  bool keep_graphs = true;
  // Inner checkpoints that cost less to recompute than to move are dropped (core::PlanOptions::
  // drop_inner); false: every one kept (the comparison point).
  bool recompute_inner = true;
  // The planner's offload prices (app/parse.h: parse_prices); empty: measured on the step's
  // device. Given, a point plans the same every run (measured ones swing with load).
  std::optional<core::OffloadPrices> prices;
  int64_t offload_window_bytes = 0;  // the tile store's read-ahead window; 0: the planner's
  std::string device = "cpu";        // core::resolve_device: cpu, cuda, cuda:N, auto
  core::Precision precision = core::Precision::kFloat32;
  std::string tile_format = "auto";  // core::parse_tile_formats: auto, cpu, contiguous, ...
  // A seeded constant background over about this fraction of the image (core::
  // synthetic_background), declared to the step, whose glass tiles are then not run; `glass`
  // false runs them all the same (the comparison point).
  std::optional<double> background;
  bool glass = true;
  // An image to train on instead of random pixels (float 1×3×H×W, e.g. a slide's:
  // read_slide_image), with its own background where it has one (not with `background`);
  // height and width are the image's.
  at::Tensor image;
  std::optional<core::Background> image_background;
  std::string image_name;  // what the image is (the slide), for the record
  int64_t tile = 0;        // tile size in output pixels (PlanOptions::Overrides); 0: the planner's
  // The step split over a group of ranks (slide-parallel, docs/slide-parallel.md): this process's
  // place in it; null: alone.
  core::Ranks* ranks = nullptr;
};

struct BenchResult {
  std::string status = "ok";  // ok | out_of_budget | out_of_memory | error
  std::string message;
  std::vector<double> step_ms, forward_ms, backward_ms;
  // The device's memory meter (core/device/device.h), above what was live before the step: the
  // CPU's tracking allocator, or a GPU's caching allocator (allocated; and reserved, -1 on the
  // CPU).
  int64_t measured_peak_bytes = 0;
  int64_t measured_peak_reserved_bytes = -1;
  std::string device;  // where the steps ran: "cpu", "cuda:0"
  // The plan's forward FLOPs of the whole network on the whole image, and with halo recompute.
  // A training step is about 3× the plain forward's (forward, and a backward of twice that).
  int64_t plain_flops = 0, tiled_flops = 0;
  int64_t max_rss_bytes = 0;  // the process's, from getrusage
  // Per timed step, the CPU's fresh memory: bytes of large blocks the tracking allocator's cache
  // did not serve (each page faulted and was zeroed by the kernel; core/device/memory.h).
  std::vector<int64_t> fresh_bytes;
  core::MemoryBreakdown predicted;
  std::vector<int64_t> predicted_passes;  // the plan's, totals (core::Plan::passes)
  int64_t forward_tiles = 0, backward_tiles = 0, segments = 0;
  std::vector<bool> kept_graphs;      // per segment: the plan keeps its autograd graph
  int64_t window_bytes = 0;           // the plan's offload window
  std::vector<int64_t> write_behind;  // the store's write-behind, by pass as predicted_passes
  // The prices the planner used (measured on the step's device when it priced offloading; else
  // its guess): what a plan on another machine, a GPU's, was chosen at.
  core::OffloadPrices prices;
  std::vector<ProfileEntry> profile_top;  // --profile: the longest entries of the last step
  int threads = 0;
  std::string plan;
  // Offload, per timed step: the checkpoints (all, and those in the host or disk tier), the bytes
  // it predicts to move, and what the tile store measured (bytes written + read, the I/O
  // thread's busy time, the time the step waited for it).
  int64_t checkpoint_bytes = 0, offloaded_bytes = 0, predicted_moved_bytes = 0;
  int64_t uniform_checkpoint_bytes = 0;  // of checkpoint_bytes, glass kept as vectors (glass.h)
  // The most held on disk at once: the plan's bound (core::stored_bytes) and the measured.
  int64_t disk_bytes_bound = 0, disk_peak_bytes = 0;
  std::vector<int64_t> moved_bytes;
  std::vector<double> transfer_ms, wait_ms;
  std::vector<double> read_wait_ms, write_wait_ms, forward_wait_ms;  // wait_ms's parts
  int64_t unscheduled_reads = 0;  // the last timed step's (the store reads those on demand)
  // With a background: its share of the image, the share of the forward's FLOPs the plan's
  // glass tiles skip (core::GlassSummary), and the glass tiles the last step skipped.
  double background_fraction = 0, glass_flops_fraction = 0, glass_filled_fraction = 0;
  int64_t glass_forward_tiles = 0, glass_backward_tiles = 0, glass_filled = 0;
  int64_t summed_bytes = 0;  // split over ranks: what this rank gave to sums, per step (last)
  int64_t summed_bytes_predicted = 0;  // the plan's (core::split_bytes)
  std::vector<double> sum_ms;          // split: the time in exchanges over ranks, waits included
  // Split: each rank's median step and time in exchanges (rank q's at q).
  std::vector<double> step_ms_by_rank, sum_ms_by_rank;
  std::vector<int64_t> peak_bytes_by_rank;  // each rank's measured_peak_bytes
};

BenchResult bench_step(const BenchPoint& point);
std::string to_json(const BenchPoint& point, const BenchResult& result);

}  // namespace tessel::pipelines
