// `tessel plan` and `tessel gradcheck`: the engine's plan for a model, and its first law checked.
#include <iostream>
#include <stdexcept>
#include <string>

#include "app/command.h"
#include "app/parse.h"
#include "core/error.h"
#include "pipelines/planning.h"
#ifndef TESSEL_ENGINE_ONLY
#include "pipelines/network.h"
#endif

namespace tessel::app {
namespace {

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

}  // namespace

void register_plan(CLI::App& app, const GlobalOptions& /*global*/, CommandRegistry& registry) {
  struct Args {
    std::string model = "vgg16", size, budget = "8GiB", strategy = "auto", norm = "frozen", prices;
    bool keep_inner = false;
    int64_t classes = 2;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("plan", "Print how a training step runs under a memory budget");
  cmd->add_option(
         "--model", args->model,
         "Network (tiny, vgg-mini, vgg16, vgg19, darknet19, "
         "resnet18, resnet34, resnet50), or a checkpoint that holds one (NET.h5 from tessel "
         "import)")
      ->capture_default_str();
  cmd->add_option("--size", args->size, "Image size WIDTHxHEIGHT in pixels")->required();
  cmd->add_option("--budget", args->budget, "Memory budget, e.g. 2GiB, 512MiB")
      ->capture_default_str();
  cmd->add_option("--strategy", args->strategy,
                  "none, grid, rows (LR-CNN OverL), rows-shared (LR-CNN 2PS) or auto")
      ->check(CLI::IsMember({"none", "grid", "rows", "rows-shared", "auto"}))
      ->capture_default_str();
  cmd->add_option("--classes", args->classes, "Classes of the slide-level head")
      ->capture_default_str();
  cmd->add_option("--norm", args->norm,
                  "The zoo's batch norms: frozen, batch (training mode) or group")
      ->check(CLI::IsMember({"frozen", "batch", "group"}))
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print the plan as JSON");
  cmd->add_flag("--keep-inner-checkpoints", args->keep_inner, kKeepInnerCheckpointsHelp);
  cmd->add_option("--prices", args->prices, kPricesHelp);
  cmd->callback([args, &registry] {
    registry.selected = [args] {
      pipelines::PlanRequest r;
      r.model = args->model;
      r.network = checkpoint_network(args->model);
      std::tie(r.height, r.width) = parse_size(args->size);
      r.budget_bytes = core::parse_bytes(args->budget);
      r.strategy = core::parse_strategy(args->strategy);
      r.classes = args->classes;
      r.norm = args->norm;
      if (!args->prices.empty()) r.prices = parse_prices(args->prices);
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
    std::string norm = "frozen";
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "gradcheck", "Compare one tiled training step with plain autograd on random data");
  cmd->add_option("--model", args->model,
                  "A model name, 'random' (drawn from --seed), 'random-barriers' (the same with "
                  "batch norms, group norms and SE blocks), or a checkpoint that holds a network "
                  "(NET.h5 from tessel import)")
      ->capture_default_str();
  cmd->add_option("--size", args->size, "Image size WIDTHxHEIGHT")->capture_default_str();
  cmd->add_option("--strategy", args->strategy, "grid, rows or rows-shared")
      ->check(CLI::IsMember({"grid", "rows", "rows-shared"}))
      ->capture_default_str();
  cmd->add_option("--tile", args->tile, "Tile size in output pixels (default: 3×3 tiles)");
  cmd->add_option("--norm", args->norm,
                  "The zoo's batch norms: frozen, batch (training mode) or group")
      ->check(CLI::IsMember({"frozen", "batch", "group"}))
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
  cmd->add_option("--offload", args->offload,
                  "Move every checkpoint to this tier (host or disk) and back: none, host, disk")
      ->check(CLI::IsMember({"none", "host", "disk"}))
      ->capture_default_str();
  cmd->add_option("--scratch", args->scratch,
                  "Directory for the disk tier's scratch file (default: the temporary directory)");
  cmd->add_option("--device", args->device,
                  "cpu, cuda, cuda:N, or auto (the first GPU when there is one, else the CPU)")
      ->capture_default_str();
  cmd->callback([args, &registry] {
    registry.selected = [args] {
      pipelines::GradcheckRequest r;
      r.device = args->device;
      r.model = args->model;
      r.network = checkpoint_network(args->model);
      r.norm = args->norm;
      std::tie(r.height, r.width) = parse_size(args->size);
      r.strategy = core::parse_strategy(args->strategy);
      r.tile = args->tile;
      r.seed = args->seed;
      const std::string precision = args->float32 ? "float32" : args->precision;
      r.float64 = precision == "float64";
      if (!r.float64) r.precision = core::parse_precision(precision);
      r.offload = args->offload == "disk"   ? core::PlanOptions::Offload::kDisk
                  : args->offload == "host" ? core::PlanOptions::Offload::kHost
                                            : core::PlanOptions::Offload::kNever;
      r.scratch_dir = args->scratch;
      const auto report = pipelines::gradcheck(r);
      const auto& c = report.comparison;
      std::cout << report.plan_table << "max relative error (" << precision << ", " << report.device
                << "): output " << c.logits << ", loss " << c.loss << ", input gradient "
                << c.input_grad << ", parameter gradients " << c.worst_param << " ("
                << c.worst_param_name << ")";
      if (!c.worst_buffer_name.empty()) {
        std::cout << ", running statistics " << c.worst_buffer << " (" << c.worst_buffer_name
                  << ")";
      }
      std::cout << "\n";
      if (r.offload != core::PlanOptions::Offload::kNever) {
        std::cout << "offload (" << args->offload << "): " << core::format_bytes(c.offload_bytes)
                  << " moved\n";
      }
      const double least = core::least_tolerance(r.precision);
      const auto& f = report.floor;
      double worst = c.worst();
      std::string bar = "1e-10";  // one bar for float64 and float32; per quantity otherwise
      if (r.precision == core::Precision::kFloat32 && !report.float64) {
        std::cout << "plain float32 against plain float64 (the floor): output " << f.logits
                  << ", loss " << f.loss << ", input gradient " << f.input_grad
                  << ", parameter gradients " << f.worst_param << " (" << f.worst_param_name
                  << ")\nbar: max(" << least << ", 2 × the floor's worst)\n";
        bar = std::to_string(std::max(least, 2 * f.worst()));
      } else if (!report.float64) {
        std::cout << "norm-wise relative error (" << precision << "): output " << c.output_norm
                  << ", input gradient " << c.input_grad_norm << ", parameter gradients "
                  << c.params_norm << "\nplain " << precision
                  << " against plain float64 (the floor), norm-wise: output " << f.output_norm
                  << ", input gradient " << f.input_grad_norm << ", parameter gradients "
                  << f.params_norm << "\nbar: each norm-wise error within max(" << least
                  << ", 2 × its floor)\n";
        worst = std::max({c.output_norm, c.input_grad_norm, c.params_norm});
        bar.clear();
      }
      std::cout << (report.passed() ? "PASS" : "FAIL") << ": worst " << worst;
      if (!bar.empty()) std::cout << (report.passed() ? " <= " : " > ") << bar;
      std::cout << "\n";
      return report.passed() ? 0 : 1;
    };
  });
}

}  // namespace tessel::app
