// The run folder's logs after a crash: a half-written line cut, the epoch last.h5 holds but the
// log lost written back, rows of epochs last.h5 does not hold dropped.
#include "pipelines/run_files.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "temp_folder.h"

namespace tessel::pipelines {
namespace {

std::string read(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(RunFiles, RepairLogCutsAHalfWrittenLastLineOnly) {
  test::TempFolder folder;
  const auto file = folder.write("events.jsonl", "{\"a\": 1}\n{\"b\": 2}\n{\"c\":");
  EXPECT_EQ(repair_log(file), (std::vector<std::string>{"{\"a\": 1}", "{\"b\": 2}"}));
  EXPECT_EQ(read(file), "{\"a\": 1}\n{\"b\": 2}\n");
  EXPECT_EQ(repair_log(file).size(), 2U);  // whole lines are left alone
  EXPECT_TRUE(repair_log(folder.path() / "missing.csv").empty());
}

TEST(RunFiles, RepairMetricsWritesTheLostRowAndDropsLaterOnes) {
  test::TempFolder folder;
  const std::vector<std::string> header{"epoch", "loss"};
  // Epoch 2's row lost (a crash after last.h5), half of a row begun.
  auto file = folder.write("metrics.csv", "epoch,loss\n1,0.5\n2,0.");
  repair_metrics(file, header, 2, {"2", "0.25"});
  EXPECT_EQ(read(file), "epoch,loss\n1,0.5\n2,0.25\n");
  repair_metrics(file, header, 2, {"2", "0.25"});  // nothing to do twice
  EXPECT_EQ(read(file), "epoch,loss\n1,0.5\n2,0.25\n");
  // A row of an epoch last.h5 does not hold goes; a torn header is written whole.
  file = folder.write("other.csv", "epoch,loss\n1,0.5\n2,0.25\n3,0.1\n");
  repair_metrics(file, header, 2, {"2", "0.25"});
  EXPECT_EQ(read(file), "epoch,loss\n1,0.5\n2,0.25\n");
  file = folder.write("torn.csv", "epo");
  repair_metrics(file, header, 0, {});
  EXPECT_EQ(read(file), "epoch,loss\n");
  file = folder.write("bad.csv", "epoch,loss\nx,1\n");
  EXPECT_THROW(repair_metrics(file, header, 1, {"1", "0.5"}), Error);
}

TEST(RunFiles, RepairEventsWritesTheLostEpochLineOnce) {
  test::TempFolder folder;
  const nlohmann::json epoch2 = {{"type", "epoch"}, {"epoch", 2}};
  const auto file = folder.write("events.jsonl",
                                 "{\"type\":\"slide\"}\n{\"type\":\"epoch\",\"epoch\":1}\n"
                                 "{\"type\":\"epoch\",\"epoch\":\"x\"}\n{\"type\":\"sl");
  repair_events(file, 2, epoch2);
  const std::string text = read(file);
  EXPECT_EQ(text,
            "{\"type\":\"slide\"}\n{\"type\":\"epoch\",\"epoch\":1}\n"
            "{\"type\":\"epoch\",\"epoch\":\"x\"}\n" +
                epoch2.dump() + "\n");
  repair_events(file, 2, epoch2);
  EXPECT_EQ(read(file), text);
}

}  // namespace
}  // namespace tessel::pipelines
