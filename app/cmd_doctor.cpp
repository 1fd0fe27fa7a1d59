// `tessel doctor`: what this Tessel can do on this machine.
#include <iostream>

#include "app/command.h"
#include "pipelines/environment.h"

namespace tessel::app {

void register_doctor(CLI::App& app, const GlobalOptions& /*global*/, CommandRegistry& registry) {
  auto* cmd = app.add_subcommand(
      "doctor", "Print the versions of the linked libraries, the thread count and CUDA status");
  cmd->callback([&registry] {
    registry.selected = [] {
      std::cout << pipelines::to_string(pipelines::probe_environment());
      return 0;
    };
  });
}

}  // namespace tessel::app
