// `tessel train --config run.yaml [key=value ...]`, `tessel train --resume RUN_DIR`: slide-level
// training (pipelines/train.h). Ctrl-C, SIGTERM or SIGUSR1 stops after the current slide, writes a
// checkpoint and exits 128 + the signal's number (130, 143, 138: a scheduler tells a stopped run
// from a finished one, 0, and a failed one, 1); a second signal ends at once. With --distributed,
// one process per rank (docs/distributed.md); a stop on any rank stops them all after the current
// step, and every rank exits with the stopped code.
#include <unistd.h>

#include <spdlog/sinks/sink.h>
#include <spdlog/spdlog.h>
#include <array>
#include <atomic>
#include <csignal>
#include <iostream>
#include <memory>
#include <optional>

#include "app/command.h"
#include "app/distributed_option.h"
#include "app/progress.h"
#include "core/error.h"
#include "pipelines/train.h"

namespace tessel::app {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};  // the first stopping signal received

void on_signal(int signal) {
  int none = 0;
  g_signal.compare_exchange_strong(none, signal);
  if (g_stop.exchange(true)) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
}

constexpr std::array<int, 3> kStopSignals{SIGINT, SIGTERM, SIGUSR1};

// 128 + the signal that stopped the run, as a shell reports a process a signal ended; a rank that
// stopped because another rank was signalled reports SIGTERM's (docs/train-config.md).
int stopped_exit_code() {
  const int signal = g_signal.load();
  return 128 + (signal != 0 ? signal : SIGTERM);
}

struct TrainArgs {
  std::string config;
  std::string resume;
  std::vector<std::string> overrides;
  std::string scratch;
  std::string device, precision;  // the config's `device` and `precision`, when given
  DistributedArgs dist;
  int slide_ranks = 0;  // --slide-ranks: the config's parallel and slide_ranks, when given
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
  cmd->add_option("--scratch", args->scratch,
                  "Directory for the scratch file of checkpoints offloaded to disk when they do "
                  "not fit the budget (default: the run folder)");
  cmd->add_option("--device", args->device,
                  "cpu, cuda, cuda:N or auto: the config's `device` (default auto: the first GPU "
                  "when there is one)");
  cmd->add_option("--precision", args->precision,
                  "float32, tf32 or bf16: the config's `precision` (default float32)")
      ->check(CLI::IsMember({"float32", "tf32", "bf16"}));
  add_distributed_options(cmd, args->dist,
                          "Over the processes a launcher started (torchrun, srun, mpirun): each "
                          "rank its own slides (docs/distributed.md), or each slide's step split "
                          "over ranks with the key parallel or --slide-ranks "
                          "(docs/slide-parallel.md)");
  cmd->add_option("--slide-ranks", args->slide_ranks,
                  "With --distributed: the ranks that share each slide's step, in groups that "
                  "take different slides (parallel=hybrid slide_ranks=P; 1: parallel=data)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("overrides", args->overrides, "key=value settings over the config file");
  cmd->callback([&registry, args] {
    registry.selected = [args] {
      // From the start (a signal while the config and manifest load stops the run after its
      // first slide) to the end: a signal after the run finished leaves it finished, exit 0,
      // instead of killing a process whose work is done.
      for (const int signal : kStopSignals) std::signal(signal, on_signal);
      pipelines::TrainRequest request;
      if (!args->device.empty()) args->overrides.push_back("device=" + args->device);
      if (!args->precision.empty()) args->overrides.push_back("precision=" + args->precision);
      if (args->slide_ranks == 1) {
        args->overrides.insert(args->overrides.end(), {"parallel=data", "slide_ranks=0"});
      } else if (args->slide_ranks > 1) {
        args->overrides.insert(
            args->overrides.end(),
            {"parallel=hybrid", "slide_ranks=" + std::to_string(args->slide_ranks)});
      }
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
      request.scratch_dir = args->scratch;
      std::optional<pipelines::Communicator> communicator;
      join_group(args->dist, communicator);
      if (communicator) request.communicator = &*communicator;
      const bool lead = !communicator || communicator->rank() == 0;
      // Ranks other than 0 keep the console for warnings; their full log is train.rank<r>.log.
      if (!lead) spdlog::default_logger()->sinks().front()->set_level(spdlog::level::warn);
      ProgressPrinter progress(isatty(STDERR_FILENO) == 1);
      if (lead) request.observer = &progress;
      request.stop = &g_stop;
      const pipelines::TrainSummary s = pipelines::train(request);
      const int code = s.interrupted ? stopped_exit_code() : 0;
      if (!lead) return code;
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
      return code;
    };
  });
}

}  // namespace tessel::app
