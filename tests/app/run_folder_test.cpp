// What a run folder holds and what `tessel train` returns when a run is stopped, refused or
// resumed, seen from outside: exit codes a scheduler can act on (0 finished, 1 failed, 128 + the
// signal when stopped), one run per folder, records that stay true (docs/train-config.md).
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>

#include "pipelines/run_files.h"
#include "tests/io/temp_folder.h"
#include "tests/run_cli.h"

namespace {

namespace fs = std::filesystem;
using tessel::testing::CliRun;
using tessel::testing::run_cli;

std::string text_of(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class RunFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    const CliRun data = run_cli("sample-data --out " + (folder_.path() / "data").string() +
                                " --slides 6 --size 512 --seed 3");
    ASSERT_EQ(data.exit_code, 0) << data.output;
  }

  std::string train_args(const fs::path& run, int epochs) const {
    return "train manifest=" + (folder_.path() / "data" / "manifest.csv").string() +
           " model=tiny level=1 metric=loss budget=64MiB epochs=" + std::to_string(epochs) +
           " output=" + run.string();
  }

  tessel::test::TempFolder folder_;
};

// Waits until the run has trained a slide (events.jsonl's first "slide" line).
bool wait_for_a_slide(const fs::path& run) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    if (text_of(run / "events.jsonl").find("\"type\":\"slide\"") != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST_F(RunFolder, ARunStoppedBySigtermExits143AndResumesToTheEnd) {
  const fs::path run = folder_.path() / "run";
  const fs::path log = folder_.path() / "train.out";
  const pid_t pid = tessel::testing::spawn_cli(train_args(run, 2), log.string());
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_a_slide(run)) << text_of(log);
  kill(pid, SIGTERM);
  EXPECT_EQ(tessel::testing::wait_cli(pid), 128 + SIGTERM) << text_of(log);
  EXPECT_NE(text_of(log).find("continue with: tessel train --resume"), std::string::npos)
      << text_of(log);
  const nlohmann::json summary = nlohmann::json::parse(text_of(run / "summary.json"));
  EXPECT_EQ(summary["state"], "stopped");
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "last.h5"));

  const CliRun rest = run_cli("train --resume " + run.string() + "");
  EXPECT_EQ(rest.exit_code, 0) << rest.output;
}

TEST_F(RunFolder, ResumingAFinishedRunKeepsItsRecord) {
  const fs::path run = folder_.path() / "run";
  const CliRun first = run_cli(train_args(run, 1));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const nlohmann::json before = nlohmann::json::parse(text_of(run / "summary.json"));
  ASSERT_GT(before["last_val"]["slides"].get<int64_t>(), 0);
  const std::string events = text_of(run / "events.jsonl");

  const CliRun again = run_cli("train --resume " + run.string());
  EXPECT_EQ(again.exit_code, 0) << again.output;
  const nlohmann::json after = nlohmann::json::parse(text_of(run / "summary.json"));
  EXPECT_EQ(after["state"], "finished");
  EXPECT_EQ(after["last_val"], before["last_val"]);
  EXPECT_EQ(after["measured_peak_bytes"], before["measured_peak_bytes"]);
  EXPECT_EQ(after["epochs_done"], before["epochs_done"]);
  EXPECT_EQ(after["steps"], before["steps"]);
  EXPECT_EQ(text_of(run / "events.jsonl"), events);
}

TEST_F(RunFolder, AFolderInUseIsRefusedAndLeftAsItWas) {
  const fs::path run = folder_.path() / "run";
  fs::create_directories(run);
  const tessel::pipelines::RunLock holder(run);  // another run, as far as tessel can tell
  const CliRun second = run_cli(train_args(run, 1));
  EXPECT_EQ(second.exit_code, 1) << second.output;
  EXPECT_NE(second.output.find("is in use by another training run (host "), std::string::npos)
      << second.output;
  EXPECT_NE(second.output.find("pid " + std::to_string(getpid())), std::string::npos)
      << second.output;
  for (const char* file :
       {"train.log", "events.jsonl", "metrics.csv", "config.yaml", "summary.json"}) {
    EXPECT_FALSE(fs::exists(run / file)) << file;
  }
}

// A named pipe or a device given for any file a user names is refused at once, in words, where
// it used to block forever (a FIFO) or fill memory (/dev/zero). `timeout` ends a hang as 124.
TEST_F(RunFolder, PipesAndDevicesAreRefusedNotWaitedOn) {
  const fs::path fifo = folder_.path() / "pipe";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string manifest = (folder_.path() / "data" / "manifest.csv").string();
  const std::string run = (folder_.path() / "run").string();
  for (const std::string& file : {fifo.string(), std::string("/dev/zero")}) {
    SCOPED_TRACE(file);
    const std::vector<std::string> commands = {
        "train --config " + file,
        "train manifest=" + file + " model=tiny output=" + run,
        "manifest check " + file,
        "inspect " + file,
        "import " + file + " --out " + run + ".h5",
        "eval --checkpoint " + file + " --manifest " + manifest,
        "train manifest=" + manifest + " model=tiny level=1 epochs=1 init_weights=" + file +
            " output=" + run,
    };
    for (const std::string& command : commands) {
      const CliRun r =
          tessel::testing::run_command(std::string("timeout 60 ") + TESSEL_CLI + " " + command);
      EXPECT_EQ(r.exit_code, 1) << command << "\n" << r.output;
      const bool named = r.output.find("named pipe (FIFO), not a file") != std::string::npos ||
                         r.output.find("is a device, not a file") != std::string::npos;
      EXPECT_TRUE(named) << command << "\n" << r.output;
      EXPECT_NE(r.output.find(file), std::string::npos) << command << "\n" << r.output;
    }
  }
}

}  // namespace
