// The options of a command run over the processes a launcher started (`train`, `gradcheck`;
// docs/distributed.md, docs/slide-parallel.md): the flag, the rendezvous and the timeout, and
// the process group they make. Full build only.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "pipelines/distributed.h"

namespace tessel::app {

struct DistributedArgs {
  bool on = false;
  pipelines::DistributedOptions options;
};

inline void add_distributed_options(CLI::App* cmd, DistributedArgs& args, const std::string& help) {
  cmd->add_flag("--distributed", args.on, help);
  cmd->add_option("--rendezvous", args.options.rendezvous,
                  "With --distributed: env:// (MASTER_ADDR:MASTER_PORT) or file:///shared/path")
      ->capture_default_str();
  cmd->add_option("--dist-timeout", args.options.timeout_seconds,
                  "With --distributed: seconds to wait for the other ranks before failing")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--dist-backend", args.options.backend,
                  "With --distributed: gloo (TCP; any device) or nccl (ranks on GPUs, one GPU "
                  "each)")
      ->check(CLI::IsMember({"gloo", "nccl"}))
      ->capture_default_str();
}

// Joins the process group `args` asks for (none without --distributed): the launcher's
// variables, MASTER_ADDR only for a TCP rendezvous.
inline void join_group(const DistributedArgs& args, std::optional<pipelines::Communicator>& group) {
  if (!args.on) return;
  const bool file = args.options.rendezvous.starts_with("file://");
  group.emplace(pipelines::distributed_env(pipelines::process_environment(), !file), args.options);
}

}  // namespace tessel::app
