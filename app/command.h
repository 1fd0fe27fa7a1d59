// How the `tessel` CLI is put together: global options, then one subcommand per pipeline call.
// Each app/cmd_*.cpp registers its subcommand; main.cpp lists them. No training logic here.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace tessel::app {

struct GlobalOptions {
  std::string log_level = "info";
  std::string log_file;
  int threads = 0;  // 0: all hardware threads
};

// A registered subcommand sets its callback through CLI11; the callback returns the exit code.
using CommandRunner = std::function<int()>;

struct CommandRegistry {
  CommandRunner selected;  // set by the subcommand CLI11 chose
};

void register_doctor(CLI::App& app, const GlobalOptions& global, CommandRegistry& registry);
void register_plan(CLI::App& app, const GlobalOptions& global, CommandRegistry& registry);
void register_bench(CLI::App& app, const GlobalOptions& global, CommandRegistry& registry);
// `tessel bench train` (cmd_bench_train.cpp), `bench read` and `bench allreduce`
// (cmd_bench_io.cpp), added to the `bench` command in the full build.
void add_bench_train(CLI::App* bench, CommandRegistry& registry);
void add_bench_read_and_allreduce(CLI::App* bench, CommandRegistry& registry);
void register_gradcheck(CLI::App& app, const GlobalOptions& global, CommandRegistry& registry);
void register_inspect(CLI::App& app, const GlobalOptions& global, CommandRegistry& registry);
void register_sample_data(CLI::App& app, const GlobalOptions& global, CommandRegistry& registry);
void register_thumbnail(CLI::App& app, const GlobalOptions& global, CommandRegistry& registry);
void register_manifest(CLI::App& app, const GlobalOptions& global, CommandRegistry& registry);
void register_train(CLI::App& app, const GlobalOptions& global, CommandRegistry& registry);
void register_eval(CLI::App& app, const GlobalOptions& global, CommandRegistry& registry);
void register_heatmap(CLI::App& app, const GlobalOptions& global, CommandRegistry& registry);
void register_import(CLI::App& app, const GlobalOptions& global, CommandRegistry& registry);
void register_export(CLI::App& app, const GlobalOptions& global, CommandRegistry& registry);

}  // namespace tessel::app
