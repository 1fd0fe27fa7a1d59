// Runs `tessel bench step --timeline` as bench/run does for its memory-timeline plot, on the tiny
// network (no timing claims): the file bench/plot.py reads; and --profile's trace and summary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/io/shared_slides.h"
#include "tests/run_cli.h"

namespace {

namespace fs = std::filesystem;
using tessel::testing::run_cli;

fs::path temporary_file(const std::string& name) {
  const fs::path path = fs::temp_directory_path() /
                        ("tessel_step_bench_cli_" + std::to_string(getpid()) + "_" + name);
  fs::remove(path);
  return path;
}

std::vector<nlohmann::json> read_lines(const fs::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

int64_t count_type(const std::vector<nlohmann::json>& lines, const std::string& type) {
  return std::count_if(lines.begin(), lines.end(),
                       [&](const nlohmann::json& j) { return j["type"] == type; });
}

TEST(BenchStepCli, WritesTheLastStepsMemoryTimelineWithTilesOfBothPasses) {
  const fs::path timeline = temporary_file("grid.jsonl");
  const auto run = run_cli(
      "bench step --model tiny --size 128x128 --strategy grid --budget 1MiB --repeat 2 "
      "--warmup 0 --log-level warn --timeline " +
      timeline.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<nlohmann::json> lines = read_lines(timeline);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0]["type"], "step");
  EXPECT_EQ(lines[0]["budget"], 1 << 20);
  EXPECT_GT(lines[0]["start_live"].get<int64_t>(), 0);
  EXPECT_EQ(count_type(lines, "step"), 1) << "one step recorded, the last";
  EXPECT_GT(count_type(lines, "poll"), 0);
  bool forward = false, backward = false;
  for (const nlohmann::json& j : lines) {
    if (j["type"] == "step") continue;
    EXPECT_GE(j["t_ms"].get<double>(), 0);
    EXPECT_GT(j["live"].get<int64_t>(), 0);
    EXPECT_GE(j["peak"].get<int64_t>(), j["live"].get<int64_t>());
    if (j["type"] == "tile") {
      forward = forward || j["pass"] == "forward";
      backward = backward || j["pass"] == "backward";
    }
  }
  EXPECT_TRUE(forward && backward) << "tile samples of both passes";
  // Each tile's start and end, in order (a tile's time: bench/NOTES.md session 66).
  EXPECT_GT(count_type(lines, "tile_start"), 0);
  EXPECT_EQ(count_type(lines, "tile_start"), count_type(lines, "tile_done"));
  std::map<std::string, double> started;
  for (const nlohmann::json& j : lines) {
    if (j["type"] != "tile_start" && j["type"] != "tile_done") continue;
    EXPECT_FALSE(j["glass"].get<bool>()) << "no background, no glass tiles";
    const std::string key =
        j["pass"].get<std::string>() + " " + j["segment"].dump() + " " + j["tile"].dump();
    if (j["type"] == "tile_start") {
      started[key] = j["t_ms"].get<double>();
    } else {
      ASSERT_EQ(started.count(key), 1u) << key << " ended before it started";
      EXPECT_GE(j["t_ms"].get<double>(), started[key]);
    }
  }
  fs::remove(timeline);
}

TEST(BenchStepCli, RecordsATimelineForAPlainStepToo) {
  const fs::path timeline = temporary_file("plain.jsonl");
  const auto run = run_cli(
      "bench step --model tiny --size 128x128 --strategy none --repeat 1 --warmup 0 "
      "--log-level warn --timeline " +
      timeline.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<nlohmann::json> lines = read_lines(timeline);
  EXPECT_GT(count_type(lines, "poll"), 0);
  EXPECT_EQ(count_type(lines, "tile"), 0) << "a plain step has no tiles";
  fs::remove(timeline);
}

// The JSON line of a `bench step` run's output (its last line that is a JSON object).
nlohmann::json result_line(const std::string& output) {
  std::istringstream in(output);
  nlohmann::json last;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.front() == '{') last = nlohmann::json::parse(line);
  }
  return last;
}

TEST(BenchStepCli, ProfilesOneMoreStepAndNamesItsLongestOperators) {
  const fs::path trace = temporary_file("profile.json");
  const auto run = run_cli(
      "bench step --model tiny --size 128x128 --strategy grid --budget 1MiB --repeat 2 "
      "--warmup 0 --log-level warn --tile-format channels-last --profile " +
      trace.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json r = result_line(run.output);
  ASSERT_TRUE(r.is_object()) << run.output;
  EXPECT_EQ(r["step_ms"].size(), 2u) << "the profiled step is not a timed one";
  EXPECT_EQ(r["tile_format"], "channels-last");
  EXPECT_TRUE(r.contains("prices"));
  ASSERT_TRUE(r.contains("profile_top")) << r.dump();
  ASSERT_FALSE(r["profile_top"].empty());
  bool conv = false;
  double longest = 1e30;
  for (const nlohmann::json& e : r["profile_top"]) {
    EXPECT_EQ(e["device"], "cpu");
    EXPECT_GT(e["calls"].get<int64_t>(), 0);
    EXPECT_LE(e["ms"].get<double>(), longest) << "longest first";
    longest = e["ms"].get<double>();
    conv = conv || e["name"].get<std::string>().find("conv") != std::string::npos;
  }
  EXPECT_TRUE(conv) << "a tiny network's step spends its time in convolutions: " << r.dump();
  std::ifstream in(trace);
  const nlohmann::json chrome = nlohmann::json::parse(in);
  EXPECT_FALSE(chrome["traceEvents"].empty()) << "a Chrome trace";
  fs::remove(trace);
}

TEST(BenchStepCli, RefusesAnUnknownTileFormat) {
  const auto run = run_cli("bench step --model tiny --size 64x64 --tile-format nhwc");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("tile-format"), std::string::npos) << run.output;
}

// Issue 50's real-slide bar: a real slide with tissue_fill, as training sees it. The tiled step
// skips its glass and its gradient equals plain autograd's in float64; a halo fault still fails.
TEST(GlassCli, GradcheckOnARealSlideWithTissueFillSkipsGlassAndStaysExact) {
  const std::string slide = tessel::test::shared_slide("cmu-1-small-region.svs");
  const std::string check =
      "gradcheck --model tiny --tile 8 --slide " + slide + " mpp=4 tissue_fill=true";
  const auto run = run_cli(check);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("276×370 px seen; background (tissue_fill) "), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("% of the image uniform; glass tiles (not run): "), std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("glass tiles (not run): 0 of"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("PASS"), std::string::npos) << run.output;
  const auto halo = run_cli(check + " --inject halo");
  EXPECT_EQ(halo.exit_code, 1) << halo.output;
  EXPECT_NE(halo.output.find("FAIL"), std::string::npos) << halo.output;
  const auto both = run_cli(check + " --size 64x64");
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_NE(both.output.find("--size and --slide"), std::string::npos) << both.output;
  const auto whole = run_cli("gradcheck --model tiny --slide " + slide + " tissue_fill=true");
  EXPECT_EQ(whole.exit_code, 2) << whole.output;
  EXPECT_NE(whole.output.find("2220×2967 px at this resolution is more than"), std::string::npos)
      << whole.output;
  const auto settings = run_cli("gradcheck --model tiny mpp=4");
  EXPECT_EQ(settings.exit_code, 2) << settings.output;
  EXPECT_NE(settings.output.find("go with --slide"), std::string::npos) << settings.output;
}

TEST(GlassCli, BenchStepOnARealSlideReportsItsBackgroundAndRunsTheSamePlanDense) {
  const std::string step =
      "bench step --model tiny --repeat 1 --warmup 0 --log-level warn "
      "--budget 1MiB --prices 100,100 --slide " +
      tessel::test::shared_slide("cmu-1-small-region.svs") + " mpp=4 tissue_fill=true";
  const auto glass = run_cli(step);
  ASSERT_EQ(glass.exit_code, 0) << glass.output;
  const nlohmann::json g = result_line(glass.output);
  ASSERT_TRUE(g.is_object()) << glass.output;
  EXPECT_EQ(g["width"], 276);
  EXPECT_EQ(g["height"], 370);
  EXPECT_NE(g["image"].get<std::string>().find("cmu-1-small-region.svs"), std::string::npos);
  EXPECT_TRUE(g["glass"].get<bool>());
  EXPECT_GT(g["background_fraction"].get<double>(), 0.5) << "the slide is mostly glass";
  EXPECT_GT(g["glass_filled"].get<int64_t>() + g["glass_forward_tiles"].get<int64_t>(), 0);
  const auto dense = run_cli(step + " --no-glass");
  ASSERT_EQ(dense.exit_code, 0) << dense.output;
  const nlohmann::json d = result_line(dense.output);
  EXPECT_FALSE(d["glass"].get<bool>());
  EXPECT_EQ(d["glass_filled"], 0);
  EXPECT_EQ(d["glass_forward_tiles"], 0);
  EXPECT_EQ(d["tiled_flops"], g["tiled_flops"]) << "the same plan";
  const auto none = run_cli(step + " glass=false");
  ASSERT_EQ(none.exit_code, 0) << none.output;
  EXPECT_FALSE(result_line(none.output).contains("background_fraction")) << none.output;
}

}  // namespace
