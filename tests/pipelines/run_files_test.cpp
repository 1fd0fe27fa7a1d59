// The run folder's logs after a crash: a half-written line cut, the epoch last.h5 holds but the
// log lost written back, rows of epochs last.h5 does not hold dropped.
#include "pipelines/run_files.h"

#include <gtest/gtest.h>

#include <unistd.h>

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
  repair_events(file, 2, 0, epoch2);
  const std::string text = read(file);
  EXPECT_EQ(text,
            "{\"type\":\"slide\"}\n{\"type\":\"epoch\",\"epoch\":1}\n"
            "{\"type\":\"epoch\",\"epoch\":\"x\"}\n" +
                epoch2.dump() + "\n");
  repair_events(file, 2, 0, epoch2);
  EXPECT_EQ(read(file), text);
}

TEST(RunFiles, RepairEventsDropsTheSlidesTheResumedRunTrainsAgain) {
  test::TempFolder folder;
  const auto slide = [](int epoch, int index) {
    return nlohmann::json{{"type", "slide"}, {"epoch", epoch}, {"index", index}}.dump() + "\n";
  };
  const std::string epoch1 = nlohmann::json{{"type", "epoch"}, {"epoch", 1}}.dump() + "\n";
  // last.h5 holds epoch 2 after its first two slides; a kill came after slide 3 and in epoch 3.
  const auto file = folder.write("events.jsonl", slide(1, 0) + slide(1, 1) + epoch1 + slide(2, 0) +
                                                     slide(2, 1) + slide(2, 2) + slide(3, 0));
  repair_events(file, 1, 2, {});
  EXPECT_EQ(read(file), slide(1, 0) + slide(1, 1) + epoch1 + slide(2, 0) + slide(2, 1));
}

TEST(RunFiles, ARunFolderIsLockedForOneRunAndNamesItsHolder) {
  test::TempFolder folder;
  {
    const RunLock held(folder.path());
    try {
      const RunLock second(folder.path());
      ADD_FAILURE() << "a second run took the folder";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("in use by another training run"), std::string::npos) << message;
      EXPECT_NE(message.find("pid " + std::to_string(getpid()) + " since "), std::string::npos)
          << message;
      EXPECT_NE(message.find(folder.path().string()), std::string::npos) << message;
    }
  }
  // Released with its holder; the file a dead holder left is no lock.
  folder.write("run.lock", "host elsewhere pid 1 since 2020-01-01 00:00:00 UTC\n");
  EXPECT_NO_THROW(RunLock again(folder.path()));
  EXPECT_EQ(read(folder.path() / "run.lock").find("pid 1 "), std::string::npos);
}

}  // namespace
}  // namespace tessel::pipelines
