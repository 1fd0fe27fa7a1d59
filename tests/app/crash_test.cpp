// A run killed at every write of its run folder (io/durable.h's crash points: each file's write,
// its rename, half of each log line) resumes to exactly the uninterrupted run's state: last.h5 and
// best.h5 hold the same weights and optimizer state, metrics.csv one row per epoch with the same
// numbers, events.jsonl one line per epoch, summary.json the same best epoch; nothing partial left.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "io/checkpoint.h"
#include "tests/io/temp_folder.h"
#include "tests/run_cli.h"

namespace {

namespace fs = std::filesystem;
using tessel::testing::CliRun;
using tessel::testing::run_cli;

std::vector<std::string> lines_of(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The fields of a metrics.csv row that do not depend on timing (all but seconds and peak bytes).
std::vector<std::string> metric_fields(const std::string& row) {
  std::vector<std::string> fields;
  std::stringstream in(row);
  for (std::string field; std::getline(in, field, ',');) fields.push_back(field);
  if (fields.size() > 2) fields.resize(fields.size() - 2);
  return fields;
}

// events.jsonl's train slide lines: (epoch, index) in the order written.
std::vector<std::pair<int64_t, int64_t>> slide_lines(const fs::path& file) {
  std::vector<std::pair<int64_t, int64_t>> slides;
  for (const std::string& line : lines_of(file)) {
    const nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
    if (event.is_object() && event.value("type", "") == "slide") {
      slides.emplace_back(event["epoch"].get<int64_t>(), event["index"].get<int64_t>());
    }
  }
  return slides;
}

void expect_same_tensors(const std::vector<tessel::io::NamedTensor>& a,
                         const std::vector<tessel::io::NamedTensor>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name) << what;
    EXPECT_TRUE(at::equal(a[i].tensor, b[i].tensor)) << what << ": " << a[i].name;
  }
}

class CrashSafety : public ::testing::Test {
 protected:
  void SetUp() override {
    const CliRun data = run_cli("sample-data --out " + (folder_.path() / "data").string() +
                                " --slides 6 --size 512 --seed 3");
    ASSERT_EQ(data.exit_code, 0) << data.output;
  }

  // Two epochs, val loss as the metric (so the second is the best again), 2 train slides.
  std::string train_args(const fs::path& run) const {
    return "train manifest=" + (folder_.path() / "data" / "manifest.csv").string() +
           " model=tiny level=1 epochs=2 metric=loss budget=64MiB output=" + run.string();
  }

  tessel::test::TempFolder folder_;
};

TEST_F(CrashSafety, AKillAtEveryWriteResumesToTheUninterruptedRunsState) {
  const fs::path reference = folder_.path() / "reference";
  const CliRun whole = run_cli(train_args(reference));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const tessel::io::CheckpointState last =
      tessel::io::read_checkpoint(reference / "checkpoints" / "last.h5");
  const tessel::io::CheckpointState best =
      tessel::io::read_checkpoint(reference / "checkpoints" / "best.h5");
  const std::vector<std::string> metrics = lines_of(reference / "metrics.csv");
  ASSERT_EQ(metrics.size(), 3U);
  const nlohmann::json summary = nlohmann::json::parse(std::ifstream(reference / "summary.json"));
  const std::vector<std::pair<int64_t, int64_t>> slides = slide_lines(reference / "events.jsonl");
  ASSERT_FALSE(slides.empty());

  int points = 0;
  for (int n = 1;; ++n) {
    SCOPED_TRACE("crash point " + std::to_string(n));
    const fs::path run = folder_.path() / ("run" + std::to_string(n));
    setenv("TESSEL_CRASH_AT", std::to_string(n).c_str(), 1);
    const CliRun crashed = run_cli(train_args(run));
    unsetenv("TESSEL_CRASH_AT");
    if (crashed.exit_code == 0) {
      EXPECT_EQ(crashed.output.find("crash point"), std::string::npos) << crashed.output;
      break;
    }
    ++points;
    ASSERT_NE(crashed.output.find("crash point " + std::to_string(n) + ":"), std::string::npos)
        << crashed.output;
    // At the instant of the crash: whatever checkpoint and summary exist are whole.
    for (const char* name : {"last.h5", "best.h5"}) {
      const fs::path file = run / "checkpoints" / name;
      if (fs::exists(file)) {
        EXPECT_NO_THROW(tessel::io::read_checkpoint(file)) << name;
      }
    }
    if (fs::exists(run / "summary.json")) {
      EXPECT_FALSE(nlohmann::json::parse(std::ifstream(run / "summary.json"), nullptr, false)
                       .is_discarded());
    }

    // Resumed (or started again when the crash came before the first checkpoint).
    const bool resumable = fs::exists(run / "checkpoints" / "last.h5");
    const CliRun rest = run_cli(resumable ? "train --resume " + run.string() : train_args(run));
    ASSERT_EQ(rest.exit_code, 0) << crashed.output << rest.output;

    const tessel::io::CheckpointState l =
        tessel::io::read_checkpoint(run / "checkpoints" / "last.h5");
    expect_same_tensors(l.weights, last.weights, "last.h5 weights");
    expect_same_tensors(l.optimizer, last.optimizer, "last.h5 optimizer");
    EXPECT_EQ(l.run_state.size() > 0, true);
    const tessel::io::CheckpointState b =
        tessel::io::read_checkpoint(run / "checkpoints" / "best.h5");
    expect_same_tensors(b.weights, best.weights, "best.h5 weights");
    EXPECT_EQ(b.epoch, best.epoch);

    const std::vector<std::string> m = lines_of(run / "metrics.csv");
    ASSERT_EQ(m.size(), metrics.size()) << crashed.output;
    for (size_t i = 0; i < m.size(); ++i) {
      EXPECT_EQ(metric_fields(m[i]), metric_fields(metrics[i])) << "metrics.csv line " << i + 1;
    }
    std::vector<int64_t> epochs;
    for (const std::string& line : lines_of(run / "events.jsonl")) {
      const nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
      ASSERT_FALSE(event.is_discarded()) << "events.jsonl: " << line;
      if (event["type"] == "epoch") epochs.push_back(event["epoch"]);
    }
    EXPECT_EQ(epochs, (std::vector<int64_t>{1, 2}));
    // Each slide trained once in the record: none the resumed run trained again twice.
    EXPECT_EQ(slide_lines(run / "events.jsonl"), slides);

    const nlohmann::json s = nlohmann::json::parse(std::ifstream(run / "summary.json"));
    EXPECT_EQ(s["state"], "finished");
    EXPECT_EQ(s["best_epoch"], summary["best_epoch"]);
    EXPECT_EQ(s["epochs_done"], 2);
    EXPECT_EQ(s["last_val"], summary["last_val"]);
    for (const fs::path& folder : {run, run / "checkpoints"}) {
      for (const auto& entry : fs::directory_iterator(folder)) {
        EXPECT_NE(entry.path().extension(), ".partial") << entry.path();
      }
    }
    fs::remove_all(run);
    if (::testing::Test::HasFailure()) break;  // one crash point's failures, not forty
  }
  // Every file of the run (config, both checkpoints, both logs, the summary) was crashed into.
  EXPECT_GE(points, 30);
}

}  // namespace
