// `tessel bench step`: one benchmark point, printed as one JSON line (bench/run drives it).
#include <iostream>

#include "app/command.h"
#include "app/parse.h"
#include "pipelines/bench.h"
#ifndef TESSEL_ENGINE_ONLY
#include "app/distributed_option.h"
#include "app/slide_option.h"
#endif

namespace tessel::app {
#ifndef TESSEL_ENGINE_ONLY
namespace {

// `bench step --slide` holds the slide's image in memory as float: 256 Mpx is 3 GiB.
constexpr int64_t kBenchSlidePixels = 256'000'000;

}  // namespace
#endif

void register_bench(CLI::App& app, const GlobalOptions& /*global*/, CommandRegistry& registry) {
  struct Args {
    std::string model = "vgg-mini", size = "1024x1024", strategy = "auto", budget = "0",
                memory_limit = "20GiB", timeline, profile, offload = "auto", scratch,
                checkpoints_under = "0", offload_window = "0", device = "cpu",
                precision = "float32", norm = "frozen", pool = "avg", tile_format = "auto", prices;
    int repeat = 3, warmup = 1;
    int64_t tile = 0;
    std::optional<double> background;
    bool no_glass = false;
    bool keep_resident = false, cold_disk = false, page_cache = false, print_plan = false,
         recompute_all = false, keep_inner = false;
#ifndef TESSEL_ENGINE_ONLY
    SlideArgs slide;
    DistributedArgs dist;
#endif
  };
  auto args = std::make_shared<Args>();
  auto* bench = app.add_subcommand("bench", "Benchmarks (see bench/README.md)");
  bench->require_subcommand(1);
#ifndef TESSEL_ENGINE_ONLY
  add_bench_train(bench, registry);
#endif
  auto* cmd = bench->add_subcommand(
      "step", "Time training steps of a model on a random image; print one JSON line");
  cmd->add_option("--model", args->model, "Network")->capture_default_str();
  cmd->add_option("--size", args->size, "Image size WIDTHxHEIGHT")->capture_default_str();
  cmd->add_option("--norm", args->norm, "The zoo's batch norms: frozen, batch or group")
      ->check(CLI::IsMember({"frozen", "batch", "group"}))
      ->capture_default_str();
  cmd->add_option("--pool", args->pool, "The head: avg, max or attention (gated, 128 wide)")
      ->check(CLI::IsMember({"avg", "max", "attention"}))
      ->capture_default_str();
  cmd->add_option("--strategy", args->strategy, "none, grid, rows, rows-shared or auto")
      ->check(CLI::IsMember({"none", "grid", "rows", "rows-shared", "auto"}))
      ->capture_default_str();
  cmd->add_option("--budget", args->budget, "Memory budget (0: none)")->capture_default_str();
  cmd->add_option("--memory-limit", args->memory_limit,
                  "Points predicted above this are recorded as out of memory, not run")
      ->capture_default_str();
  cmd->add_option("--repeat", args->repeat, "Timed steps")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "Untimed steps first")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  cmd->add_option(
      "--timeline", args->timeline,
      "Write the last step's memory timeline and each tile's start and end here (JSON lines; "
      "bench/plot.py draws it)");
  cmd->add_option("--profile", args->profile,
                  "Profile one more step after the timed ones (LibTorch's profiler: operators, and "
                  "on a GPU kernels) and write its Chrome trace here; the longest go in the JSON "
                  "line");
  cmd->add_option("--offload", args->offload,
                  "Where checkpoints beyond the budget go: auto (disk, when no resident plan "
                  "fits or offloading costs less), never, host or disk (every checkpoint)")
      ->check(CLI::IsMember({"auto", "never", "host", "disk"}))
      ->capture_default_str();
  cmd->add_flag("--keep-resident", args->keep_resident,
                "Plan under the budget, then keep every checkpoint resident: the same tiles "
                "without transfers (the peak exceeds the budget)");
  cmd->add_option("--checkpoints-under", args->checkpoints_under,
                  "Checkpoints at every candidate layer whose activation is at most this size "
                  "(e.g. 512MiB) instead of the planner's choice (0: the planner's)")
      ->capture_default_str();
  cmd->add_option("--scratch", args->scratch,
                  "Directory for the disk tier's scratch file (default: the temporary directory)");
  cmd->add_flag("--cold-disk", args->cold_disk,
                "The disk tier bypasses the page cache (flush and drop each block after writing "
                "and reading it), so reads come from the device");
  cmd->add_flag("--page-cache", args->page_cache,
                "The disk tier writes and reads through the page cache (the comparison point: on "
                "the CPU it uses direct I/O, sparing the compute cores the kernel's copies)");
  cmd->add_option("--offload-window", args->offload_window,
                  "The tile store's read-ahead and write-behind window, counted in the budget "
                  "(0: the planner's choice of 1/4, 1/8 or 1/16 of the budget)")
      ->capture_default_str();
  cmd->add_flag("--recompute-all", args->recompute_all,
                "Keep no segment's autograd graph: every segment recomputes its forward in the "
                "backward (the planner otherwise keeps graphs where the budget leaves room)");
  cmd->add_flag("--keep-inner-checkpoints", args->keep_inner, kKeepInnerCheckpointsHelp);
  cmd->add_option("--prices", args->prices, kPricesHelp);
  cmd->add_option("--device", args->device,
                  "cpu, cuda, cuda:N, or auto (the first GPU when there is one); the CPU unless "
                  "asked, so that bench/run's tables stay the CPU's")
      ->capture_default_str();
  cmd->add_option("--precision", args->precision, "float32, tf32 or bf16 (core/device/precision.h)")
      ->check(CLI::IsMember({"float32", "tf32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--tile-format", args->tile_format,
                  "The tiles' memory format: auto (the device's choice for the precision), cpu "
                  "(channels-last forward, recompute as read), contiguous or channels-last")
      ->check(CLI::IsMember({"auto", "cpu", "contiguous", "channels-last"}))
      ->capture_default_str();
  cmd->add_option("--tile", args->tile, "Tile size in output pixels (0: the planner's)")
      ->check(CLI::Range(int64_t{0}, kMaxImageSide))
      ->capture_default_str();
  cmd->add_option("--background", args->background,
                  "Paint a seeded constant background over about this fraction of the image "
                  "(0 to 1) and declare it: the step skips its glass tiles")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag("--no-glass", args->no_glass,
                "With --background: run the glass tiles all the same (the comparison point)");
  cmd->add_flag("--print-plan", args->print_plan,
                "Print the plan the point ran (tessel plan's table) to standard error");
#ifndef TESSEL_ENGINE_ONLY
  add_slide_options(cmd, args->slide, "Train on (instead of random pixels, in place of --size)",
                    std::string("how the slide is read (") + kSlideReadKeys +
                        "); the network, budget and plan are the flags");
  add_distributed_options(cmd, args->dist,
                          "Split each step over the processes a launcher started (slide-parallel, "
                          "docs/slide-parallel.md); rank 0 prints the point");
#endif
  cmd->callback([args, cmd, &registry] {
    registry.selected = [args, cmd] {
      pipelines::BenchPoint p;
      p.model = args->model;
      p.norm = args->norm;
      p.pool = args->pool;
      std::tie(p.height, p.width) = parse_size(args->size);
      p.strategy = core::parse_strategy(args->strategy);
      p.budget_bytes = core::parse_bytes(args->budget);
      p.memory_limit_bytes = core::parse_bytes(args->memory_limit);
      p.repeat = args->repeat;
      p.warmup = args->warmup;
      p.timeline = args->timeline;
      p.profile = args->profile;
      p.offload = args->offload;
      p.keep_resident = args->keep_resident;
      p.scratch_dir = args->scratch;
      p.cold_disk = args->cold_disk;
      p.page_cache = args->page_cache;
      p.keep_graphs = !args->recompute_all;
      p.recompute_inner = !args->keep_inner;
      if (!args->prices.empty()) p.prices = parse_prices(args->prices);
      p.offload_window_bytes = core::parse_bytes(args->offload_window);
      p.checkpoints_under_bytes = core::parse_bytes(args->checkpoints_under);
      p.device = args->device;
      p.precision = core::parse_precision(args->precision);
      p.tile_format = args->tile_format;
      p.tile = args->tile;
      p.background = args->background;
      p.glass = !args->no_glass;
#ifndef TESSEL_ENGINE_ONLY
      refuse_unread_settings(args->slide, "bench step");
      if (auto image = slide_image(args->slide, *cmd, kBenchSlidePixels)) {
        p.image = image->pixels;
        p.image_background = std::move(image->background);
        p.image_name = args->slide.slide;
        p.height = p.image.size(2);
        p.width = p.image.size(3);
      }
      std::optional<pipelines::Communicator> group;
      join_group(args->dist, group);
      if (group) p.ranks = &*group;
#endif
      const pipelines::BenchResult r = pipelines::bench_step(p);
      if (args->print_plan) std::cerr << r.plan << "\n";
      if (p.ranks == nullptr || p.ranks->rank() == 0) std::cout << pipelines::to_json(p, r) << "\n";
      return r.status == "error" ? 1 : 0;
    };
  });

#ifndef TESSEL_ENGINE_ONLY
  add_bench_read_and_allreduce(bench, registry);
#endif
}

}  // namespace tessel::app
