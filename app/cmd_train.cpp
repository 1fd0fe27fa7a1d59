// `tessel train --config run.yaml [key=value ...]`, `tessel train --resume RUN_DIR`: slide-level
// training (pipelines/train.h). Ctrl-C or SIGTERM stops after the current slide and writes a
// checkpoint; a second Ctrl-C ends at once.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <iostream>
#include <memory>

#include "app/command.h"
#include "app/progress.h"
#include "core/error.h"
#include "pipelines/train.h"

namespace tessel::app {
namespace {

std::atomic<bool> g_stop{false};

void on_signal(int signal) {
  if (g_stop.exchange(true)) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
}

struct TrainArgs {
  std::string config;
  std::string resume;
  std::vector<std::string> overrides;
};

}  // namespace

void register_train(CLI::App& app, const GlobalOptions& /*global*/, CommandRegistry& registry) {
  auto* cmd = app.add_subcommand(
      "train",
      "Train a slide-level classifier on whole slides (keys: docs/train-config.md; any key can "
      "be given as key=value after the options)");
  auto args = std::make_shared<TrainArgs>();
  cmd->add_option("--config", args->config, "Config file (YAML or JSON)");
  cmd->add_option("--resume", args->resume,
                  "Continue the run in this folder from its last checkpoint (its config.yaml, "
                  "then any key=value given here)");
  cmd->add_option("overrides", args->overrides, "key=value settings over the config file");
  cmd->callback([&registry, args] {
    registry.selected = [args] {
      pipelines::TrainRequest request;
      if (!args->resume.empty()) {
        if (!args->config.empty()) {
          throw Error("give either --config or --resume: a resumed run uses its own config.yaml");
        }
        request.config = pipelines::load_train_config(
            std::filesystem::path(args->resume) / "config.yaml", args->overrides);
        if (std::filesystem::weakly_canonical(request.config.output) !=
            std::filesystem::weakly_canonical(args->resume)) {
          request.config.output = args->resume;
        }
        request.resume = true;
      } else {
        request.config = pipelines::load_train_config(args->config, args->overrides);
      }
      ProgressPrinter progress(isatty(STDERR_FILENO) == 1);
      request.observer = &progress;
      request.stop = &g_stop;
      std::signal(SIGINT, on_signal);
      std::signal(SIGTERM, on_signal);
      const pipelines::TrainSummary s = pipelines::train(request);
      std::signal(SIGINT, SIG_DFL);
      std::signal(SIGTERM, SIG_DFL);
      std::cout << (s.interrupted ? "stopped" : "trained") << " " << s.epochs_done << " epoch(s), "
                << s.steps << " step(s) in " << static_cast<int64_t>(s.seconds) << " s; run folder "
                << s.run_dir.string() << "\n";
      if (s.best_epoch > 0) {
        std::cout << "best " << request.config.metric << " " << s.best_metric << " at epoch "
                  << s.best_epoch << " (" << (s.run_dir / "checkpoints" / "best.h5").string()
                  << ")\n";
      }
      if (s.interrupted) {
        std::cout << "continue with: tessel train --resume " << s.run_dir.string() << "\n";
      }
      return 0;
    };
  });
}

}  // namespace tessel::app
