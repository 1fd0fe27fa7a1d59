// HDF5 checkpoints: round trip, the h5py/Keras layout, damage detection, and that a write killed
// halfway never destroys the previous checkpoint.
#include "io/checkpoint.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <torch/nn/module.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "core/error.h"

namespace tessel::io {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessel-checkpoint-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static CheckpointState sample_state(int64_t seed, int64_t big = 8) {
    at::manual_seed(static_cast<uint64_t>(seed));
    CheckpointState s;
    s.weights = {{"features.conv1.weight", at::randn({4, 3, 3, 3})},
                 {"features.conv1.bias", at::randn({4})},
                 {"classifier.weight", at::randn({2, big}, at::kDouble)},
                 {"classifier.bias", at::randn({2}, at::kDouble)},
                 {"bn.num_batches_tracked", at::tensor(int64_t{7})}};
    s.optimizer = {{"features.conv1.weight.momentum_buffer", at::randn({4, 3, 3, 3})},
                   {"features.conv1.weight.exp_avg_sq", at::rand({4, 3, 3, 3})},
                   {"classifier.weight.momentum_buffer", at::randn({2, big}, at::kDouble)}};
    s.epoch = 3;
    s.step = 42;
    s.seed = 0xFFFFFFFFFFFFFFF0ULL;
    s.rng_state = std::string("\x00\x01\xff\x80 rng", 9);
    s.class_names = {"normal", "tumour — grade 2"};
    s.config = "model: vgg-mini\nepochs: 4\n";
    s.run_state = R"({"epoch": 2, "position": 5})";
    s.tessel_version = "0.1.0";
    return s;
  }

  static void expect_same(const CheckpointState& a, const CheckpointState& b) {
    ASSERT_EQ(a.weights.size(), b.weights.size());
    for (size_t i = 0; i < a.weights.size(); ++i) {
      EXPECT_EQ(a.weights[i].name, b.weights[i].name);
      EXPECT_EQ(a.weights[i].tensor.scalar_type(), b.weights[i].tensor.scalar_type());
      EXPECT_TRUE(at::equal(a.weights[i].tensor, b.weights[i].tensor)) << a.weights[i].name;
    }
    ASSERT_EQ(a.optimizer.size(), b.optimizer.size());
    for (size_t i = 0; i < a.optimizer.size(); ++i) {
      EXPECT_EQ(a.optimizer[i].name, b.optimizer[i].name);
      EXPECT_TRUE(at::equal(a.optimizer[i].tensor, b.optimizer[i].tensor)) << a.optimizer[i].name;
    }
    EXPECT_EQ(a.epoch, b.epoch);
    EXPECT_EQ(a.step, b.step);
    EXPECT_EQ(a.seed, b.seed);
    EXPECT_EQ(a.rng_state, b.rng_state);
    EXPECT_EQ(a.class_names, b.class_names);
    EXPECT_EQ(a.config, b.config);
    EXPECT_EQ(a.run_state, b.run_state);
    EXPECT_EQ(a.tessel_version, b.tessel_version);
    EXPECT_EQ(a.network, b.network);
  }

  static std::string error_of(const fs::path& path) {
    try {
      read_checkpoint(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

// Rewrites the 512-byte header's byte count and CRC-32 for the file's present bytes: what a tool
// that edits a checkpoint and keeps its header consistent would do, to reach the checks behind it.
void restamp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  ASSERT_TRUE(bytes.starts_with("TESSEL-CHECKPOINT\n"));
  std::string header = "TESSEL-CHECKPOINT\nbytes " + std::to_string(bytes.size() - 512) +
                       "\ncrc32 " + std::to_string(crc32(bytes.data() + 512, bytes.size() - 512)) +
                       "\n";
  header.resize(512, '\0');
  bytes.replace(0, 512, header);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST_F(CheckpointTest, RoundTripKeepsEveryTensorBitForBitAndTheState) {
  const CheckpointState written = sample_state(1);
  write_checkpoint(dir_ / "ck.h5", written);
  expect_same(written, read_checkpoint(dir_ / "ck.h5"));
  EXPECT_FALSE(fs::exists(dir_ / "ck.h5.partial"));
}

TEST_F(CheckpointTest, TheHeaderTellsACopyFromAnotherCheckpointWithoutReadingEither) {
  write_checkpoint(dir_ / "a.h5", sample_state(1));
  fs::copy_file(dir_ / "a.h5", dir_ / "copy.h5");
  write_checkpoint(dir_ / "b.h5", sample_state(2));
  const std::string a = checkpoint_header(dir_ / "a.h5");
  EXPECT_TRUE(a.starts_with("TESSEL-CHECKPOINT\nbytes ")) << a;
  EXPECT_EQ(checkpoint_header(dir_ / "copy.h5"), a);
  EXPECT_NE(checkpoint_header(dir_ / "b.h5"), a);
  EXPECT_EQ(checkpoint_header(dir_ / "missing.h5"), "");
}

TEST_F(CheckpointTest, OverwritingReplacesThePreviousCheckpoint) {
  write_checkpoint(dir_ / "ck.h5", sample_state(1));
  const CheckpointState second = sample_state(2);
  write_checkpoint(dir_ / "ck.h5", second);
  expect_same(second, read_checkpoint(dir_ / "ck.h5"));
}

TEST_F(CheckpointTest, LayoutIsTheKerasLikeOneH5pyReads) {
  write_checkpoint(dir_ / "ck.h5", sample_state(1));
  const hid_t file = H5Fopen((dir_ / "ck.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  for (const char* path :
       {"/model_weights/features.conv1/weight", "/model_weights/features.conv1/bias",
        "/model_weights/classifier/weight", "/model_weights/bn/num_batches_tracked",
        "/optimizer_weights/features.conv1/weight/momentum_buffer",
        "/optimizer_weights/features.conv1/weight/exp_avg_sq", "/state/rng_state"}) {
    EXPECT_GT(H5Lexists(file, path, H5P_DEFAULT), 0) << path;
  }
  const hid_t weights = H5Gopen2(file, "/model_weights", H5P_DEFAULT);
  EXPECT_GT(H5Aexists(weights, "layer_names"), 0);
  const hid_t conv = H5Gopen2(file, "/model_weights/features.conv1", H5P_DEFAULT);
  EXPECT_GT(H5Aexists(conv, "weight_names"), 0);
  const hid_t data = H5Dopen2(file, "/model_weights/features.conv1/weight", H5P_DEFAULT);
  EXPECT_GT(H5Aexists(data, "torch_name"), 0);
  EXPECT_GT(H5Aexists(data, "crc32"), 0);
  const hid_t type = H5Dget_type(data);
  EXPECT_EQ(H5Tget_class(type), H5T_FLOAT);
  EXPECT_EQ(H5Tget_size(type), 4U);
  const hid_t state = H5Gopen2(file, "/state", H5P_DEFAULT);
  for (const char* attr :
       {"epoch", "step", "seed", "class_names", "tessel_version", "config", "run_state"}) {
    EXPECT_GT(H5Aexists(state, attr), 0) << attr;
  }
  H5Tclose(type);
  H5Dclose(data);
  H5Gclose(state);
  H5Gclose(conv);
  H5Gclose(weights);
  H5Fclose(file);
}

TEST_F(CheckpointTest, FlippedByteInADatasetIsReportedWithFileAndDataset) {
  write_checkpoint(dir_ / "ck.h5", sample_state(1));
  haddr_t offset = 0;
  {
    const hid_t file = H5Fopen((dir_ / "ck.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t data = H5Dopen2(file, "/model_weights/classifier/weight", H5P_DEFAULT);
    offset = H5Dget_offset(data);
    H5Dclose(data);
    H5Fclose(file);
  }
  ASSERT_NE(offset, HADDR_UNDEF);
  {
    std::fstream f(dir_ / "ck.h5", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset) + 5);
    const char c = static_cast<char>(f.get());
    f.seekp(static_cast<std::streamoff>(offset) + 5);
    f.put(static_cast<char>(c ^ 0x10));
  }
  // The header's checksum of the whole file finds it before HDF5 parses anything.
  std::string message = error_of(dir_ / "ck.h5");
  EXPECT_NE(message.find((dir_ / "ck.h5").string()), std::string::npos) << message;
  EXPECT_NE(message.find("do not match the header's checksum"), std::string::npos) << message;
  // Behind a header that agrees (a tool that rewrote it), the dataset's own CRC names it.
  restamp(dir_ / "ck.h5");
  message = error_of(dir_ / "ck.h5");
  EXPECT_NE(message.find("/model_weights/classifier/weight"), std::string::npos) << message;
  EXPECT_NE(message.find("does not match its checksum"), std::string::npos) << message;
}

TEST_F(CheckpointTest, DamageAnywhereOrATruncationIsFoundBeforeHdf5ReadsTheFile) {
  write_checkpoint(dir_ / "ck.h5", sample_state(1));
  const auto size = static_cast<std::streamoff>(fs::file_size(dir_ / "ck.h5"));
  // A byte in HDF5's own structures (past the 512-byte header, before any dataset), where HDF5
  // 1.10 crashed or looped on some values (tests/fuzz/regressions/open).
  for (const std::streamoff at : {std::streamoff{512 + 40}, size / 3, size - 7}) {
    fs::copy_file(dir_ / "ck.h5", dir_ / "bad.h5", fs::copy_options::overwrite_existing);
    {
      std::fstream f(dir_ / "bad.h5", std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(at);
      const char c = static_cast<char>(f.get());
      f.seekp(at);
      f.put(static_cast<char>(c ^ 0x01));
    }
    const std::string message = error_of(dir_ / "bad.h5");
    EXPECT_NE(message.find("do not match the header's checksum"), std::string::npos)
        << at << ": " << message;
  }
  fs::resize_file(dir_ / "ck.h5", static_cast<uintmax_t>(size - 100));
  const std::string message = error_of(dir_ / "ck.h5");
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
}

// Rewrites a text attribute of /state in place (as a hand edit with h5py would).
void rewrite_state_text(const fs::path& path, const char* name, const std::string& value) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  const hid_t state = H5Gopen2(file, "/state", H5P_DEFAULT);
  H5Adelete(state, name);
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(state, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  const char* text = value.c_str();
  H5Awrite(attr, type, &text);
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
  H5Gclose(state);
  H5Fclose(file);
}

TEST_F(CheckpointTest, AnEditedConfigOrRunStateFailsItsChecksum) {
  CheckpointState s = sample_state(1);
  s.config = "model: vgg-mini\nmpp: 32\n";
  for (const char* attr : {"config", "run_state", "tessel_version"}) {
    write_checkpoint(dir_ / "ck.h5", s);
    rewrite_state_text(dir_ / "ck.h5", attr, "model: vgg-mini\nmpp: 12\n");
    EXPECT_NE(error_of(dir_ / "ck.h5").find("header"), std::string::npos);  // size or CRC
    restamp(dir_ / "ck.h5");  // an editor that keeps the header: the state's own checksum
    const std::string message = error_of(dir_ / "ck.h5");
    EXPECT_NE(message.find((dir_ / "ck.h5").string()), std::string::npos) << attr << message;
    EXPECT_NE(message.find("do not match their checksum"), std::string::npos) << attr << message;
  }
  // Rewritten with the same text, it reads (the check is of content, not of the HDF5 layout).
  write_checkpoint(dir_ / "ck.h5", s);
  rewrite_state_text(dir_ / "ck.h5", "config", s.config);
  restamp(dir_ / "ck.h5");
  expect_same(s, read_checkpoint(dir_ / "ck.h5"));
}

TEST_F(CheckpointTest, ANetworkDescriptionIsKeptAndCheckedWhenThereIsOne) {
  CheckpointState written = sample_state(1);
  written.network = R"({"format": 1, "nodes": [{"op": "input", "channels": 3}]})";
  write_checkpoint(dir_ / "ck.h5", written);
  expect_same(written, read_checkpoint(dir_ / "ck.h5"));
  // Changed behind a consistent header, the state's checksum finds it.
  rewrite_state_text(dir_ / "ck.h5", "network", R"({"format": 1, "nodes": []})");
  restamp(dir_ / "ck.h5");
  EXPECT_NE(error_of(dir_ / "ck.h5").find("do not match their checksum"), std::string::npos);
}

TEST_F(CheckpointTest, AFormatOneCheckpointWithoutTheStateChecksumIsStillRead) {
  const CheckpointState s = sample_state(1);
  write_checkpoint(dir_ / "ck.h5", s);
  {
    const hid_t file = H5Fopen((dir_ / "ck.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t state = H5Gopen2(file, "/state", H5P_DEFAULT);
    H5Adelete(state, "state_crc32");
    const hid_t attr = H5Aopen(state, "format_version", H5P_DEFAULT);
    const int64_t one = 1;
    H5Awrite(attr, H5T_NATIVE_INT64, &one);
    H5Aclose(attr);
    H5Gclose(state);
    H5Fclose(file);
  }
  restamp(dir_ / "ck.h5");
  expect_same(s, read_checkpoint(dir_ / "ck.h5"));
}

TEST_F(CheckpointTest, TruncatedOrForeignFilesGiveAClearError) {
  write_checkpoint(dir_ / "ck.h5", sample_state(1, 4096));
  const auto size = fs::file_size(dir_ / "ck.h5");
  fs::resize_file(dir_ / "ck.h5", size / 2);
  std::string message = error_of(dir_ / "ck.h5");
  EXPECT_NE(message.find("ck.h5"), std::string::npos) << message;
  EXPECT_NE(message.find("damaged"), std::string::npos) << message;

  std::ofstream(dir_ / "text.h5") << "not a checkpoint\n";
  message = error_of(dir_ / "text.h5");
  EXPECT_NE(message.find("not an HDF5 file"), std::string::npos) << message;

  message = error_of(dir_ / "missing.h5");
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
}

TEST_F(CheckpointTest, AnUnwritableFolderFailsClearlyAndLeavesNothing) {
  try {
    write_checkpoint(dir_ / "no-such-folder" / "ck.h5", sample_state(1));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-folder"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_empty(dir_));
}

// A child process writes large checkpoints over and over and is killed at a random moment; the
// checkpoint on disk is always a complete one.
TEST_F(CheckpointTest, AWriteKilledHalfwayLeavesThePreviousCheckpointIntact) {
  const fs::path path = dir_ / "ck.h5";
  const CheckpointState first = sample_state(1);
  write_checkpoint(path, first);
  for (int attempt = 0; attempt < 3; ++attempt) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      const CheckpointState big = sample_state(2, 1 << 20);  // ~16 MiB of doubles per write
      for (;;) write_checkpoint(path, big);
    }
    // Kill once a write is under way.
    const fs::path partial = dir_ / "ck.h5.partial";
    for (int i = 0; i < 2000 && !fs::exists(partial); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * attempt));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    const CheckpointState now = read_checkpoint(path);  // complete: the first or a big one
    EXPECT_TRUE(now.weights[2].tensor.size(1) == 8 || now.weights[2].tensor.size(1) == 1 << 20);
  }
  write_checkpoint(path, first);  // a later write clears the leftover
  expect_same(first, read_checkpoint(path));
  EXPECT_FALSE(fs::exists(dir_ / "ck.h5.partial"));
}

// A write that fails part way (here a file-size limit; a full disk alike) is an error naming the
// reason, leaves the previous checkpoint and no partial file, and the process still exits
// cleanly: HDF5 failing inside its own close once left a file id open that crashed its atexit
// handler (exit 139 on a full tmpfs, issue 18).
TEST_F(CheckpointTest, AWriteThatRunsOutOfSpaceFailsClearlyAndTheProcessExitsCleanly) {
  const fs::path path = dir_ / "ck.h5";
  const CheckpointState first = sample_state(1);
  write_checkpoint(path, first);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG instead of killing
    const rlimit limit{64 << 10, 64 << 10};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    int code = 1;
    try {
      write_checkpoint(path, sample_state(2, 1 << 16));  // ~1.5 MiB
    } catch (const Error& e) {
      code = std::string(e.what()).find("File too large") != std::string::npos ? 3 : 2;
    }
    std::exit(code);  // runs HDF5's atexit handler
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 3);
  expect_same(first, read_checkpoint(path));
  EXPECT_FALSE(fs::exists(dir_ / "ck.h5.partial"));
}

// conv.weight, fc.weight and the buffer bn.running_mean (LibTorch names nest by module).
struct TwoLayers : torch::nn::Module {
  TwoLayers() {
    register_module("conv", std::make_shared<torch::nn::Module>())
        ->register_parameter("weight", at::zeros({4, 3, 3, 3}));
    register_module("fc", std::make_shared<torch::nn::Module>())
        ->register_parameter("weight", at::zeros({2, 4}));
    register_module("bn", std::make_shared<torch::nn::Module>())
        ->register_buffer("running_mean", at::zeros({4}));
  }
};

TEST(LoadWeights, CopiesMatchingTensorsAndReportsTheRest) {
  TwoLayers module;
  const at::Tensor conv = at::randn({4, 3, 3, 3});
  const at::Tensor mean = at::randn({4}, at::kDouble);
  const std::vector<NamedTensor> weights = {{"conv.weight", conv},
                                            {"fc.weight", at::randn({2, 5})},
                                            {"bn.running_mean", mean},
                                            {"extra.bias", at::randn({3})}};
  const WeightLoadReport report = load_weights(module, weights, false);
  EXPECT_EQ(report.loaded, (std::vector<std::string>{"conv.weight", "bn.running_mean"}));
  EXPECT_TRUE(report.missing.empty());
  EXPECT_EQ(report.unexpected, std::vector<std::string>{"extra.bias"});
  ASSERT_EQ(report.mismatched.size(), 1U);
  EXPECT_NE(report.mismatched[0].find("fc.weight"), std::string::npos);
  const auto named = named_weights(module);
  EXPECT_TRUE(at::equal(named[0].tensor, conv));
  EXPECT_TRUE(at::allclose(named[2].tensor, mean.to(at::kFloat)));
  EXPECT_TRUE(named[1].tensor.eq(0).all().item<bool>());  // untouched
  EXPECT_FALSE(named[0].tensor.requires_grad() && named[0].tensor.grad_fn());

  EXPECT_THROW(load_weights(module, weights, true), Error);
  TwoLayers other;
  const WeightLoadReport partial = load_weights(other, {{"conv.weight", conv}}, false);
  EXPECT_EQ(partial.missing, (std::vector<std::string>{"fc.weight", "bn.running_mean"}));
}

TEST(Crc32, MatchesTheStandardCheckValue) {
  const std::string text = "123456789";
  EXPECT_EQ(crc32(text.data(), text.size()), 0xCBF43926U);
  EXPECT_EQ(crc32(text.data() + 4, 5, crc32(text.data(), 4)), 0xCBF43926U);
}

}  // namespace
}  // namespace tessel::io
