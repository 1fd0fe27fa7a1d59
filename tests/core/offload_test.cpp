// Offload (issue 6): checkpoints in the tile store's host or disk tier give exactly the
// gradients of plain autograd, the resident tier stays within the budget, and scratch-file
// faults end the step with a clear error and no leftover files.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>

#include "core/device/device.h"
#include "core/device/memory.h"
#include "core/error.h"
#include "core/exec/gradcheck.h"
#include "core/plan/geometry.h"
#include "core/plan/planner.h"
#include "core/store/tile_store.h"
#include "models/zoo.h"
#include "tests/core/first_law.h"

namespace tessel::core {
namespace {

namespace fs = std::filesystem;
constexpr double kTolerance = 1e-10;

at::Tensor random_image(int64_t channels, int64_t h, int64_t w, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn({1, channels, h, w}, gen, at::kDouble).to(test_device());
}

// A fresh scratch directory per test, removed after.
class ScratchDir {
 public:
  ScratchDir() {
    // Parameterised tests are named "Name/0": one directory level, not two.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '-');
    path_ = fs::temp_directory_path() /
            ("tessel-offload-test-" + std::to_string(::getpid()) + "-" + name);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  size_t files() const {
    return static_cast<size_t>(
        std::distance(fs::directory_iterator(path_), fs::directory_iterator{}));
  }

 private:
  fs::path path_;
};

// Every checkpoint a later segment reads goes to disk, in blocks of `block_bytes` behind a
// `window_bytes` read-ahead: small enough that blocks are evicted and read back many times.
PlanOptions forced_disk(Strategy s, int64_t ty, int64_t tx, int64_t window_bytes = 4096,
                        int64_t block_bytes = 1024) {
  PlanOptions o;
  o.strategy = s;
  o.element_bytes = 8;
  o.overrides.tiles_y = ty;
  o.overrides.tiles_x = tx;
  o.offload = PlanOptions::Offload::kDisk;
  o.overrides.window_bytes = window_bytes;
  o.overrides.block_bytes = block_bytes;
  return o;
}

// A shipped model with two input channels in float64, with random weights.
Graph float64_model(const std::string& name, uint64_t seed) {
  models::ModelOptions mo;
  mo.in_channels = 2;
  Graph g = models::build_model(name, mo);
  g.module().to(test_device(), at::kDouble);
  randomise(g, seed);
  return g;
}

using test::every_checkpoint;

// A block whose data starts on a page boundary (a view into a larger allocation), with a partial
// last page: the direct-I/O path writes its whole pages straight from it.
at::Tensor page_aligned_block(uint64_t seed) {
  constexpr int64_t kPage = 4096, kElements = (3 * kPage + 104) / 8;
  const at::Tensor base = at::empty({kElements + kPage / 8}, at::kDouble);
  const auto address = reinterpret_cast<uintptr_t>(base.data_ptr());
  const auto skip = static_cast<int64_t>((kPage - address % kPage) % kPage / 8);
  at::Tensor block = base.narrow(0, skip, kElements);
  block.copy_(random_image(1, 1, kElements, seed).flatten());
  return block;
}

// In both modes: through the page cache, and bypassing it (direct I/O on file systems that have
// it), with blocks of odd sizes, and page-aligned ones.
TEST(TileStore, BlocksComeBackBitForBitFromEveryTier) {
  for (const bool bypass : {false, true}) {
    ScratchDir dir;
    fs::path file;
    {
      TileStoreOptions o{dir.path(), 2048};
      o.bypass_page_cache = bypass;
      TileStore store(o);
      std::vector<at::Tensor> blocks;
      std::vector<TileStore::BlockId> ids;
      for (int i = 0; i < 12; ++i) {
        blocks.push_back(i % 4 == 1 ? page_aligned_block(static_cast<uint64_t>(i))
                                    : random_image(2, 5 + i, 7, static_cast<uint64_t>(i)));
        // Channels-last tiles (the forward's convs) are kept in their layout.
        if (i % 4 == 2) blocks.back() = blocks.back().contiguous(at::MemoryFormat::ChannelsLast);
        ids.push_back(store.put(blocks.back(), i % 3 == 0 ? Tier::kHost : Tier::kDisk));
      }
      store.flush();
      file = store.scratch_file();
      EXPECT_TRUE(fs::exists(file));
      // Read twice in a scheduled order, then once out of schedule.
      std::vector<TileStore::BlockId> order;
      for (int pass = 0; pass < 2; ++pass) {
        for (int i = 11; i >= 0; --i) order.push_back(ids[static_cast<size_t>(i)]);
      }
      store.schedule(order);
      for (TileStore::BlockId id : order) {
        const at::Tensor back = store.get(id);
        EXPECT_TRUE(at::equal(back, blocks[static_cast<size_t>(id)])) << "block " << id;
        EXPECT_EQ(back.strides(), blocks[static_cast<size_t>(id)].strides()) << "block " << id;
      }
      EXPECT_TRUE(at::equal(store.get(ids[4]), blocks[4]));
      const TileStoreStats st = store.stats();
      EXPECT_GT(st.read_bytes, 0);
      EXPECT_GT(st.written_bytes, 0);
      EXPECT_LE(st.resident_bytes, 2048 + blocks.back().nbytes() * 2) << "the window bounds memory";
    }
    EXPECT_FALSE(fs::exists(file)) << "the scratch file is removed with the store";
    EXPECT_EQ(dir.files(), 0u);
  }
}

// Erased disk blocks leave their extents to later blocks: a step that writes and erases many
// times what it holds keeps a scratch file the size of what it holds (an append-only file filled
// the disk at resnet50 4096²), and the blocks written into reused extents come back intact.
TEST(TileStore, ErasedBlocksSpaceIsReused) {
  for (const bool bypass : {false, true}) {
    ScratchDir dir;
    TileStoreOptions o{dir.path(), 4096};
    o.bypass_page_cache = bypass;
    TileStore store(o);
    std::vector<std::pair<TileStore::BlockId, at::Tensor>> live;
    int64_t held = 0, most = 0;
    for (int i = 0; i < 60; ++i) {
      // Three sizes, so extents are split and reused by smaller blocks too.
      const at::Tensor t = random_image(2, 20 + 10 * (i % 3), 30, static_cast<uint64_t>(i));
      live.emplace_back(store.put(t, Tier::kDisk), t);
      held += t.nbytes();
      most = std::max(most, held);
      if (live.size() > 4) {
        store.flush();
        EXPECT_TRUE(at::equal(store.get(live.front().first), live.front().second)) << i;
        held -= live.front().second.nbytes();
        store.erase(live.front().first);
        live.erase(live.begin());
      }
    }
    store.flush();
    for (const auto& [id, t] : live) EXPECT_TRUE(at::equal(store.get(id), t));
    // Written: 60 blocks; the file: about what was held at once (pages and splits aside).
    EXPECT_LT(static_cast<int64_t>(fs::file_size(store.scratch_file())), 3 * most + 8 * 4096)
        << (bypass ? "page cache bypassed" : "");
  }
}

// The scratch file changed under the store: a flipped bit, a truncation, a block's bytes lost
// (zeros where it was written). Each is an error naming the file, in both modes, never a
// silently wrong block.
TEST(TileStore, AFlippedByteAShortFileOrALostWriteIsAnErrorNamingTheFile) {
  for (const bool bypass : {false, true}) {
    for (const std::string fault :
         {"flipped byte", "truncated", "truncated in the second half", "lost write"}) {
      SCOPED_TRACE(fault + (bypass ? ", page cache bypassed" : ""));
      ScratchDir dir;
      TileStoreOptions o{dir.path(), 4096};
      o.bypass_page_cache = bypass;
      TileStore store(o);
      // 1,280,000 bytes: a partial last page, and over 1 MiB, so direct reads go in two halves.
      const at::Tensor a = random_image(4, 200, 200, 1);
      const at::Tensor b = random_image(4, 33, 35, 2);
      const TileStore::BlockId id = store.put(a, Tier::kDisk);
      (void)store.put(b, Tier::kDisk);
      store.flush();  // both written and, unscheduled, out of memory
      const fs::path file = store.scratch_file();
      ASSERT_EQ(store.stats().resident_bytes, 0);
      // Block a is the file's first.
      const int fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC);
      ASSERT_GE(fd, 0);
      if (fault == "flipped byte") {
        unsigned char c = 0;
        ASSERT_EQ(::pread(fd, &c, 1, 20001), 1);
        c ^= 0x10;
        ASSERT_EQ(::pwrite(fd, &c, 1, 20001), 1);
      } else if (fault == "truncated") {
        ASSERT_EQ(::ftruncate(fd, 30000), 0);
      } else if (fault == "truncated in the second half") {
        ASSERT_EQ(::ftruncate(fd, 1000000), 0);
      } else {
        const std::vector<char> zeros(static_cast<size_t>(a.nbytes()), 0);
        ASSERT_EQ(::pwrite(fd, zeros.data(), zeros.size(), 0), static_cast<ssize_t>(zeros.size()));
      }
      ::close(fd);
      try {
        const at::Tensor back = store.get(id);
        ADD_FAILURE() << "expected an error; the block came back "
                      << (at::equal(back, a) ? "unchanged" : "wrong");
      } catch (const tessel::Error& e) {
        EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
      }
    }
  }
}

// Pages of `file` in the page cache (mincore over a mapping of it).
int64_t cached_pages(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + file.string());
  const auto size = static_cast<size_t>(fs::file_size(file));
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) throw std::runtime_error("cannot map " + file.string());
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((size + page - 1) / page);
  ::mincore(map, size, in_core.data());
  ::munmap(map, size);
  return std::count_if(in_core.begin(), in_core.end(), [](unsigned char c) { return c & 1; });
}

TEST(TileStore, BypassingThePageCacheLeavesNoBlockInItAndTimesTheTransfers) {
  ScratchDir dir;
  for (const bool bypass : {false, true}) {
    TileStoreOptions o{dir.path(), 1 << 20};
    o.bypass_page_cache = bypass;
    TileStore store(o);
    std::vector<at::Tensor> blocks;
    std::vector<TileStore::BlockId> ids;
    for (int i = 0; i < 4; ++i) {
      blocks.push_back(random_image(8, 128, 128, static_cast<uint64_t>(i)));  // 1 MiB
      ids.push_back(store.put(blocks.back(), Tier::kDisk));
    }
    store.flush();
    const int64_t after_writes = cached_pages(store.scratch_file());
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_TRUE(at::equal(store.get(ids[i]), blocks[i]));
    const int64_t after_reads = cached_pages(store.scratch_file());
    if (bypass) {
      EXPECT_EQ(after_writes, 0) << "written blocks were dropped from the page cache";
      EXPECT_EQ(after_reads, 0) << "read blocks were dropped from the page cache";
    } else {
      EXPECT_GT(after_writes, 0) << "without bypass the page cache keeps written blocks";
    }
    const TileStoreStats st = store.stats();
    EXPECT_GT(st.write_ms, 0);
    EXPECT_GT(st.read_ms, 0);
  }
}

// Write-behind is bounded by its own bytes, not the read window: every byte queued is memory the
// budget counts, and the planner counts one block queued behind the one being written. Puts in a
// tight loop outrun the disk (direct I/O), so an unbounded queue would hold many blocks.
// The executor sets each pass's write-behind (set_write_behind): a smaller one drains the
// writes beyond it at once (the option here is 64 blocks, so a store that ignored it could
// queue many).
TEST(TileStore, WritesInFlightStayWithinTheWriteBehind) {
  ScratchDir dir;
  constexpr int64_t kBlock = 1 << 20;
  TileStoreOptions o{dir.path(), 64 * kBlock};
  o.bypass_page_cache = true;
  o.write_behind_bytes = 64 * kBlock;
  TileStore store(o);
  std::vector<at::Tensor> blocks;
  std::vector<TileStore::BlockId> ids;
  for (int i = 0; i < 48; ++i) {
    const int64_t behind = (i / 8) % 2 == 0 ? kBlock : 4 * kBlock;
    store.set_write_behind(behind);
    EXPECT_LE(store.stats().in_flight_bytes, behind) << "a smaller write-behind drains";
    blocks.push_back(random_image(8, 128, 128, static_cast<uint64_t>(i)));  // 1 MiB
    ids.push_back(store.put(blocks.back(), Tier::kDisk));
    EXPECT_LE(store.stats().in_flight_bytes, behind) << "after block " << i;
  }
  EXPECT_LE(store.stats().in_flight_peak_bytes, 5 * kBlock);
  store.flush();
  EXPECT_EQ(store.stats().in_flight_bytes, 0);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_TRUE(at::equal(store.get(ids[i]), blocks[i]));
}

// Reserved ids: reads scheduled before the blocks exist (the next pass's reads of what this pass
// writes) are kept when written within the window, not read back; a taken block (a gradient
// reopened for more additions) keeps its id for its next put; reading an unwritten block is an
// error, never stale data.
TEST(TileStore, ReservedBlocksAreScheduledBeforeTheyExistAndKeepTheirIds) {
  ScratchDir dir;
  TileStoreOptions o{dir.path(), 64 << 10};
  o.bypass_page_cache = true;
  TileStore store(o);
  std::vector<at::Tensor> blocks;
  std::vector<TileStore::BlockId> ids;
  int64_t total = 0;
  for (int i = 0; i < 4; ++i) {
    blocks.push_back(random_image(2, 16, 16 + i, static_cast<uint64_t>(i)));  // 4–5 KiB
    ids.push_back(store.reserve(blocks.back().nbytes(), Tier::kDisk));
    total += blocks.back().nbytes();
  }
  EXPECT_THROW(store.get(ids[0]), Error) << "a reserved block has no contents yet";
  store.schedule(ids);
  for (int i = 0; i < 4; ++i)
    store.put(ids[static_cast<size_t>(i)], blocks[static_cast<size_t>(i)]);
  store.flush();
  EXPECT_EQ(store.stats().written_bytes, total);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(at::equal(store.get(ids[static_cast<size_t>(i)]), blocks[static_cast<size_t>(i)]));
  }
  EXPECT_EQ(store.stats().read_bytes, 0) << "blocks wanted within the window stay in memory";
  EXPECT_EQ(store.stats().unscheduled_reads, 0);
  // Taken (read back from disk: no longer in the schedule), then written again under its id.
  const at::Tensor taken = store.take(ids[2]);
  EXPECT_TRUE(at::equal(taken, blocks[2]));
  EXPECT_EQ(store.stats().unscheduled_reads, 1);
  EXPECT_GT(store.stats().read_bytes, 0);
  EXPECT_EQ(store.stats().disk_bytes, total - blocks[2].nbytes());
  EXPECT_THROW(store.get(ids[2]), Error) << "a taken block has no contents until its next put";
  const at::Tensor again = taken + 1;
  store.put(ids[2], again);
  store.flush();
  EXPECT_TRUE(at::equal(store.get(ids[2]), again));
  EXPECT_THROW(store.put(ids[2], again), Error) << "a block is written once per reservation";
  const TileStore::BlockId unused = store.reserve(1024, Tier::kDisk);
  store.erase(unused);
  store.erase(ids[3]);
  EXPECT_EQ(store.stats().disk_bytes, total - blocks[3].nbytes());
}

TEST(TileStore, ScratchFilesOfCrashedRunsAreRemovedOnTheNextStart) {
  ScratchDir dir;
  // No process has pid 999999999 (above any pid_max): its run crashed.
  const fs::path stale = dir.path() / "tessel-offload-999999999-0.scratch";
  const fs::path mine =
      dir.path() / ("tessel-offload-" + std::to_string(::getpid()) + "-999.scratch");
  const fs::path other = dir.path() / "notes.txt";
  for (const auto& p : {stale, mine, other}) std::ofstream(p) << "x";
  TileStore store({dir.path(), 4096});
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(mine)) << "a live process's scratch file is kept";
  EXPECT_TRUE(fs::exists(other)) << "only scratch files are touched";
}

TEST(Offload, RandomNetworksWithEveryCheckpointOnDiskMatchPlainAutograd) {
  ScratchDir dir;
  StepOptions so;
  so.scratch_dir = dir.path();
  int offloaded = 0;
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    std::mt19937_64 rng(seed * 104729);
    auto pick = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    Graph g = models::random_network(seed, 17, 2);
    g.module().to(test_device(), at::kDouble);
    randomise(g, seed);
    const Shape in{2, pick(17, 41), pick(17, 41)};
    const Strategy s = seed % 2 ? Strategy::kGrid : Strategy::kRows;
    const int64_t ty = pick(s == Strategy::kRows ? 2 : 1, 4);
    const int64_t tx = pick(ty == 1 ? 2 : 1, 3);
    PlanOptions o = forced_disk(s, ty, tx, 1024 * pick(1, 8), 256 * pick(1, 8));
    // Training's step, and a third with the image's gradient (the only one a network without
    // parameters has).
    o.input_gradient = seed % 3 == 0 || g.module().parameters().empty();
    o.streaming_reduction = pick(0, 3) != 0;
    // Every candidate a checkpoint: as many offloaded activations as the network allows.
    o.overrides.checkpoints = every_checkpoint(g, in);
    const Plan plan = make_plan(g, in, 0, o);
    if (plan.offloads()) ++offloaded;
    ASSERT_TRUE(tiles(plan)) << "the check must tile\n" << to_string(plan, g);
    const auto c =
        compare_with_plain(g, plan, random_image(2, in.height, in.width, seed), seed, so);
    EXPECT_LT(c.worst(), kTolerance) << "seed " << seed << " input " << to_string(in) << "\n"
                                     << to_string(plan, g) << c.to_string();
    EXPECT_EQ(c.offload_bytes > 0, plan.offloads()) << "seed " << seed;
    EXPECT_EQ(dir.files(), 0u) << "seed " << seed << ": scratch files left after the step";
  }
  EXPECT_GE(offloaded, 12) << "most random networks should have a checkpoint to offload";
}

TEST(Offload, ShippedModelsWithCheckpointsOnDiskAndInHostMemoryMatchPlainAutograd) {
  ScratchDir dir;
  StepOptions so;
  so.scratch_dir = dir.path();
  for (const std::string name : {"tiny", "resnet18"}) {
    models::ModelOptions mo;
    mo.in_channels = 3;
    Graph g = models::build_model(name, mo);
    g.module().to(test_device(), at::kDouble);
    randomise(g, 8);
    for (Strategy s : {Strategy::kGrid, Strategy::kRows}) {
      for (auto tier : {PlanOptions::Offload::kNever, PlanOptions::Offload::kDisk,
                        PlanOptions::Offload::kHost}) {
        PlanOptions o = forced_disk(s, 3, 2, 8192, 2048);
        o.offload = tier;
        o.overrides.checkpoints = every_checkpoint(g, {3, 67, 53});
        const Plan plan = make_plan(g, {3, 67, 53}, 0, o);
        ASSERT_EQ(plan.offloads(), tier != PlanOptions::Offload::kNever) << to_string(plan, g);
        const auto c = compare_with_plain(g, plan, random_image(3, 67, 53, 8), 8, so);
        EXPECT_LT(c.worst(), kTolerance) << name << " " << to_string(s) << "\n"
                                         << to_string(plan, g) << c.to_string();
      }
    }
  }
}

// The tiles' memory formats (core/device/device.h TileFormats: the CPU's choice, contiguous in both
// passes as on a GPU in float32, channels-last in both as in bf16) change no gradient, through
// checkpoints read back from the store in each format, residual joins, shared rows and batch
// norm's inner checkpoints.
TEST(Offload, EveryTileFormatMatchesPlainAutograd) {
  ScratchDir dir;
  const std::pair<std::string, models::Norm> nets[] = {{"tiny", models::Norm::kFrozen},
                                                       {"resnet18", models::Norm::kFrozen},
                                                       {"resnet18", models::Norm::kBatch}};
  for (const std::string format : {"cpu", "contiguous", "channels-last"}) {
    StepOptions so;
    so.scratch_dir = dir.path();
    so.tile_formats = parse_tile_formats(format);
    ASSERT_TRUE(so.tile_formats.has_value());
    for (const auto& [name, norm] : nets) {
      models::ModelOptions mo;
      mo.in_channels = 3;
      mo.norm = norm;
      Graph g = models::build_model(name, mo);
      g.module().to(test_device(), at::kDouble);
      randomise(g, 8);
      for (Strategy s : {Strategy::kGrid, Strategy::kRowsShared}) {
        for (auto tier : {PlanOptions::Offload::kNever, PlanOptions::Offload::kHost}) {
          PlanOptions o = forced_disk(s, 3, s == Strategy::kGrid ? 2 : 1, 8192, 2048);
          o.offload = tier;
          o.overrides.checkpoints = every_checkpoint(g, {3, 67, 53});
          const Plan plan = make_plan(g, {3, 67, 53}, 0, o);
          ASSERT_GT(std::count_if(plan.segments.begin(), plan.segments.end(),
                                  [](const Segment& seg) { return seg.forward.tiles() > 1; }),
                    0)
              << "no tiled segment\n"
              << to_string(plan, g);
          const auto c = compare_with_plain(g, plan, random_image(3, 67, 53, 8), 8, so);
          EXPECT_LT(c.worst(), kTolerance)
              << format << " " << name << " " << models::to_string(norm) << " " << to_string(s)
              << " offload " << (tier == PlanOptions::Offload::kHost) << "\n"
              << to_string(plan, g) << c.to_string();
        }
      }
    }
  }
}

// One training step of `plan` on a random image, offloading into `dir`; expects the measured
// peak within the plan's prediction plus 10% (the planner's headroom covers allocator effects).
StepResult step_within_prediction(Graph& g, const Plan& plan, const Shape& in,
                                  const fs::path& dir) {
  TensorTileSource source(at::randn({1, in.channels, in.height, in.width}));
  StepOptions so;
  so.scratch_dir = dir;
  const LossFn loss = [](const at::Tensor& logits, const at::Tensor&) { return logits.sum(); };
  const StepResult r = train_step(g, plan, source, at::Tensor(), loss, so);
  const int64_t model_state = plan.predicted.parameters + plan.predicted.gradients;
  // The passes' predictions leave out the write-behind beyond the plan's own (the budget's
  // slack, Segment::forward_write_behind).
  int64_t behind = 0;
  for (const Segment& s : plan.segments) {
    behind = std::max({behind, s.forward_write_behind - plan.write_behind_bytes,
                       s.backward_write_behind - plan.write_behind_bytes});
  }
  EXPECT_LE(r.measured_peak_bytes + model_state, plan.predicted.total() * 11 / 10 + behind)
      << "budget " << format_bytes(plan.budget_bytes) << ", measured "
      << format_bytes(r.measured_peak_bytes + model_state) << ", predicted "
      << format_bytes(plan.predicted.total()) << "\n"
      << to_string(plan, g);
  return r;
}

// A budget the checkpoints exceed several times: the planner offloads, says so, and the
// measured peak stays within the budget plus a slack of 10% (the planner's headroom covers
// allocator effects; the store's blocks in hand are bounded by the window).
class PeakUnderBudget : public ::testing::TestWithParam<Strategy> {};

TEST_P(PeakUnderBudget, CheckpointsSeveralTimesTheBudgetRunWithinTheBudget) {
  MemoryTracker::install();
  ScratchDir dir;
  models::ModelOptions mo;
  mo.in_channels = 3;
  Graph g = models::build_model("vgg-mini", mo);
  randomise(g, 3);
  const Shape in{3, 512, 512};
  PlanOptions o;
  o.strategy = GetParam();
  o.overrides.checkpoints = every_checkpoint(g, in);
  // Smallest budget that plans, searching down from an all-resident one.
  Plan resident = make_plan(g, in, 0, o);
  int64_t checkpoint_bytes = 0;
  for (size_t i = 0; i + 1 < resident.segments.size(); ++i) {
    const Shape& s = resident.shapes[static_cast<size_t>(resident.segments[i].output)];
    checkpoint_bytes += s.channels * s.height * s.width * 4;
  }
  int64_t budget = 0;
  Plan plan;
  for (int64_t b = 4 * checkpoint_bytes; b > checkpoint_bytes / 16; b = b * 7 / 8) {
    try {
      plan = make_plan(g, in, b, o);
      budget = b;
    } catch (const tessel::Error&) {
      break;
    }
  }
  ASSERT_GT(budget, 0);
  ASSERT_TRUE(plan.offloads()) << to_string(plan, g);
  EXPECT_GT(checkpoint_bytes, 2 * budget) << to_string(plan, g);
  const std::string table = to_string(plan, g);
  EXPECT_NE(table.find("disk"), std::string::npos) << table;
  EXPECT_NE(table.find("moved per step"), std::string::npos) << table;
  o.offload = PlanOptions::Offload::kNever;
  EXPECT_THROW(make_plan(g, in, budget, o), tessel::Error) << "it fits only with offload";

  const StepResult r = step_within_prediction(g, plan, in, dir.path());
  const int64_t model_state = plan.predicted.parameters + plan.predicted.gradients;
  EXPECT_GT(r.offload.written_bytes, checkpoint_bytes);
  EXPECT_GT(r.offload.read_bytes, checkpoint_bytes);
  EXPECT_LE(r.offload.disk_peak_bytes, stored_bytes(g, plan, Tier::kDisk));
  // The planner's bytes moved (halos, block rounding and the window's reuse of blocks modelled)
  // agree with what the store moved.
  const double moved = static_cast<double>(r.offload.written_bytes + r.offload.read_bytes);
  EXPECT_NEAR(static_cast<double>(plan.moved_bytes()) / moved, 1.0, 0.15)
      << format_bytes(plan.moved_bytes()) << " predicted";
  std::cout << "budget " << format_bytes(budget) << ", checkpoints "
            << format_bytes(checkpoint_bytes) << ", measured peak "
            << format_bytes(r.measured_peak_bytes + model_state) << ", predicted "
            << format_bytes(plan.predicted.total()) << ", written "
            << format_bytes(r.offload.written_bytes) << ", read "
            << format_bytes(r.offload.read_bytes) << " (predicted moved "
            << format_bytes(plan.moved_bytes()) << "), waited " << r.offload.wait_ms << " ms\n";
}

INSTANTIATE_TEST_SUITE_P(Offload, PeakUnderBudget,
                         ::testing::Values(Strategy::kRows, Strategy::kGrid, Strategy::kRowsShared),
                         [](const auto& info) {
                           std::string name = to_string(info.param);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// Train-mode batch norm under a budget that holds none of its inputs: the planner runs the
// segments as sub-segments with their inner checkpoints in the store, and counts the gradient
// blocks open in the backward one sub-segment at a time (the sub-segments run one after another
// and each stores its blocks after its last addition). The measured peak stays within the
// budget plus the same 10% slack as above: a planner that counted one sub-segment's blocks too
// few would break it.
TEST(Offload, OffloadedInnerCheckpointsRunWithinTheBudget) {
  MemoryTracker::install();
  ScratchDir dir;
  Graph g(3);
  NodeId x = g.relu(g.batch_norm(g.conv(g.input(), ConvSpec(3, 16, 3).padding(1).bias(false))));
  for (int block = 0; block < 2; ++block) {
    const std::string b = "block" + std::to_string(block);
    NodeId y = g.relu(g.batch_norm(
        g.conv(x, ConvSpec(16, 16, 3).padding(1).bias(false), b + "_conv1"), b + "_bn1"));
    y = g.batch_norm(g.conv(y, ConvSpec(16, 16, 3).padding(1).bias(false), b + "_conv2"),
                     b + "_bn2");
    x = g.relu(g.add(y, x));
  }
  g.linear(g.flatten(g.global_avg_pool(x)), 2, "fc");
  randomise(g, 4);
  const Shape in{3, 192, 176};
  // Every inner checkpoint kept (in the store), then every barrier input recomputed in the
  // sub-segment that reads it (SubSegments::dropped: its rounds of sums hold their tiles'
  // graphs as the main pass does).
  for (const auto drop : {PlanOptions::DropInner::kNever, PlanOptions::DropInner::kAlways}) {
    const bool dropping = drop == PlanOptions::DropInner::kAlways;
    PlanOptions o;
    o.overrides.inner_tier = Tier::kDisk;
    o.overrides.drop_inner = drop;
    // The largest budget whose plan keeps inner checkpoints in the store (or drops them) over
    // at least 3×3 backward tiles, searching down from one that holds every activation. (Much
    // smaller ones only add tiles: 77×77 at the smallest, minutes a step.)
    auto offloaded = [&](const Plan& p) {
      int n = 0;
      for (const Segment& s : p.segments) {
        n += s.is<SubSegments>() && s.inner_tier() == Tier::kDisk && s.backward.tiles() >= 9 &&
             (s.dropped_inner().empty() != dropping);
      }
      return n;
    };
    int64_t budget = 0;
    Plan plan;
    for (int64_t b = int64_t{64} << 20; b > (int64_t{256} << 10) && budget == 0; b = b * 15 / 16) {
      plan = make_plan(g, in, b, o);
      if (offloaded(plan) > 0) budget = b;
    }
    ASSERT_GT(budget, 0) << to_string(plan, g);
    const StepResult r = step_within_prediction(g, plan, in, dir.path());
    const int64_t model_state = plan.predicted.parameters + plan.predicted.gradients;
    // The disk never held more than the bound the step checked against the free space (the
    // file takes more: whole pages per block, freed extents reused by size).
    if (!dropping) {
      EXPECT_GT(r.offload.disk_peak_bytes, 0);
    }
    EXPECT_LE(r.offload.disk_peak_bytes, stored_bytes(g, plan, Tier::kDisk));
    // Every read was scheduled before it was made, reopened gradient blocks included (each
    // unscheduled one waits for the disk: 534 a step at resnet50 4096², session 36).
    EXPECT_EQ(r.offload.unscheduled_reads, 0);
    std::cout << (dropping ? "recomputed" : "kept") << ": budget " << format_bytes(budget)
              << ", measured peak " << format_bytes(r.measured_peak_bytes + model_state)
              << ", predicted " << format_bytes(plan.predicted.total()) << ", on disk at most "
              << format_bytes(r.offload.disk_peak_bytes) << " (bound "
              << format_bytes(stored_bytes(g, plan, Tier::kDisk)) << "), scratch file "
              << format_bytes(r.offload.scratch_file_bytes) << "\n"
              << to_string(plan, g);
  }
}

// A step that needs more scratch space than the file system has free is refused before it
// starts, naming the directory and both figures (not a full disk an hour into the step).
TEST(Offload, AStepNeedingMoreScratchThanIsFreeIsRefusedBeforeItStarts) {
  ScratchDir dir;
  try {
    TileStore::check_free_space(dir.path(), int64_t{1} << 60);
    FAIL() << "an exbibyte of scratch space was found free";
  } catch (const ScratchError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(dir.path().string()), std::string::npos) << what;
    EXPECT_NE(what.find("1024.0 PiB"), std::string::npos) << what;
    EXPECT_NE(what.find("free"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(TileStore::check_free_space(dir.path(), 4096));
}

// The planner's own choice under a tight budget (not forced): float64, every gradient exact.
TEST(Offload, PlansThatOffloadUnderATightBudgetMatchPlainAutograd) {
  ScratchDir dir;
  StepOptions so;
  so.scratch_dir = dir.path();
  models::ModelOptions mo;
  mo.in_channels = 2;
  // The shipped models' parameters dominate a budget this small in float64: tiny only.
  for (const std::string name : {"tiny"}) {
    Graph g = models::build_model(name, mo);
    g.module().to(test_device(), at::kDouble);
    randomise(g, 6);
    const Shape in{2, 384, 352};
    for (Strategy s : {Strategy::kGrid, Strategy::kRows}) {
      PlanOptions o;
      o.strategy = s;
      o.element_bytes = 8;
      o.overrides.checkpoints = every_checkpoint(g, in);
      const Plan plan = test::first_offloading_plan(g, in, o);
      ASSERT_TRUE(plan.offloads()) << name << " " << to_string(s) << "\n" << to_string(plan, g);
      const auto c = compare_with_plain(g, plan, random_image(2, in.height, in.width, 6), 6, so);
      EXPECT_LT(c.worst(), kTolerance) << name << " " << to_string(s) << "\n"
                                       << to_string(plan, g) << c.to_string();
      EXPECT_GT(c.offload_bytes, 0);
    }
  }
}

// Partly resident checkpoints: where the budget leaves room while an offloaded checkpoint lives,
// its first blocks stay resident and never move; gradients stay exact, the predicted peak stays
// in the budget, and the store moves what the planner predicts.
TEST(Offload, PartlyResidentCheckpointsMatchPlainAutogradAndMoveWhatThePlanSays) {
  ScratchDir dir;
  StepOptions so;
  so.scratch_dir = dir.path();
  Graph g = float64_model("tiny", 8);
  const Shape in{2, 384, 352};
  for (Strategy s : {Strategy::kGrid, Strategy::kRows}) {
    PlanOptions o;
    o.strategy = s;
    o.element_bytes = 8;
    o.overrides.checkpoints = every_checkpoint(g, in);
    Plan plan;
    int64_t budget = 0;
    const Segment* partly = nullptr;
    for (int64_t b = int64_t{64} << 20; b > (int64_t{1} << 16) && partly == nullptr;
         b = b * 15 / 16) {
      try {
        plan = make_plan(g, in, b, o);
      } catch (const tessel::Error&) {
        break;
      }
      budget = b;
      for (const Segment& seg : plan.segments) {
        if (seg.tier != Tier::kResident && seg.resident_blocks > 0) partly = &seg;
      }
    }
    ASSERT_NE(partly, nullptr) << to_string(s) << "\n" << to_string(plan, g);
    const Shape& out = plan.shapes[static_cast<size_t>(partly->output)];
    const int64_t bytes = out.channels * out.height * out.width * 8;
    EXPECT_GT(partly->resident_bytes, 0);
    EXPECT_LE(partly->resident_bytes, bytes);
    EXPECT_LE(partly->resident_blocks, partly->blocks.tiles());
    EXPECT_LE(plan.predicted.total(), budget);
    const std::string table = to_string(plan, g);
    EXPECT_NE(table.find("% resident)"), std::string::npos) << table;
    const auto c = compare_with_plain(g, plan, random_image(2, in.height, in.width, 8), 8, so);
    EXPECT_LT(c.worst(), kTolerance) << to_string(s) << "\n" << table << c.to_string();
    EXPECT_NEAR(static_cast<double>(plan.moved_bytes()) / static_cast<double>(c.offload_bytes), 1.0,
                0.15)
        << table;
  }
}

// An offloaded checkpoint whose blocks all stay resident never moves: the passes that read it
// later count its bytes once, as for a resident checkpoint, and nothing of the store for it.
// (The store's share of a pass was bounded by the checkpoint's bytes and counted beside its
// resident blocks: vgg-mini 8192² in 1 GiB predicted 70 MiB above the measured peak.) Checked in
// the backward of the segment after next, which reads neither it nor its gradient.
TEST(Offload, ResidentBlocksAreCountedOnceInThePassesAfterTheirReader) {
  Graph g = float64_model("vgg-mini", 3);
  const Shape in{2, 192, 160};
  PlanOptions o;
  o.strategy = Strategy::kGrid;
  o.element_bytes = 8;
  o.overrides.keep_graphs = false;
  o.overrides.checkpoints = every_checkpoint(g, in);
  auto bytes = [&](const Plan& plan, NodeId v) {
    const Shape& s = plan.shapes[static_cast<size_t>(v)];
    return s.channels * s.height * s.width * 8;
  };
  int checked = 0;
  for (int64_t b = int64_t{64} << 20; b > (int64_t{1} << 18); b = b * 15 / 16) {
    Plan plan;
    try {
      plan = make_plan(g, in, b, o);
    } catch (const tessel::Error&) {
      break;
    }
    ASSERT_EQ(plan.passes.size(), 2 * plan.segments.size());
    int64_t highest = 0;
    for (const MemoryBreakdown& m : plan.passes) highest = std::max(highest, m.total());
    EXPECT_EQ(highest, plan.predicted.total()) << "the predicted peak is the fullest pass's";
    for (size_t i = 0; i + 2 < plan.segments.size(); ++i) {
      const Segment& whole = plan.segments[i];
      const Segment& before = plan.segments[i + 1];
      const Segment& s = plan.segments[i + 2];
      if (whole.tier == Tier::kResident || whole.resident_bytes != bytes(plan, whole.output) ||
          before.tier != Tier::kResident || s.tier != Tier::kResident || s.reduction >= 0) {
        continue;
      }
      // Its output and the output's gradient, its input's gradient, every checkpoint before.
      int64_t expected = 2 * bytes(plan, s.output) + bytes(plan, s.input);
      for (size_t k = 0; k < i + 2; ++k) {
        const Segment& e = plan.segments[k];
        expected += e.tier == Tier::kResident ? bytes(plan, e.output) : e.resident_bytes;
      }
      EXPECT_EQ(plan.passes[2 * (i + 2) + 1].checkpoints, expected)
          << "budget " << format_bytes(b) << ", segment " << i + 2 << "\n"
          << to_string(plan, g);
      ++checked;
    }
  }
  EXPECT_GT(checked, 0) << "no plan kept an offloaded checkpoint wholly resident";
}

// DELTA's decision with measured prices: at a price per byte far above recompute the planner
// drops checkpoints it would offload (and recomputes them from the previous one), at a price
// far below it keeps them in the tier (dropping only those whose recompute costs nothing);
// gradients are exact either way.
TEST(Offload, MeasuredPricesDecideEachCheckpointAndGradientsStayExactEitherWay) {
  ScratchDir dir;
  StepOptions so;
  so.scratch_dir = dir.path();
  // tiny has too few checkpoints for a choice; vgg-mini has five.
  Graph g = float64_model("vgg-mini", 7);
  const Shape in{2, 384, 352};
  auto plan_at = [&](int64_t budget, double seconds_per_byte) {
    PlanOptions o;
    o.strategy = Strategy::kGrid;
    o.element_bytes = 8;
    int calls = 0;
    o.prices.measure = [&calls, seconds_per_byte] {
      ++calls;
      return OffloadPrices{seconds_per_byte, 1e-11, true};
    };
    Plan plan = make_plan(g, in, budget, o);
    EXPECT_LE(calls, 1) << "prices are asked for once";
    EXPECT_EQ(calls == 1, plan.prices.measured) << "and only when offloading is considered";
    return plan;
  };
  auto dropped = [](const Plan& p) {
    return std::count_if(p.decisions.begin(), p.decisions.end(),
                         [](const OffloadDecision& d) { return !d.offload; });
  };
  std::optional<Plan> moving, recomputing;
  for (int64_t b = int64_t{256} << 20; b > (int64_t{1} << 20) && !recomputing; b = b * 31 / 32) {
    try {
      Plan cheap = plan_at(b, 1e-15), dear = plan_at(b, 1.0);
      if (cheap.offloads() && dropped(dear) > dropped(cheap)) {
        moving = std::move(cheap);
        recomputing = std::move(dear);
      }
    } catch (const tessel::Error&) {
      break;
    }
  }
  ASSERT_TRUE(recomputing) << "no budget where the price changes the decision";
  EXPECT_LT(recomputing->checkpoints.size(), moving->checkpoints.size());
  for (const Plan* plan : {&*moving, &*recomputing}) {
    const std::string table = to_string(*plan, g);
    EXPECT_NE(table.find("offload or recompute (DELTA), measured prices"), std::string::npos)
        << table;
    const auto c = compare_with_plain(g, *plan, random_image(2, in.height, in.width, 7), 7, so);
    EXPECT_LT(c.worst(), kTolerance) << table << c.to_string();
  }
  EXPECT_NE(to_string(*recomputing, g).find("dropped, recomputed"), std::string::npos);
}

// Records what the store holds, by tier, at every finished tile.
class TierRecorder : public Observer {
 public:
  void on_memory(const MemorySample& m) override {
    for (const auto& [k, v] : m.by_category) peak[k] = std::max(peak[k], v);
  }
  std::map<std::string, int64_t> peak;
};

TEST(Offload, MemoryEventsCarryTheTiers) {
  MemoryTracker::install();
  ScratchDir dir;
  Graph g = float64_model("tiny", 5);
  PlanOptions o = forced_disk(Strategy::kGrid, 3, 2);
  o.overrides.checkpoints = every_checkpoint(g, {2, 40, 36});
  const Plan plan = make_plan(g, {2, 40, 36}, 0, o);
  TensorTileSource source(random_image(2, 40, 36, 1));
  TierRecorder recorder;
  StepOptions so;
  so.scratch_dir = dir.path();
  so.observer = &recorder;
  const LossFn loss = [](const at::Tensor& logits, const at::Tensor&) { return logits.sum(); };
  train_step(g, plan, source, at::Tensor(), loss, so);
  EXPECT_GT(recorder.peak["disk"], 0);
  EXPECT_EQ(recorder.peak["host"], 0);
  EXPECT_TRUE(recorder.peak.count("store resident"));
  EXPECT_TRUE(recorder.peak.count("in flight"));
}

Plan small_offloaded_plan(Graph& g) {
  g.module().to(test_device(), at::kDouble);
  randomise(g, 5);
  PlanOptions o = forced_disk(Strategy::kGrid, 3, 2);
  o.overrides.checkpoints = every_checkpoint(g, {2, 40, 36});
  return make_plan(g, {2, 40, 36}, 0, o);
}

LossFn sum_loss() {
  return [](const at::Tensor& logits, const at::Tensor&) { return logits.sum(); };
}

TEST(OffloadFaults, AnUnusableScratchDirectoryIsAClearError) {
  ScratchDir dir;
  const fs::path not_a_dir = dir.path() / "a-file";
  std::ofstream(not_a_dir) << "x";
  models::ModelOptions mo;
  mo.in_channels = 2;
  Graph g = models::build_model("tiny", mo);
  const Plan plan = small_offloaded_plan(g);
  ASSERT_TRUE(plan.offloads());
  TensorTileSource source(random_image(2, 40, 36, 1));
  StepOptions so;
  so.scratch_dir = not_a_dir / "scratch";
  try {
    train_step(g, plan, source, at::Tensor(), sum_loss(), so);
    FAIL() << "expected an error";
  } catch (const tessel::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cannot create a scratch file"), std::string::npos) << msg;
    EXPECT_NE(msg.find(so.scratch_dir.string()), std::string::npos) << msg;
  }
  EXPECT_EQ(dir.files(), 1u) << "nothing but the file we made";
}

// Deletes the scratch files when the backward pass starts.
class Deleter : public Observer {
 public:
  explicit Deleter(fs::path dir) : dir_(std::move(dir)) {}
  void on_tile(const TileEvent& e) override {
    if (e.pass != TileEvent::kBackward || done_) return;
    for (const auto& f : fs::directory_iterator(dir_)) fs::remove(f.path());
    done_ = true;
  }

 private:
  fs::path dir_;
  bool done_ = false;
};

TEST(OffloadFaults, AScratchFileDeletedDuringTheStepIsAnErrorNotWrongGradients) {
  ScratchDir dir;
  models::ModelOptions mo;
  mo.in_channels = 2;
  Graph g = models::build_model("tiny", mo);
  const Plan plan = small_offloaded_plan(g);
  TensorTileSource source(random_image(2, 40, 36, 1));
  Deleter deleter(dir.path());
  StepOptions so;
  so.scratch_dir = dir.path();
  so.observer = &deleter;
  try {
    train_step(g, plan, source, at::Tensor(), sum_loss(), so);
    FAIL() << "expected an error";
  } catch (const tessel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("deleted"), std::string::npos) << e.what();
  }
  EXPECT_EQ(dir.files(), 0u);
}

TEST(OffloadFaults, AFullDiskIsAClearErrorAndLeavesNoScratchFile) {
  ScratchDir dir;
  models::ModelOptions mo;
  mo.in_channels = 2;
  Graph g = models::build_model("tiny", mo);
  const Plan plan = small_offloaded_plan(g);
  TensorTileSource source(random_image(2, 40, 36, 1));
  StepOptions so;
  so.scratch_dir = dir.path();
  // A file size limit stands in for a full disk: writes past it fail with EFBIG.
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string msg;
  try {
    train_step(g, plan, source, at::Tensor(), sum_loss(), so);
  } catch (const tessel::Error& e) {
    msg = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(msg.find("is full"), std::string::npos) << "message: " << msg;
  EXPECT_EQ(dir.files(), 0u);
}

}  // namespace
}  // namespace tessel::core

namespace tessel::core {
namespace {

TEST(OffloadPlan, DecideOffloadTakesTheCheaperOfMovingAndRecomputing) {
  const OffloadPrices prices{1e-9, 1e-11, true};  // 1 GB/s against 100 GFLOP/s
  const OffloadDecision move = decide_offload(7, 1000000, 1000000000, prices);
  EXPECT_TRUE(move.offload) << "1 ms of transfer against 10 ms of recompute";
  EXPECT_DOUBLE_EQ(move.offload_s, 1e-3);
  EXPECT_DOUBLE_EQ(move.recompute_s, 1e-2);
  EXPECT_EQ(move.checkpoint, 7);
  const OffloadDecision recompute = decide_offload(7, 1000000, 1000000, prices);
  EXPECT_FALSE(recompute.offload) << "1 ms of transfer against 10 µs of recompute";
  EXPECT_TRUE(decide_offload(7, int64_t{1} << 40, -1, prices).offload)
      << "a checkpoint no plan can do without stays offloaded, whatever it costs";
}

// A resident plan that fits but recomputes much (here one grid segment over the whole network,
// its halos over 5% of the four forwards a step costs) is priced against offloading plans at the
// measured prices: with a cheap tier auto takes the cheaper offloading plan (where the scratch
// directory holds it), with a dear one it keeps the resident plan; where the resident plan
// recomputes little, no offloading is priced and no prices are asked for.
TEST(OffloadPlan, AResidentPlanThatRecomputesMuchIsPricedAgainstOffloading) {
  const Graph g = models::build_model("vgg-mini");
  const Shape in{3, 4096, 4096};
  const int64_t budget = int64_t{40} << 20;
  auto plan_at = [&](const Shape& shape, double seconds_per_byte, int& calls,
                     int64_t disk_free_bytes = -1) {
    PlanOptions o;
    o.strategy = Strategy::kGrid;
    o.prices.measure = [&calls, seconds_per_byte, disk_free_bytes] {
      ++calls;
      // The guess's 100 GFLOP/s.
      return OffloadPrices{seconds_per_byte, 1e-11, true, disk_free_bytes};
    };
    return make_plan(g, shape, budget, o);
  };
  PlanOptions resident_only;
  resident_only.strategy = Strategy::kGrid;
  const Plan resident = make_plan(g, in, budget, resident_only);
  ASSERT_FALSE(resident.offloads()) << to_string(resident, g);
  ASSERT_GT(resident.cost.compute, 1.05 * 4 * static_cast<double>(resident.plain_flops))
      << "the resident plan recomputes much\n"
      << to_string(resident, g);
  int calls = 0;
  const Plan cheap = plan_at(in, 1e-13, calls);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(cheap.offloads()) << to_string(cheap, g);
  EXPECT_LT(cheap.cost.total(), resident.cost.total()) << to_string(cheap, g);
  EXPECT_LT(cheap.tiled_flops, resident.tiled_flops) << "larger tiles, fewer halo FLOPs";
  EXPECT_LE(cheap.predicted.total(), budget);
  // Cheaper, but not where the scratch directory cannot hold it: the resident plan runs.
  calls = 0;
  const int64_t on_disk = stored_bytes(g, cheap, Tier::kDisk);
  ASSERT_GT(on_disk, 0);
  EXPECT_TRUE(plan_at(in, 1e-13, calls, int64_t{1} << 50).offloads());
  EXPECT_FALSE(plan_at(in, 1e-13, calls, on_disk - 1).offloads());
  calls = 0;
  const Plan dear = plan_at(in, 1e-6, calls);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(dear.offloads()) << to_string(dear, g);
  EXPECT_NEAR(dear.cost.total(), resident.cost.total(), 1e-9 * resident.cost.total());
  // A small image whose plan recomputes little: nothing to price, no prices asked for.
  calls = 0;
  const Plan small = plan_at({3, 512, 512}, 1e-13, calls);
  EXPECT_EQ(calls, 0);
  EXPECT_FALSE(small.offloads()) << to_string(small, g);
}

// Pure planning: the budget covers the resident tier only, and every offloaded checkpoint says
// how it is stored and what it moves.
TEST(OffloadPlan, OnlyTheResidentTierCountsAgainstTheBudget) {
  models::ModelOptions mo;
  mo.in_channels = 3;
  const Graph g = models::build_model("vgg-mini", mo);
  const Shape in{3, 2048, 2048};
  // Below the smallest all-resident plan (~30 MiB): only offloading fits.
  const int64_t budget = int64_t{25} << 20;
  PlanOptions o;
  const Plan plan = make_plan(g, in, budget, o);
  ASSERT_TRUE(plan.offloads()) << to_string(plan, g);
  // Where a resident plan fits, nothing is offloaded.
  EXPECT_FALSE(make_plan(g, in, int64_t{80} << 20, o).offloads());
  EXPECT_LE(plan.predicted.total(), budget);
  int64_t offloaded = 0;
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    if (s.tier == Tier::kResident) continue;
    EXPECT_LT(i + 1, plan.segments.size()) << "the head reads the last checkpoint: resident";
    EXPECT_EQ(s.tier, Tier::kDisk) << "a CPU build offloads to disk";
    const Shape& out = plan.shapes[static_cast<size_t>(s.output)];
    offloaded += out.channels * out.height * out.width * 4;
    EXPECT_EQ(s.blocks.y_edges.back(), out.height);
    EXPECT_EQ(s.blocks.x_edges.back(), out.width);
    // Each forward tile fills whole blocks: the block edges refine the tile edges.
    for (int64_t e : s.forward.y_edges) {
      EXPECT_NE(std::find(s.blocks.y_edges.begin(), s.blocks.y_edges.end(), e),
                s.blocks.y_edges.end());
    }
    // Written, read forward and backward, gradient written and read: at least five passes
    // (the resident blocks are neither written nor read back).
    EXPECT_GE(s.moved_bytes, 5 * out.channels * out.height * out.width * 4 - 3 * s.resident_bytes);
    // The gradient's blocks: each is complete after the last backward tile of the next segment
    // that adds to it (their edges refine every tile's input region) and this segment's
    // backward tiles read whole blocks (their edges refine its tile edges).
    const Segment& next = plan.segments[i + 1];
    const Partition& gb = next.input_grad_blocks;
    ASSERT_EQ(gb.y_edges.back(), out.height);
    ASSERT_EQ(gb.x_edges.back(), out.width);
    auto has = [](const std::vector<int64_t>& edges, int64_t e) {
      return std::find(edges.begin(), edges.end(), e) != edges.end();
    };
    for (int64_t t = 0; t < next.backward.tiles(); ++t) {
      const Region r = segment_needs(g, plan.shapes, next.input, next.output,
                                     next.backward.tile(t))[static_cast<size_t>(s.output)];
      EXPECT_TRUE(has(gb.y_edges, r.y.begin) && has(gb.y_edges, r.y.end)) << r;
      EXPECT_TRUE(has(gb.x_edges, r.x.begin) && has(gb.x_edges, r.x.end)) << r;
    }
    for (int64_t e : s.backward.y_edges) EXPECT_TRUE(has(gb.y_edges, e)) << e;
    for (int64_t e : s.backward.x_edges) EXPECT_TRUE(has(gb.x_edges, e)) << e;
  }
  EXPECT_GT(offloaded, 0);
  EXPECT_GT(plan.window_bytes, 0);
  // Offload is what makes this budget fit: without it no plan does.
  o.offload = PlanOptions::Offload::kNever;
  EXPECT_THROW(make_plan(g, in, budget, o), Error);
  // With room for everything, nothing moves.
  EXPECT_FALSE(make_plan(g, in, int64_t{4} << 30, PlanOptions{}).offloads());
}

// Each pass's write-behind is the plan's, or half what the budget (less the headroom) leaves
// free in that pass: the pass plus its writes in flight stays within the budget (the executor
// drains a pass's writes down to the next one's before that starts).
TEST(OffloadPlan, EachPassWritesBehindIntoWhatTheBudgetLeavesFree) {
  models::ModelOptions mo;
  mo.in_channels = 3;
  const Graph g = models::build_model("vgg-mini", mo);
  const Shape in{3, 2048, 2048};
  const int64_t budget = int64_t{25} << 20;
  PlanOptions o;
  Plan plan = make_plan(g, in, budget, o);
  ASSERT_TRUE(plan.offloads()) << to_string(plan, g);
  EXPECT_NE(to_string(plan, g).find("written behind"), std::string::npos);
  const size_t n = plan.segments.size();
  ASSERT_EQ(plan.passes.size(), 2 * n);
  auto behind = [&plan](size_t p) {
    const Segment& s = plan.segments[p / 2];
    return p % 2 == 0 ? s.forward_write_behind : s.backward_write_behind;
  };
  ASSERT_GT(plan.write_behind_bytes, 0);
  for (size_t p = 0; p < 2 * n; ++p) {
    EXPECT_GE(behind(p), plan.write_behind_bytes) << "make_plan sized it";
  }
  // make_plan's tiles fill this budget: each pass has the plan's. A target with room to spare
  // (as bigger tiles and other networks leave) gives each pass half its room.
  const auto target = static_cast<int64_t>(static_cast<double>(budget) * (1.0 - o.headroom));
  for (const int64_t t : {target, target + (int64_t{12} << 20)}) {
    size_write_behind(plan, t);
    int64_t larger = 0;
    for (size_t p = 0; p < 2 * n; ++p) {
      const int64_t room = t - plan.passes[p].total();
      EXPECT_EQ(behind(p), std::max(plan.write_behind_bytes, room / 2)) << "pass " << p;
      EXPECT_LE(plan.passes[p].total() + behind(p),
                std::max(t, plan.passes[p].total() + plan.write_behind_bytes));
      larger += behind(p) > plan.write_behind_bytes;
    }
    if (t > target) {
      EXPECT_EQ(larger, static_cast<int64_t>(2 * n));
    }
  }
  // Without offloading nothing is written.
  const Plan resident = make_plan(g, in, int64_t{80} << 20, PlanOptions{});
  ASSERT_FALSE(resident.offloads());
  for (const Segment& s : resident.segments) {
    EXPECT_EQ(s.forward_write_behind, 0);
    EXPECT_EQ(s.backward_write_behind, 0);
  }
}

}  // namespace
}  // namespace tessel::core
