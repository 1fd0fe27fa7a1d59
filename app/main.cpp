// `tessel`: the headless CLI. Parses arguments, sets up logging and threads, runs one subcommand.
// Exit codes: 0 done, 1 the work failed (message on stderr), 2 the command line is wrong.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iostream>
#include <thread>

#include "app/command.h"
#include "core/device/runtime.h"
#include "core/error.h"
#include "core/version.h"
#include "pipelines/logging.h"

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

int run(int argc, char** argv) {
  using namespace tessel;
  CLI::App app{"Tessel: train CNNs on whole gigapixel slides, end to end, in bounded memory.",
               "tessel"};
  app.set_version_flag("--version", std::string("tessel ") + kVersion);
  app.require_subcommand(1);
  app.fallthrough();  // global options may also follow the subcommand
  app::GlobalOptions global;
  app.add_option("--log-level", global.log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  app.add_option("--log-file", global.log_file, "Also write the log to this file");
  // More threads than the machine's cores only slow LibTorch down (10000 took 40 s to start).
  const int cores = std::max(1U, std::thread::hardware_concurrency());
  app.add_option("--threads", global.threads,
                 "LibTorch intra-op threads, at most this machine's " + std::to_string(cores) +
                     " (default: all cores)")
      ->check(CLI::Range(0, cores));

  app::CommandRegistry registry;
  app::register_doctor(app, global, registry);
  app::register_plan(app, global, registry);
  app::register_gradcheck(app, global, registry);
  app::register_bench(app, global, registry);
#ifndef TESSEL_ENGINE_ONLY  // the commands that read slides or write runs (io/, pipelines/)
  app::register_inspect(app, global, registry);
  app::register_sample_data(app, global, registry);
  app::register_thumbnail(app, global, registry);
  app::register_manifest(app, global, registry);
  app::register_train(app, global, registry);
  app::register_eval(app, global, registry);
  app::register_heatmap(app, global, registry);
  app::register_import(app, global, registry);
  app::register_export(app, global, registry);
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "tessel: error: " << e.what() << " (see tessel --help)\n";
    return kExitUsage;
  }

  pipelines::setup_logging(global.log_level, global.log_file);
  const int threads = core::configure_threads(global.threads);
  spdlog::debug("tessel {} · LibTorch {} · {} thread(s)", kVersion, core::torch_version(), threads);
  return registry.selected ? registry.selected() : kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const tessel::Error& e) {
    std::cerr << "tessel: error: " << e.what() << "\n";
    return kExitFailure;
  } catch (const std::exception& e) {
    std::cerr << "tessel: unexpected error: " << e.what() << "\n";
    return kExitFailure;
  }
}
