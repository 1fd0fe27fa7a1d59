// `tessel bench train`: a sweep of benchmark points (model × sizes × strategies), each in a
// fresh `tessel bench step` process so that one point's peak never leaks into the next; results
// as JSON lines and CSV in --out. bench/run drives the published page (with the PyTorch
// baselines); this is the same sweep for Tessel's own strategies, without Python.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "app/command.h"
#include "app/parse.h"
#include "core/error.h"

namespace tessel::app {
namespace {

namespace fs = std::filesystem;

struct ProcessOutput {
  int exit_code = 0;  // the process's exit status, or −signal when a signal ended it
  std::string out, err;
};

// Runs argv[0] with argv, stdout captured through a pipe and stderr through a temporary file
// (reading both through pipes one after the other could deadlock on a full pipe).
ProcessOutput run(const std::vector<std::string>& argv, const fs::path& err_file) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw Error(std::string("bench train: pipe: ") + std::strerror(errno));
  const pid_t child = ::fork();
  if (child < 0) throw Error(std::string("bench train: fork: ") + std::strerror(errno));
  if (child == 0) {
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    const int err = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err >= 0) ::dup2(err, STDERR_FILENO);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  ProcessOutput result;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(pipe_fds[0], buffer, sizeof buffer);
    if (n > 0) {
      result.out.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
  std::ifstream err(err_file);
  std::stringstream text;
  text << err.rdbuf();
  result.err = text.str();
  std::error_code ignored;
  fs::remove(err_file, ignored);
  return result;
}

std::string last_line(const std::string& text) {
  std::string line, last;
  std::istringstream in(text);
  while (std::getline(in, line)) {
    if (!line.empty() && line.front() == '{') last = line;
  }
  return last;
}

std::string tail(const std::string& text, size_t n) {
  return text.size() <= n ? text : text.substr(text.size() - n);
}

// One CSV field: quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string number_or_empty(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return "";
  return j[key].dump();
}

const char* const kCsvHeader =
    "model,height,width,strategy,budget_bytes,status,step_ms_median,step_ms_min,step_ms_max,"
    "forward_ms_median,backward_ms_median,measured_peak_bytes,max_rss_bytes,"
    "predicted_peak_bytes,forward_tiles,backward_tiles,threads,wall_s,message";

std::string csv_row(const nlohmann::json& p) {
  std::vector<double> steps;
  if (p.contains("step_ms")) steps = p["step_ms"].get<std::vector<double>>();
  const auto mn =
      steps.empty() ? std::string() : std::to_string(*std::min_element(steps.begin(), steps.end()));
  const auto mx =
      steps.empty() ? std::string() : std::to_string(*std::max_element(steps.begin(), steps.end()));
  std::string predicted;
  if (p.contains("predicted_bytes") && p["predicted_bytes"].contains("total")) {
    predicted = p["predicted_bytes"]["total"].dump();
  }
  std::ostringstream row;
  row << csv_field(p.value("model", "")) << ',' << number_or_empty(p, "height") << ','
      << number_or_empty(p, "width") << ',' << csv_field(p.value("strategy", "")) << ','
      << number_or_empty(p, "budget_bytes") << ',' << csv_field(p.value("status", "")) << ','
      << number_or_empty(p, "step_ms_median") << ',' << mn << ',' << mx << ','
      << number_or_empty(p, "forward_ms_median") << ',' << number_or_empty(p, "backward_ms_median")
      << ',' << number_or_empty(p, "measured_peak_bytes") << ','
      << number_or_empty(p, "max_rss_bytes") << ',' << predicted << ','
      << number_or_empty(p, "forward_tiles") << ',' << number_or_empty(p, "backward_tiles") << ','
      << number_or_empty(p, "threads") << ',' << number_or_empty(p, "wall_s") << ','
      << csv_field(p.value("message", ""));
  return row.str();
}

struct SweepArgs {
  std::string model = "vgg-mini", budget = "1GiB", memory_limit = "20GiB", out = "bench-out";
  std::vector<int64_t> sizes{512, 1024, 2048};
  std::vector<std::string> strategies{"none", "grid", "rows"};
  int repeat = 2, warmup = 1;
};

int sweep(const SweepArgs& a) {
  std::error_code ec;
  fs::create_directories(a.out, ec);
  if (ec) throw Error("bench train: cannot create " + a.out + ": " + ec.message());
  const fs::path jsonl = fs::path(a.out) / "results.jsonl";
  const fs::path csv = fs::path(a.out) / "results.csv";
  std::ofstream json_out(jsonl), csv_out(csv);
  if (!json_out || !csv_out) throw Error("bench train: cannot write results into " + a.out);
  csv_out << kCsvHeader << "\n";
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  int errors = 0;
  const size_t total = a.sizes.size() * a.strategies.size();
  size_t index = 0;
  for (const int64_t size : a.sizes) {
    for (const std::string& strategy : a.strategies) {
      ++index;
      const std::string dims = std::to_string(size) + "x" + std::to_string(size);
      const std::vector<std::string> argv{self,
                                          "--log-level",
                                          "warn",
                                          "bench",
                                          "step",
                                          "--model",
                                          a.model,
                                          "--size",
                                          dims,
                                          "--strategy",
                                          strategy,
                                          "--budget",
                                          strategy == "none" ? "0" : a.budget,
                                          "--memory-limit",
                                          a.memory_limit,
                                          "--repeat",
                                          std::to_string(a.repeat),
                                          "--warmup",
                                          std::to_string(a.warmup)};
      spdlog::info("bench train: point {}/{}: {} {}² {}", index, total, a.model, size, strategy);
      const auto t0 = std::chrono::steady_clock::now();
      const ProcessOutput r = run(argv, fs::path(a.out) / ".point.stderr");
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      nlohmann::json p;
      const std::string line = last_line(r.out);
      if (r.exit_code == 0 && !line.empty()) {
        p = nlohmann::json::parse(line, nullptr, false);
      }
      if (p.is_discarded() || p.is_null()) {
        // Killed by a signal (the OOM killer's SIGKILL) is out of memory; anything else an error.
        p = nlohmann::json{{"model", a.model},
                           {"height", size},
                           {"width", size},
                           {"strategy", strategy},
                           {"budget_bytes", 0},
                           {"status", r.exit_code < 0 ? "out_of_memory (killed)" : "error"},
                           {"message", tail(r.err, 300)}};
        if (r.exit_code >= 0) ++errors;
      }
      p["wall_s"] = wall;
      json_out << p.dump() << "\n" << std::flush;
      csv_out << csv_row(p) << "\n" << std::flush;
      const std::string status = p.value("status", "");
      if (status == "ok") {
        std::cout << a.model << " " << size << "² " << strategy << ": "
                  << p.value("step_ms_median", 0.0) / 1000 << " s/step, peak "
                  << p.value("measured_peak_bytes", int64_t{0}) / (1 << 20) << " MiB\n"
                  << std::flush;
      } else {
        std::cout << a.model << " " << size << "² " << strategy << ": " << status << " "
                  << p.value("message", "") << "\n"
                  << std::flush;
      }
    }
  }
  std::cout << "results: " << jsonl.string() << ", " << csv.string() << "\n";
  return errors ? 1 : 0;
}

}  // namespace

void add_bench_train(CLI::App* bench, CommandRegistry& registry) {
  auto args = std::make_shared<SweepArgs>();
  auto* cmd = bench->add_subcommand(
      "train", "A sweep of training-step points, each in a fresh process; JSON lines + CSV");
  cmd->add_option("--model", args->model, "Network")->capture_default_str();
  cmd->add_option("--sizes", args->sizes, "Square image edges, e.g. 512,1024,2048")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--strategies", args->strategies, "none, grid, rows, auto")
      ->delimiter(',')
      ->check(CLI::IsMember({"none", "grid", "rows", "rows-shared", "auto"}));
  cmd->add_option("--budget", args->budget, "Memory budget of the tiled strategies")
      ->check(positive_bytes())
      ->capture_default_str();
  cmd->add_option("--memory-limit", args->memory_limit,
                  "Points predicted above this are recorded as out of memory, not run")
      ->capture_default_str();
  cmd->add_option("--repeat", args->repeat, "Timed steps per point")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "Untimed steps first")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  cmd->add_option("--out", args->out, "Results folder (results.jsonl, results.csv)")
      ->capture_default_str();
  cmd->callback([args, &registry] { registry.selected = [args] { return sweep(*args); }; });
}

}  // namespace tessel::app
