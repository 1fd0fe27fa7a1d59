// `tessel train --distributed` as a launcher runs it: two local processes (ranks) against one
// process with the same global batch, and a rank killed mid-run.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/exec/gradcheck.h"
#include "io/checkpoint.h"
#include "io/sample_slides.h"
#include "pipelines/distributed.h"
#include "temp_folder.h"

namespace tessel::pipelines {
namespace {

namespace fs = std::filesystem;
using Env = std::map<std::string, std::string>;

// A `tessel` process with extra environment variables, its output in `log`.
pid_t spawn(const std::vector<std::string>& args, const Env& env, const fs::path& log) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(fd, STDOUT_FILENO);
  dup2(fd, STDERR_FILENO);
  for (const auto& [key, value] : env) setenv(key.c_str(), value.c_str(), 1);
  std::vector<char*> argv{const_cast<char*>(TESSEL_CLI)};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(TESSEL_CLI, argv.data());
  _exit(127);
}

// The exit code; -1 when the process did not end within `limit` (it is killed then): a guard
// against hanging the suite, not a timing claim.
int wait_for(pid_t pid, std::chrono::seconds limit = std::chrono::seconds(120)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

std::string read_text(const fs::path& file) {
  std::stringstream s;
  s << std::ifstream(file).rdbuf();
  return s.str();
}

// A TCP port nobody listens on now (the kernel's choice for port 0).
int free_port() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t size = sizeof addr;
  getsockname(s, reinterpret_cast<sockaddr*>(&addr), &size);
  close(s);
  return ntohs(addr.sin_port);
}

// Eight 512² generated slides (4 train, 2 val, 2 test) and an unreadable one in the train split.
class DistributedTrain : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    data_ = new test::TempFolder();
    io::SampleDataOptions options;
    options.slides = 8;
    options.size = 512;
    options.seed = 11;
    io::write_sample_data(data_->path() / "slides", options);
    data_->write("slides/broken.tif", "not a slide");
    std::ofstream(data_->path() / "slides" / "manifest.csv", std::ios::app)
        << "broken.tif,tumour,train,p-broken\n";
  }
  static void TearDownTestSuite() {
    delete data_;
    data_ = nullptr;
  }

  fs::path config(const std::string& extra = "") const {
    return runs_.write("run.yaml",
                       "manifest: " + (data_->path() / "slides" / "manifest.csv").string() +
                           "\nmodel: tiny\nlevel: 1\nbudget: 64MiB\noptimizer: sgd\nlr: 0.01\n"
                           "flips: true\nbatch: 2\n" +
                           extra);
  }

  std::vector<std::string> train_args(const std::string& run, const std::string& epochs) const {
    return {"--threads",
            "1",
            "train",
            "--config",
            config().string(),
            "epochs=" + epochs,
            "output=" + (runs_.path() / run).string()};
  }

  static Env rank_env(int rank, int world = 2) {
    return {{"RANK", std::to_string(rank)},
            {"WORLD_SIZE", std::to_string(world)},
            {"LOCAL_RANK", std::to_string(rank)}};
  }

  // The `world` ranks of `args --distributed` over TCP on this host; rank r's output in
  // <log>r.log.
  std::vector<pid_t> spawn_ranks(std::vector<std::string> args, const std::string& timeout_s,
                                 const std::string& log, int world = 2) const {
    args.insert(args.end(), {"--distributed", "--dist-timeout", timeout_s});
    const std::string port = std::to_string(free_port());
    std::vector<pid_t> ranks;
    for (int rank = 0; rank < world; ++rank) {
      Env env = rank_env(rank, world);
      env["MASTER_ADDR"] = "127.0.0.1";
      env["MASTER_PORT"] = port;
      ranks.push_back(spawn(args, env, runs_.path() / (log + std::to_string(rank) + ".log")));
    }
    return ranks;
  }

  static test::TempFolder* data_;
  test::TempFolder runs_;
};
test::TempFolder* DistributedTrain::data_ = nullptr;

TEST_F(DistributedTrain, TwoRanksEndWithTheWeightsOfOneProcessWithTheSameGlobalBatch) {
  ASSERT_EQ(wait_for(spawn(train_args("single", "2"), {}, runs_.path() / "single.log")), 0)
      << read_text(runs_.path() / "single.log");

  std::vector<pid_t> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> args = train_args("dist", "2");
    const std::string store = "file://" + (runs_.path() / "store").string();
    args.insert(args.end(), {"--distributed", "--rendezvous", store, "--dist-timeout", "60"});
    ranks.push_back(
        spawn(args, rank_env(rank), runs_.path() / ("rank" + std::to_string(rank) + ".log")));
  }
  for (int rank = 0; rank < 2; ++rank) {
    const fs::path log = runs_.path() / ("rank" + std::to_string(rank) + ".log");
    EXPECT_EQ(wait_for(ranks[static_cast<size_t>(rank)]), 0) << read_text(log);
  }

  const fs::path single = runs_.path() / "single", dist = runs_.path() / "dist";
  const io::CheckpointState a = io::read_checkpoint(single / "checkpoints" / "last.h5");
  const io::CheckpointState b = io::read_checkpoint(dist / "checkpoints" / "last.h5");
  // 5 train slides in batches of 2, 2, 1: 3 steps per epoch, one fewer in an epoch whose last
  // batch is the broken slide alone.
  EXPECT_GE(a.step, 5);
  EXPECT_EQ(b.step, a.step);
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i) {
    EXPECT_EQ(a.weights[i].name, b.weights[i].name);
    EXPECT_LT(core::relative_error(b.weights[i].tensor, a.weights[i].tensor), 1e-6)
        << a.weights[i].name;
  }
  // The validation split, shared between the ranks and gathered, gives one process's numbers;
  // the rows differ only in their seconds and peak bytes.
  const auto metrics = [](const fs::path& run) {
    std::ifstream in(run / "metrics.csv");
    std::string rows;
    for (std::string line; std::getline(in, line);) {
      std::stringstream cells(line);
      std::string cell;
      for (int column = 0; column < 9 && std::getline(cells, cell, ','); ++column) {
        rows += cell + ",";
      }
      rows += "\n";
    }
    return rows;
  };
  EXPECT_EQ(metrics(dist), metrics(single));
  // Rank 1 logs beside rank 0's files and writes none of them.
  EXPECT_TRUE(fs::exists(dist / "train.rank1.log"));
  EXPECT_TRUE(fs::exists(dist / "events.rank1.jsonl"));
  EXPECT_NE(read_text(dist / "train.log").find("skipping"), std::string::npos);
}

// parallel: slide (every rank runs a share of each slide's step) and hybrid (groups of two
// ranks share a slide, the groups take different slides): the weights of one process with the
// same batch, every slide's step really split (its rank gave bytes to the group's sums), and
// the validation's numbers.
TEST_F(DistributedTrain, SlideParallelRanksEndWithTheWeightsOfOneProcess) {
  ASSERT_EQ(wait_for(spawn(train_args("single", "2"), {}, runs_.path() / "single.log")), 0)
      << read_text(runs_.path() / "single.log");
  const io::CheckpointState a =
      io::read_checkpoint(runs_.path() / "single" / "checkpoints" / "last.h5");
  EXPECT_GE(a.step, 5);
  struct Run {
    std::string name, parallel;
    int world;
  };
  for (const Run& run : {Run{"slide", "parallel=slide", 2}, Run{"hybrid", "--slide-ranks", 4}}) {
    std::vector<std::string> args = train_args(run.name, "2");
    if (run.parallel == "--slide-ranks") {
      args.insert(args.begin() + 3, {"--slide-ranks", "2"});  // after "train"
    } else {
      args.push_back(run.parallel);
    }
    const std::vector<pid_t> ranks = spawn_ranks(args, "60", run.name, run.world);
    for (int rank = 0; rank < run.world; ++rank) {
      const fs::path log = runs_.path() / (run.name + std::to_string(rank) + ".log");
      ASSERT_EQ(wait_for(ranks[static_cast<size_t>(rank)]), 0) << read_text(log);
    }
    const fs::path dir = runs_.path() / run.name;
    const io::CheckpointState b = io::read_checkpoint(dir / "checkpoints" / "last.h5");
    EXPECT_EQ(b.step, a.step) << run.name;
    ASSERT_EQ(a.weights.size(), b.weights.size());
    // Float32, and the split step tiles where one process does not: the biases' gradients sum
    // every position in another order, so conv3.bias ends 1.4e-4 apart (a tiled run of one
    // process, 4.6e-5 apart). A group whose ranks each gave its gradient counts it twice: 0.1 to
    // 2.3 apart.
    for (size_t i = 0; i < a.weights.size(); ++i) {
      EXPECT_LT(core::relative_error(b.weights[i].tensor, a.weights[i].tensor), 2e-3)
          << run.name << " " << a.weights[i].name;
    }
    // Every rank's slides were split: each step gave bytes to its group's sums.
    for (int rank = 1; rank < run.world; ++rank) {
      const std::string events = read_text(dir / ("events.rank" + std::to_string(rank) + ".jsonl"));
      EXPECT_NE(events.find("\"ranks\":2,"), std::string::npos) << events;
      EXPECT_EQ(events.find("\"summed_bytes\":0,"), std::string::npos) << events;
    }
    const std::string log = read_text(dir / "train.log");
    EXPECT_NE(log.find(run.world == 2 ? "1 group(s) of 2 ranks" : "2 group(s) of 2 ranks"),
              std::string::npos)
        << log;
  }
  // Groups that do not divide the ranks: every rank stops before training, naming the fix.
  std::vector<std::string> bad = train_args("bad-groups", "1");
  bad.insert(bad.begin() + 3, {"--slide-ranks", "3"});
  const std::vector<pid_t> refused = spawn_ranks(bad, "60", "bad-groups");
  for (int rank = 0; rank < 2; ++rank) {
    const int code = wait_for(refused[static_cast<size_t>(rank)]);
    const std::string output =
        read_text(runs_.path() / ("bad-groups" + std::to_string(rank) + ".log"));
    EXPECT_EQ(code, 1) << output;
    EXPECT_NE(output.find("slide_ranks 3 cannot group the 2 ranks of this job: give slide_ranks=N"),
              std::string::npos)
        << output;
  }
  // One process continues the hybrid run (its config keeps parallel: hybrid, slide_ranks: 2).
  const fs::path hybrid = runs_.path() / "hybrid";
  ASSERT_EQ(wait_for(spawn({"--threads", "1", "train", "--resume", hybrid.string(), "epochs=3"}, {},
                           runs_.path() / "resume.log")),
            0)
      << read_text(runs_.path() / "resume.log");
  EXPECT_EQ(io::read_checkpoint(hybrid / "checkpoints" / "last.h5").epoch, 3);
}

// Rank 1 killed after the first epoch's checkpoint: rank 0 stops with an error naming the
// timeout and --resume, and one process continues the run from last.h5. `extra`: settings.
void killed_rank_stops_the_other(const DistributedTrain& t, const fs::path& runs,
                                 const std::string& name, std::vector<std::string> args) {
  const std::vector<pid_t> ranks = t.spawn_ranks(std::move(args), "5", name);
  const fs::path run = runs / name;
  const fs::path last = run / "checkpoints" / "last.h5";
  for (int i = 0; i < 1200 && !fs::exists(last); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(fs::exists(last)) << read_text(runs / (name + "0.log"));
  kill(ranks[1], SIGKILL);
  EXPECT_EQ(wait_for(ranks[1]), -2);
  const int code = wait_for(ranks[0]);
  const std::string output = read_text(runs / (name + "0.log"));
  EXPECT_GT(code, 0) << output;  // an error exit, not a hang (-1) or a crash (-2)
  EXPECT_NE(output.find("rank 0 of 2"), std::string::npos) << output;
  EXPECT_NE(output.find("(timeout 5 s, --dist-timeout)"), std::string::npos) << output;
  EXPECT_NE(output.find("--resume"), std::string::npos) << output;

  // The last checkpoint is whole, and one process continues the run from it.
  const io::CheckpointState state = io::read_checkpoint(last);
  EXPECT_GE(state.epoch, 1);
  const int64_t epochs = state.epoch + 1;
  ASSERT_EQ(wait_for(spawn({"--threads", "1", "train", "--resume", run.string(),
                            "epochs=" + std::to_string(epochs)},
                           {}, runs / (name + "-resume.log"))),
            0)
      << read_text(runs / (name + "-resume.log"));
  EXPECT_EQ(io::read_checkpoint(last).epoch, epochs);
}

TEST_F(DistributedTrain, KillingARankStopsTheOtherWithAClearMessageAndLastH5Resumes) {
  killed_rank_stops_the_other(*this, runs_.path(), "killed", train_args("killed", "200"));
}

// The same within a slide group: rank 0 waits in the split step's sums.
TEST_F(DistributedTrain, KillingARankOfASlideGroupStopsTheOtherAndLastH5Resumes) {
  std::vector<std::string> args = train_args("killed-slide", "200");
  args.emplace_back("parallel=slide");
  killed_rank_stops_the_other(*this, runs_.path(), "killed-slide", args);
}

TEST_F(DistributedTrain, ARankWhoseStepDivergesStopsEveryRankWithTheReason) {
  // Two train slides, one of them unreadable: each batch gives one rank the good slide, which
  // diverges at the second step (lr 1e30), and the other rank a slide it skips, so that rank has
  // nothing of its own to find non-finite and learns it at the batch's collective call.
  const fs::path slides = data_->path() / "slides";
  std::ifstream in(slides / "manifest.csv");
  std::string line, manifest;
  std::getline(in, manifest);
  manifest += "\n";
  bool train = false;
  while (std::getline(in, line)) {
    if (line.find(",val,") != std::string::npos) manifest += line + "\n";
    if (line.find(",train,") != std::string::npos && !train &&
        line.find("broken") == std::string::npos) {
      manifest += line + "\n";
      train = true;
    }
  }
  manifest += "broken.tif,tumour,train,p-broken\n";
  std::ofstream(slides / "diverge.csv") << manifest;

  std::vector<std::string> args = train_args("diverged", "2");
  args.emplace_back("lr=1e30");
  args.emplace_back("manifest=" + (slides / "diverge.csv").string());
  const std::vector<pid_t> ranks = spawn_ranks(args, "60", "div");
  for (int rank = 0; rank < 2; ++rank) {
    const int code = wait_for(ranks[static_cast<size_t>(rank)]);
    const std::string output = read_text(runs_.path() / ("div" + std::to_string(rank) + ".log"));
    EXPECT_GT(code, 0) << output;  // an error, not a hang or a crash
    EXPECT_NE(output.find("training diverged at step"), std::string::npos) << output;
    EXPECT_EQ(output.find("timeout"), std::string::npos) << output;  // not blamed on a lost rank
  }
}

// Communicator::allreduce_sum over two ranks (threads of this process, a file rendezvous): a
// dense tensor in channels-last memory is summed where it lies, a view into a larger tensor
// through a copy (the rest of that tensor untouched), small tensors together in one bucket.
TEST(Communicator, SumsDenseTensorsInPlaceAndViewsThroughACopy) {
  test::TempFolder folder;
  const std::string store = "file://" + (folder.path() / "store").string();
  std::vector<std::vector<at::Tensor>> given(2), summed(2);
  std::vector<std::string> errors(2);
  const auto values = [](int rank) {
    at::manual_seed(rank + 1);
    const at::Tensor whole = at::randn({2, 5, 7, 3}, at::kDouble);
    return std::vector<at::Tensor>{
        at::randn({1, 6, 9, 11}, at::kFloat).contiguous(at::MemoryFormat::ChannelsLast), whole,
        at::randn({3}, at::kDouble), at::randn({4, 2}, at::kDouble)};
  };
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        DistributedEnv env;
        env.rank = rank;
        env.world_size = 2;
        env.source = "test";
        DistributedOptions options;
        options.rendezvous = store;
        options.timeout_seconds = 60;
        Communicator group(env, options);
        given[rank] = values(rank);
        std::vector<at::Tensor> t;
        for (const at::Tensor& v : given[rank]) t.push_back(v.clone());
        // The view: channels 1..3 of the second tensor.
        group.allreduce_sum({t[0], t[1].narrow(1, 1, 3), t[2], t[3]});
        summed[rank] = t;
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(errors[0] + errors[1], "");
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<at::Tensor>& t = summed[rank];
    EXPECT_TRUE(t[0].is_contiguous(at::MemoryFormat::ChannelsLast));
    EXPECT_TRUE(at::equal(t[0], given[0][0] + given[1][0]));
    EXPECT_TRUE(
        at::equal(t[1].narrow(1, 1, 3), given[0][1].narrow(1, 1, 3) + given[1][1].narrow(1, 1, 3)));
    EXPECT_TRUE(at::equal(t[1].narrow(1, 0, 1), given[rank][1].narrow(1, 0, 1)));
    EXPECT_TRUE(at::equal(t[1].narrow(1, 4, 1), given[rank][1].narrow(1, 4, 1)));
    EXPECT_TRUE(at::equal(t[2], given[0][2] + given[1][2]));
    EXPECT_TRUE(at::equal(t[3], given[0][3] + given[1][3]));
  }
}

// `--dist-backend nccl`: on a machine without a GPU, refused in words before any rendezvous; on
// one with a GPU (scripts/gpu-check), a one-rank NCCL group sums host tensors (staged on the
// device) and device tensors.
TEST(Communicator, NcclNeedsAGpuAndSumsHostAndDeviceTensors) {
  test::TempFolder folder;
  DistributedEnv env;
  env.world_size = 1;
  env.source = "test";
  DistributedOptions options;
  options.rendezvous = "file://" + (folder.path() / "store").string();
  options.timeout_seconds = 60;
  options.backend = "mpi";
  EXPECT_THROW({ const Communicator refused(env, options); }, tessel::Error);
  options.rendezvous += "-nccl";
  options.backend = "nccl";
  if (!at::hasCUDA()) {
    try {
      Communicator group(env, options);
      ADD_FAILURE() << "an NCCL group without a GPU";
    } catch (const tessel::Error& e) {
      EXPECT_NE(std::string(e.what()).find("no CUDA GPU"), std::string::npos) << e.what();
    }
    return;
  }
  Communicator group(env, options);
  const at::Tensor host = at::arange(6, at::kFloat);
  const at::Tensor device = at::arange(4, at::TensorOptions(at::kCUDA).dtype(at::kFloat));
  group.allreduce_sum({host, device});
  EXPECT_TRUE(at::equal(host, at::arange(6, at::kFloat)));
  EXPECT_TRUE(at::equal(device.cpu(), at::arange(4, at::kFloat)));
  std::vector<at::Tensor> all{at::empty({6}, at::kFloat)};
  group.allgather(host, all);
  EXPECT_TRUE(at::equal(all[0], host));
}

// One slide's step split over two processes (slide-parallel over Gloo, TCP on this host,
// docs/slide-parallel.md): each rank ends with plain autograd's gradients on the whole image,
// and a halo one pixel short fails on both.
TEST(SlideParallelProcesses, TwoRanksEachEndWithPlainAutogradsGradients) {
  test::TempFolder logs;
  for (const std::string inject : {"none", "halo"}) {
    const std::string port = std::to_string(free_port());
    std::vector<pid_t> pids;
    for (int rank = 0; rank < 2; ++rank) {
      const Env env{{"RANK", std::to_string(rank)},
                    {"WORLD_SIZE", "2"},
                    {"LOCAL_RANK", std::to_string(rank)},
                    {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", port}};
      pids.push_back(
          spawn({"--threads", "1", "gradcheck", "--model", "random", "--size", "61x47",
                 "--input-gradient", "--inject", inject, "--distributed", "--dist-timeout", "60"},
                env, logs.path() / (inject + std::to_string(rank) + ".log")));
    }
    for (int rank = 0; rank < 2; ++rank) {
      const int code = wait_for(pids[static_cast<size_t>(rank)]);
      const std::string output = read_text(logs.path() / (inject + std::to_string(rank) + ".log"));
      EXPECT_EQ(code, inject == "none" ? 0 : 1) << output;
      EXPECT_NE(output.find("split over 2 ranks (processes); this is rank " + std::to_string(rank) +
                            "'s check"),
                std::string::npos)
          << output;
      EXPECT_NE(output.find(inject == "none" ? "PASS" : "FAIL"), std::string::npos) << output;
    }
  }
}

}  // namespace
}  // namespace tessel::pipelines
