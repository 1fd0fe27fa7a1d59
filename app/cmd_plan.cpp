// `tessel plan` and `tessel gradcheck`: the engine's plan for a model, and its first law checked.
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/command.h"
#include "app/parse.h"
#include "core/error.h"
#include "pipelines/planning.h"
#ifndef TESSEL_ENGINE_ONLY
#include "app/distributed_option.h"
#include "app/slide_option.h"
#include "pipelines/network.h"
#endif

namespace tessel::app {

#ifndef TESSEL_ENGINE_ONLY
void add_slide_options(CLI::App* cmd, SlideArgs& args, const std::string& what,
                       const std::string& settings) {
  cmd->add_option("--slide", args.slide,
                  what +
                      " this slide as training sees it: its resolution, tissue box and "
                      "tissue_fill's background (glass), from key=value settings "
                      "(docs/train-config.md)");
  cmd->add_option("--roi", args.roi, "With --slide: a GeoJSON region to train on (its polygons)");
  cmd->add_option("settings", args.overrides, "With --slide: key=value settings: " + settings);
}

void refuse_unread_settings(const SlideArgs& args, const std::string& command) {
  static const std::map<std::string, std::string> flags = {
      {"model", "--model"},   {"budget", "--budget"}, {"strategy", "--strategy"},
      {"norm", "--norm"},     {"pool", "--pool"},     {"precision", "--precision"},
      {"device", "--device"}, {"seed", "--seed"}};
  if (args.slide.empty()) return;  // slide_image says settings go with --slide
  const std::string read = kSlideReadKeys;
  for (const std::string& setting : args.overrides) {
    const std::string key = setting.substr(0, setting.find('='));
    if (!key.empty() && (", " + read + ",").find(", " + key + ",") != std::string::npos) continue;
    const auto flag = flags.find(key);
    throw Error("tessel " + command + " --slide reads only how the slide is read from its " +
                "settings (" + read + "), not " + key + "=" +
                (flag != flags.end() ? ": give it as " + flag->second : std::string()));
  }
}

void refuse_flags_with_slide(const CLI::App& cmd,
                             const std::vector<std::pair<std::string, std::string>>& flags) {
  for (const auto& [flag, key] : flags) {
    if (cmd.count(flag) == 0) continue;
    throw Error("tessel plan --slide plans as training does, from key=value settings: " +
                (key.empty() ? flag + " goes without --slide"
                             : "write " + key + "=... instead of " + flag));
  }
}

pipelines::TrainConfig slide_config(const SlideArgs& args) {
  std::vector<std::string> settings{"manifest=none.csv"};
  settings.insert(settings.end(), args.overrides.begin(), args.overrides.end());
  return pipelines::load_train_config("", settings);
}

std::optional<pipelines::SlideImage> slide_image(const SlideArgs& args, const CLI::App& cmd,
                                                 int64_t max_pixels) {
  if (args.slide.empty()) {
    if (!args.overrides.empty() || !args.roi.empty()) {
      throw Error("key=value settings and --roi go with --slide");
    }
    return std::nullopt;
  }
  if (cmd.count("--size") > 0) throw Error("--size and --slide: give one of them");
  pipelines::SlideOptions options;
  options.roi = args.roi;
  pipelines::SlideImage image =
      pipelines::read_slide_image(slide_config(args), args.slide, max_pixels, options);
  std::cerr << image.description;
  return image;
}
#endif

namespace {

#ifndef TESSEL_ENGINE_ONLY
// `gradcheck --slide`: float64 plain autograd holds every activation of the whole image.
constexpr int64_t kGradcheckSlidePixels = 4'000'000;
#endif

// `--model NET.h5`: the network a checkpoint holds (an imported one), with a head for `classes`.
pipelines::NetworkBuilder checkpoint_network(const std::string& model) {
  if (!model.ends_with(".h5")) return {};
#ifdef TESSEL_ENGINE_ONLY
  throw Error("--model " + model + ": this engine-only build reads no checkpoints");
#else
  return [model](int64_t classes) {
    models::ModelOptions options;
    options.classes = classes;
    return pipelines::build_network(model, options).graph;
  };
#endif
}

// The worst quantity whose name starts with `prefix` ("gradient of ", "buffer "), or null.
const core::Quantity* worst_of(const core::Comparison& c, const std::string& prefix) {
  const core::Quantity* worst = nullptr;
  for (const core::Quantity& q : c.quantities) {
    if (q.name.rfind(prefix, 0) != 0) continue;
    if (!q.ok() || std::isnan(q.max_error)) return &q;
    if (worst == nullptr || q.max_error > worst->max_error) worst = &q;
  }
  return worst;
}

std::string error_of(const core::Quantity* q, bool norm_wise = false) {
  if (q == nullptr) return "none";
  if (!q->ok()) return q->fault;
  std::ostringstream os;
  os << (norm_wise ? q->norm_error : q->max_error);
  return os.str();
}

// One line: the worst error of each kind of quantity, and where it was (max-abs relative, or
// norm-wise).
std::string errors_line(const core::Comparison& c, bool norm_wise) {
  std::ostringstream os;
  os << "output " << error_of(c.find("output"), norm_wise) << ", loss "
     << error_of(c.find("loss"), norm_wise);
  if (const core::Quantity* q = c.find("input gradient"); q != nullptr) {
    os << ", input gradient " << error_of(q, norm_wise);
  }
  const core::Quantity* param = worst_of(c, "gradient of ");
  os << ", parameter gradients " << error_of(param, norm_wise);
  if (param != nullptr) os << " (" << param->name.substr(12) << ")";
  if (const core::Quantity* b = worst_of(c, "buffer "); b != nullptr) {
    os << ", running statistics " << error_of(b, norm_wise) << " (" << b->name.substr(7) << ")";
  }
  return os.str();
}

// The quantities judged against the step's scale because their own reference is (near) zero.
void print_floored(const core::Comparison& c) {
  std::vector<std::string> names;
  double floor = 0;
  for (const core::Quantity& q : c.quantities) {
    if (!q.floored) continue;
    names.push_back(q.name);
    floor = q.floor;
  }
  if (names.empty()) return;
  std::cout << names.size() << " quantit" << (names.size() == 1 ? "y" : "ies")
            << " with a (near) zero reference judged against " << core::kZeroScale
            << " of the step's scale (" << floor << " for the last): " << names.front()
            << (names.size() > 1 ? ", ..." : "") << "\n";
}

// The background the check painted, what the plan skips, and what the step skipped.
void print_glass(const core::GlassSummary& g, const core::Comparison& c) {
  std::cout << fmt::format(
      "background: {:.1f}% of the image uniform; glass tiles (not run): {} of {} forward, {} of "
      "{} backward (the plan: {} and {}), {:.1f}% of the forward's FLOPs; {:.1f}% filled in tiles "
      "that also see tissue ({} node tiles filled in the step)\n",
      100.0 * g.image_fraction, c.glass_forward_tiles, g.forward_tiles, c.glass_backward_tiles,
      g.backward_tiles, g.glass_forward_tiles, g.glass_backward_tiles, 100.0 * g.flops_fraction,
      100.0 * g.filled_fraction, c.glass_filled);
}

// Why a quantity has no bar (core::bar_for's 0): its tiled floor over kTiledRounding × plain's
// (the tiled step's own rounding: a fault's, or a ReLU kink its rounding crossed, bench/NOTES.md
// session 66), or no floor at all.
std::string no_bar_words(const core::Quantity& q, const pipelines::GradcheckReport& report) {
  if (core::bar_for(q, report.floor, report.precision, report.tiled_floor) > 0) return "";
  const core::Quantity* plain = report.floor.find(q.name);
  const core::Quantity* tiled = report.tiled_floor.find(q.name);
  if (plain == nullptr || tiled == nullptr) return " (no floor to judge it against)";
  std::ostringstream words;
  words << " (no bar: the tiled step's own rounding of it, "
        << core::bar_error(*tiled, report.precision) << ", is over " << core::kTiledRounding
        << " × plain's, " << core::bar_error(*plain, report.precision) << ")";
  return words.str();
}

void print_report(const pipelines::GradcheckReport& report, const std::string& precision,
                  const std::string& offload) {
  const auto& c = report.comparison;
  std::cout << report.plan_table << "schemes checked: ";
  for (size_t i = 0; i < report.schemes.size(); ++i) {
    std::cout << (i ? ", " : "") << report.schemes[i];
  }
  std::cout << "\nbarriers in tiled segments: " << report.tiled_barriers << "\n";
  if (!report.step_error.empty()) {
    std::cout << "the tiled step failed: " << report.step_error << "\nFAIL\n";
    return;
  }
  if (report.ranks > 1 && report.processes) {
    std::cout << "split over " << report.ranks << " ranks (processes); this is rank "
              << report.worst_rank << "'s check\n";
  } else if (report.ranks > 1) {
    std::cout << "split over " << report.ranks << " ranks (threads); every rank checked, the worst "
              << "is rank " << report.worst_rank << "'s\n";
  }
  std::cout << "max relative error (" << precision << ", " << report.device
            << "): " << errors_line(c, false) << "\n";
  print_floored(c);
  if (offload != "none") {
    std::cout << "offload (" << offload << "): " << core::format_bytes(c.offload_bytes)
              << " moved\n";
  }
  if (report.glass) print_glass(*report.glass, c);
  std::cout << c.faults();
  const char* verdict = report.passed() ? "PASS" : "FAIL";
  if (report.float64) {
    const core::Quantity* w = c.worst_quantity();
    std::cout << verdict << ": worst " << c.worst() << (report.passed() ? " <= " : " > ")
              << pipelines::GradcheckReport::kFloat64Bar << " (" << (w ? w->name : "none") << ")\n";
    return;
  }
  const bool norm_wise = report.precision != core::Precision::kFloat32;
  const double least = core::least_tolerance(report.precision);
  if (norm_wise) std::cout << "norm-wise (" << precision << "): " << errors_line(c, true) << "\n";
  const core::Quantity* e = report.exact.worst_quantity();
  std::cout << "the same plan in float64 against plain float64 (the first law): worst "
            << report.exact.worst() << " (" << (e ? e->name : "none") << "), bar "
            << pipelines::GradcheckReport::kFloat64Bar << "\n"
            << report.exact.faults() << "floors, each step " << precision
            << " against itself in float64" << (norm_wise ? ", norm-wise" : "")
            << ":\n  plain: " << errors_line(report.floor, norm_wise)
            << "\n  tiled: " << errors_line(report.tiled_floor, norm_wise)
            << "\nbar: each quantity's " << (norm_wise ? "norm-wise" : "max relative")
            << " error within max(" << least
            << ", 2 × the larger of its two floors), the tiled floor at most "
            << core::kTiledRounding << " × plain's\n";
  if (!(report.exact.worst() <= pipelines::GradcheckReport::kFloat64Bar)) {
    std::cout << "FAIL: the first law in float64: worst " << report.exact.worst() << " > "
              << pipelines::GradcheckReport::kFloat64Bar << " (" << (e ? e->name : "none") << ")\n";
    return;
  }
  const core::Quantity* t = core::tightest(c, report.floor, report.precision, report.tiled_floor);
  if (t == nullptr) {
    std::cout << verdict << "\n";
    return;
  }
  const double bar = core::bar_for(*t, report.floor, report.precision, report.tiled_floor);
  const double error = core::bar_error(*t, report.precision);
  std::cout << verdict << ": tightest " << t->name << " " << error
            << (report.passed() ? " <= " : " > ") << bar << no_bar_words(*t, report) << "\n";
}

}  // namespace

void register_plan(CLI::App& app, const GlobalOptions& /*global*/, CommandRegistry& registry) {
  struct Args {
    std::string model = "vgg16", size, budget = "8GiB", strategy = "auto", norm = "frozen", prices;
    bool keep_inner = false;
    int64_t classes = 2;
    bool json = false;
    std::optional<double> background;
    int ranks = 1;
    double link_gbps = core::kLoopbackBytesPerSecond / 1e9;
#ifndef TESSEL_ENGINE_ONLY
    SlideArgs slide;
#endif
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("plan", "Print how a training step runs under a memory budget");
  cmd->add_option(
         "--model", args->model,
         "Network (tiny, vgg-mini, vgg16, vgg19, darknet19, "
         "resnet18, resnet34, resnet50), or a checkpoint that holds one (NET.h5 from tessel "
         "import)")
      ->capture_default_str();
  cmd->add_option("--size", args->size,
                  "Image size WIDTHxHEIGHT in pixels (or --slide: the slide's own)");
  cmd->add_option("--budget", args->budget, "Memory budget, e.g. 2GiB, 512MiB")
      ->check(positive_bytes())
      ->capture_default_str();
  cmd->add_option("--strategy", args->strategy,
                  "none, grid, rows (LR-CNN OverL), rows-shared (LR-CNN 2PS) or auto")
      ->check(CLI::IsMember({"none", "grid", "rows", "rows-shared", "auto"}))
      ->capture_default_str();
  cmd->add_option("--classes", args->classes, "Classes of the slide-level head")
      ->check(CLI::Range(int64_t{2}, int64_t{65536}))
      ->capture_default_str();
  cmd->add_option("--norm", args->norm,
                  "The zoo's batch norms: frozen, batch (training mode) or group")
      ->check(CLI::IsMember({"frozen", "batch", "group"}))
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print the plan as JSON");
  cmd->add_flag("--keep-inner-checkpoints", args->keep_inner, kKeepInnerCheckpointsHelp);
  cmd->add_option("--prices", args->prices, kPricesHelp);
  cmd->add_option("--background", args->background,
                  "Plan for an image whose constant background covers about this fraction of it "
                  "(a seeded synthetic one, 0 to 1): glass tiles priced as not run, and reported")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--ranks", args->ranks,
                  "Plan the step split over this many ranks (slide-parallel, "
                  "docs/slide-parallel.md): a tile per rank in every pass, and what each rank "
                  "exchanges a step")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--link", args->link_gbps,
                  "With --ranks: the link between the ranks in GB/s, for the step's predicted "
                  "time (the default: Gloo between two processes on one 2-core machine)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
#ifndef TESSEL_ENGINE_ONLY
  add_slide_options(cmd, args->slide, "Plan for",
                    "any training key (model=, budget=, strategy=, norm=, mpp=, "
                    "tissue_fill=true, glass=false, ...), as training reads them; the flags "
                    "above but --ranks and --link go without --slide");
#endif
  cmd->callback([args, cmd, &registry] {
    registry.selected = [args, cmd] {
#ifndef TESSEL_ENGINE_ONLY
      if (!args->slide.slide.empty()) {
        // The run's settings (model, budget, resolution, tissue_fill, ...) as training reads them.
        refuse_flags_with_slide(*cmd, {{"--model", "model"},
                                       {"--budget", "budget"},
                                       {"--strategy", "strategy"},
                                       {"--norm", "norm"},
                                       {"--classes", "classes"},
                                       {"--size", ""},
                                       {"--json", ""},
                                       {"--keep-inner-checkpoints", ""},
                                       {"--prices", ""},
                                       {"--background", "tissue_fill"}});
        pipelines::SlideOptions options;
        options.roi = args->slide.roi;
        const pipelines::SlidePlan p =
            pipelines::plan_slide(slide_config(args->slide), args->slide.slide, options,
                                  args->ranks, args->link_gbps * 1e9);
        std::cout << p.description << p.table;
        return 0;
      }
      if (!args->slide.overrides.empty() || !args->slide.roi.empty()) {
        throw Error("tessel plan: key=value settings and --roi go with --slide");
      }
#endif
      if (args->size.empty()) throw Error("tessel plan: give --size WIDTHxHEIGHT, or --slide");
      pipelines::PlanRequest r;
      r.model = args->model;
      r.network = checkpoint_network(args->model);
      std::tie(r.height, r.width) = parse_size(args->size);
      r.budget_bytes = core::parse_bytes(args->budget);
      r.strategy = core::parse_strategy(args->strategy);
      r.classes = args->classes;
      r.norm = args->norm;
      if (!args->prices.empty()) r.prices = parse_prices(args->prices);
      r.background = args->background;
      r.ranks = args->ranks;
      r.link_bytes_per_second = args->link_gbps * 1e9;
      r.keep_inner = args->keep_inner;
      const auto report = pipelines::plan_model(r);
      std::cout << (args->json ? report.json + "\n" : report.table);
      return 0;
    };
  });
}

void register_gradcheck(CLI::App& app, const GlobalOptions& /*global*/, CommandRegistry& registry) {
  struct Args {
    std::string model = "random", size = "61x47", strategy = "grid";
    int64_t tile = 0;
    uint64_t seed = 1;
    bool float32 = false;
    std::string precision = "float64";
    std::string offload = "none", scratch, device = "auto";
    std::string norm = "frozen", pool = "avg", budget = "0", prices, inject = "none";
    bool ungated = false, input_gradient = false, every_quantity = false;
    int64_t branches = 1;
    int ranks = 1;
    std::optional<double> background;
#ifndef TESSEL_ENGINE_ONLY
    SlideArgs slide;
    DistributedArgs dist;
#endif
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "gradcheck",
      "Compare one tiled training step with plain autograd on random data. Exit status: 0 "
      "pass, 1 a mismatch, 2 a check that could not be made (bad arguments, a plan that does "
      "not tile)");
  cmd->add_option("--model", args->model,
                  "A model name, 'random' (drawn from --seed), 'random-barriers' (the same with "
                  "batch norms, group norms and SE blocks), or a checkpoint that holds a network "
                  "(NET.h5 from tessel import)")
      ->capture_default_str();
  cmd->add_option("--size", args->size, "Image size WIDTHxHEIGHT")->capture_default_str();
  cmd->add_option("--strategy", args->strategy, "grid, rows or rows-shared")
      ->check(CLI::IsMember({"grid", "rows", "rows-shared"}))
      ->capture_default_str();
  cmd->add_option("--tile", args->tile, "Tile size in output pixels (default: 3×3 tiles)")
      ->check(CLI::Range(int64_t{1}, kMaxImageSide));
  cmd->add_option("--budget", args->budget,
                  "Check the plan training makes under this memory budget (e.g. 4MiB), with "
                  "every scheme its search picks, instead of fixed tiles; 0: fixed tiles")
      ->capture_default_str();
  cmd->add_option("--prices", args->prices, kPricesHelp);
  cmd->add_option("--norm", args->norm,
                  "The zoo's batch norms: frozen, batch (training mode) or group")
      ->check(CLI::IsMember({"frozen", "batch", "group"}))
      ->capture_default_str();
  cmd->add_option("--pool", args->pool,
                  "The zoo's head: avg or max (a streaming global pool) or attention (a model "
                  "name only; random networks draw their own head)")
      ->check(CLI::IsMember({"avg", "max", "attention"}))
      ->capture_default_str();
  cmd->add_flag("--ungated", args->ungated, "Attention without its gate (tanh only)");
  cmd->add_option("--branches", args->branches,
                  "Attention branches: 1, or 2 (one per class, CLAM-MB)")
      ->check(CLI::Range(int64_t{1}, int64_t{2}))
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Seed of weights, image and random network")
      ->capture_default_str();
  cmd->add_option("--precision", args->precision,
                  "float64 (tolerance 1e-10), or float32, tf32 or bf16 (float32 weights; each "
                  "quantity within twice the plain step's own error against float64, and "
                  "at least 1e-4 in float32, 4 unit roundoffs in tf32 and bf16)")
      ->check(CLI::IsMember({"float64", "float32", "tf32", "bf16"}))
      ->capture_default_str();
  cmd->add_flag("--float32", args->float32, "The same as --precision float32");
  cmd->add_flag("--input-gradient", args->input_gradient,
                "Check the step that also returns the image's gradient (saliency); by default "
                "the step training runs, without it");
  cmd->add_option("--inject", args->inject,
                  "A deliberate fault in the tiled step, which must FAIL: nan-grad (a NaN in one "
                  "parameter's gradient), nan-stat (a NaN in one running statistic; models with "
                  "--norm batch), halo (one tile's input window one pixel short)")
      ->check(CLI::IsMember({"none", "nan-grad", "nan-stat", "halo"}))
      ->capture_default_str();
  cmd->add_flag("--every-quantity", args->every_quantity,
                "Print every compared quantity's errors (and the floor's), not only the worst");
  cmd->add_option("--offload", args->offload,
                  "Move every checkpoint to this tier (host or disk) and back: none, host, disk")
      ->check(CLI::IsMember({"none", "host", "disk"}))
      ->capture_default_str();
  cmd->add_option("--scratch", args->scratch,
                  "Directory for the disk tier's scratch file (default: the temporary directory)");
  cmd->add_option("--device", args->device,
                  "cpu, cuda, cuda:N, or auto (the first GPU when there is one, else the CPU)")
      ->capture_default_str();
  cmd->add_option("--background", args->background,
                  "Paint a seeded constant background over about this fraction of the image "
                  "(0 to 1: blobs with holes and thin bridges) and declare it, so the tiled step "
                  "skips its glass tiles")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--ranks", args->ranks,
                  "Split the tiled step over this many ranks (threads of this process, a replica "
                  "of the network each: slide-parallel, docs/slide-parallel.md) and check every "
                  "rank's gradients; float64")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
#ifndef TESSEL_ENGINE_ONLY
  add_distributed_options(
      cmd, args->dist,
      "Split the tiled step over the processes a launcher started (torchrun, srun, mpirun; one "
      "rank each, docs/slide-parallel.md); each checks its own gradients");
  add_slide_options(cmd, args->slide, "Check on (instead of random pixels, in place of --size)",
                    std::string("how the slide is read (") + kSlideReadKeys +
                        "); the network and the plan are the flags");
#endif
  cmd->callback([args, cmd, &registry] {
    registry.selected = [args, cmd] {
      const std::string precision = args->float32 ? "float32" : args->precision;
      pipelines::GradcheckReport report;
      try {
        pipelines::GradcheckRequest r;
        r.device = args->device;
        r.model = args->model;
        r.network = checkpoint_network(args->model);
        r.norm = args->norm;
        r.pool = args->pool;
        r.gated = !args->ungated;
        r.branches = args->branches;
        std::tie(r.height, r.width) = parse_size(args->size);
        r.strategy = core::parse_strategy(args->strategy);
        r.tile = args->tile;
        r.budget_bytes = core::parse_bytes(args->budget);
        if (!args->prices.empty()) r.prices = parse_prices(args->prices);
        r.seed = args->seed;
        r.float64 = precision == "float64";
        if (!r.float64) r.precision = core::parse_precision(precision);
        r.offload = args->offload == "disk"   ? core::PlanOptions::Offload::kDisk
                    : args->offload == "host" ? core::PlanOptions::Offload::kHost
                                              : core::PlanOptions::Offload::kNever;
        r.scratch_dir = args->scratch;
        r.input_gradient = args->input_gradient;
        r.inject = core::parse_fault(args->inject);
        r.background = args->background;
        r.ranks = args->ranks;
#ifndef TESSEL_ENGINE_ONLY
        // Float64 plain autograd over the whole image: a few million pixels at most.
        refuse_unread_settings(args->slide, "gradcheck");
        if (auto image = slide_image(args->slide, *cmd, kGradcheckSlidePixels)) {
          r.image = image->pixels;
          r.image_background = std::move(image->background);
        }
        std::optional<pipelines::Communicator> group;
        join_group(args->dist, group);
        if (group) r.group = &*group;
#endif
        report = pipelines::gradcheck(r);
      } catch (const Error& e) {
        std::cerr << "tessel: error: " << e.what() << "\n";
        return 2;  // the check could not be made
      }
      if (args->inject != "none") {
        std::cout << "injected fault: " << args->inject << " (the check must FAIL)\n";
      }
      if (args->every_quantity) {
        std::cout << "tiled against plain, every quantity:\n" << report.comparison.to_string();
        if (!report.float64) {
          std::cout << "plain " << precision << " against plain float64:\n"
                    << report.floor.to_string() << "tiled " << precision
                    << " against tiled float64:\n"
                    << report.tiled_floor.to_string();
        }
      }
      print_report(report, precision, args->offload);
      return report.passed() ? 0 : 1;
    };
  });
}

}  // namespace tessel::app
