#include "pipelines/distributed.h"

// The c10d headers; LibTorch's CMake package sets USE_C10D_GLOO (Debian's is built with Gloo),
// without which they hide the Gloo process group. No other file includes them.
#include <ATen/ATen.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <optional>

#include "core/error.h"
#include "pipelines/nccl_backend.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX, no header declares it

namespace tessel::pipelines {
namespace {

std::optional<std::string> lookup(const Environment& env, const std::string& key) {
  const auto it = env.find(key);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

int whole_number(const std::string& key, const std::string& value) {
  size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size()) {
    throw Error("environment variable " + key + "='" + value + "' is not a whole number");
  }
  return n;
}

// A launcher's variables: rank and size must come together; the local rank may be missing.
struct Launcher {
  const char* name;
  const char* rank;
  const char* size;
  const char* local_rank;
};
constexpr Launcher kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

// "01-04" or "7" inside brackets → the numbers, zero-padded to the width of the lower bound.
void expand_range(const std::string& range, const std::string& nodelist,
                  std::vector<std::string>& out) {
  const size_t dash = range.find('-');
  const std::string lo = range.substr(0, dash);
  const std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
  const auto digits = [](const std::string& s) {
    return !s.empty() && s.size() < 10 &&
           std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
  };
  if (!digits(lo) || !digits(hi) || std::stol(hi) < std::stol(lo)) {
    throw Error("SLURM node list '" + nodelist + "': bad range '" + range + "'");
  }
  for (long n = std::stol(lo); n <= std::stol(hi); ++n) {
    std::string number = std::to_string(n);
    if (number.size() < lo.size()) number.insert(0, lo.size() - number.size(), '0');
    out.push_back(number);
  }
}

// One host pattern (no top-level comma), each bracket group expanded in turn.
void expand_host(const std::string& pattern, const std::string& nodelist,
                 std::vector<std::string>& out) {
  const size_t open = pattern.find('[');
  if (open == std::string::npos) {
    if (pattern.find(']') != std::string::npos) {
      throw Error("SLURM node list '" + nodelist + "': unbalanced brackets");
    }
    out.push_back(pattern);
    return;
  }
  const size_t close = pattern.find(']', open);
  if (close == std::string::npos) {
    throw Error("SLURM node list '" + nodelist + "': unbalanced brackets");
  }
  const std::string prefix = pattern.substr(0, open);
  const std::string rest = pattern.substr(close + 1);
  const std::string inside = pattern.substr(open + 1, close - open - 1);
  std::vector<std::string> numbers;
  size_t begin = 0;
  while (true) {
    const size_t comma = inside.find(',', begin);
    expand_range(inside.substr(begin, comma - begin), nodelist, numbers);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  for (const std::string& n : numbers) expand_host(prefix + n + rest, nodelist, out);
}

}  // namespace

Environment process_environment() {
  Environment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string item(*e);
    const size_t eq = item.find('=');
    if (eq != std::string::npos) env[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return env;
}

std::vector<std::string> expand_nodelist(const std::string& nodelist) {
  std::vector<std::string> hosts;
  int depth = 0;
  size_t begin = 0;
  for (size_t i = 0; i <= nodelist.size(); ++i) {
    const char c = i < nodelist.size() ? nodelist[i] : ',';
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) {
      throw Error("SLURM node list '" + nodelist + "': unbalanced brackets");
    }
    if (c == ',' && depth == 0) {
      if (i == begin) throw Error("SLURM node list '" + nodelist + "': an empty host name");
      expand_host(nodelist.substr(begin, i - begin), nodelist, hosts);
      begin = i + 1;
    }
  }
  if (depth != 0) throw Error("SLURM node list '" + nodelist + "': unbalanced brackets");
  return hosts;
}

int rank_gpu(const std::string& device_setting, int local_rank, int gpus) {
  if ((device_setting != "auto" && device_setting != "cuda") || gpus < 1) return -1;
  return local_rank % gpus;
}

DistributedEnv distributed_env(const Environment& env, bool need_master) {
  DistributedEnv d;
  const Launcher* launcher = nullptr;
  for (const Launcher& l : kLaunchers) {
    const bool has_rank = lookup(env, l.rank).has_value();
    const bool has_size = lookup(env, l.size).has_value();
    if (has_rank != has_size) {
      throw Error(std::string("incomplete ") + l.name +
                  " environment: " + (has_rank ? l.rank : l.size) + " is set but " +
                  (has_rank ? l.size : l.rank) + " is not");
    }
    if (has_rank && launcher == nullptr) launcher = &l;
  }
  if (launcher == nullptr) {
    throw Error(
        "--distributed needs a launcher's environment: torchrun's RANK and WORLD_SIZE, Open MPI's "
        "OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE (mpirun), or SLURM's SLURM_PROCID and "
        "SLURM_NTASKS (srun); none is set (docs/distributed.md)");
  }
  d.source = launcher->name;
  d.rank = whole_number(launcher->rank, *lookup(env, launcher->rank));
  d.world_size = whole_number(launcher->size, *lookup(env, launcher->size));
  if (const auto local = lookup(env, launcher->local_rank)) {
    d.local_rank = whole_number(launcher->local_rank, *local);
  }
  if (d.world_size < 1) {
    throw Error(std::string(launcher->size) + "=" + std::to_string(d.world_size) +
                ": a job has at least one process");
  }
  if (d.rank < 0 || d.rank >= d.world_size) {
    throw Error(std::string(launcher->rank) + "=" + std::to_string(d.rank) + " is outside " +
                launcher->size + "=" + std::to_string(d.world_size) + " (ranks are 0 to " +
                std::to_string(d.world_size - 1) + ")");
  }
  if (d.local_rank < 0 || d.local_rank > d.rank) {
    throw Error(std::string(launcher->local_rank) + "=" + std::to_string(d.local_rank) +
                " contradicts " + launcher->rank + "=" + std::to_string(d.rank) +
                " (a local rank is between 0 and the global rank)");
  }

  const auto addr = lookup(env, "MASTER_ADDR");
  const auto port = lookup(env, "MASTER_PORT");
  if (addr) {
    d.master_addr = *addr;
  } else if (d.source == "slurm") {
    const auto nodes = lookup(env, "SLURM_JOB_NODELIST");
    const auto fallback = lookup(env, "SLURM_NODELIST");
    if (nodes || fallback) d.master_addr = expand_nodelist(nodes ? *nodes : *fallback).front();
  }
  d.master_port = port ? whole_number("MASTER_PORT", *port) : 29500;
  if (need_master) {
    if (d.master_addr.empty()) {
      throw Error(std::string("the ") + d.source +
                  " environment does not name rank 0's host: set MASTER_ADDR (and MASTER_PORT), "
                  "or use --rendezvous file:///shared/path");
    }
    if (d.source == "torchrun" && !port) {
      throw Error("incomplete torchrun environment: MASTER_ADDR is set but MASTER_PORT is not");
    }
    if (d.master_port < 1 || d.master_port > 65535) {
      throw Error("MASTER_PORT=" + std::to_string(d.master_port) + " is not a TCP port");
    }
  }
  return d;
}

struct Communicator::Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;  // Gloo's or NCCL's process group
  bool staged = false;  // NCCL: host tensors go through the rank's CUDA device
};

namespace {

std::chrono::milliseconds milliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace

namespace {

// Every c10d call goes through here: its failure becomes a message that says what happened.
template <typename Call>
void collective(const std::string& what, const DistributedEnv& env,
                const DistributedOptions& options, Call&& call) {
  const auto fail = [&](const std::string& reason) {
    return Error(fmt::format(
        "distributed {} failed on rank {} of {}{} (timeout {} s, --dist-timeout): {} — a rank "
        "died, was stopped or never started; this rank stops too. The last checkpoint is intact: "
        "continue with --resume once every rank can run",
        what, env.rank, env.world_size, env.group.empty() ? "" : " in " + env.group,
        options.timeout_seconds, reason));
  };
  try {
    call();
  } catch (const c10::Error& e) {
    throw fail(e.what_without_backtrace());  // what() adds LibTorch's stack trace
  } catch (const std::exception& e) {
    throw fail(e.what());
  }
}

}  // namespace

Communicator::Communicator(const DistributedEnv& env, const DistributedOptions& options)
    : env_(env), options_(options), group_(std::make_unique<Group>()) {
  const auto timeout = milliseconds(options_.timeout_seconds);
  const std::string file_prefix = "file://";
  const bool file = options_.rendezvous.starts_with(file_prefix);
  if (!file && !options_.rendezvous.empty() && options_.rendezvous != "env://") {
    throw Error("--rendezvous '" + options_.rendezvous +
                "': expected env:// (MASTER_ADDR:MASTER_PORT) or file:///shared/path");
  }
  const std::string where =
      file ? options_.rendezvous : fmt::format("tcp://{}:{}", env_.master_addr, env_.master_port);
  spdlog::info("distributed: rank {} of {} (local rank {}, from the {} environment), rendezvous {}",
               env_.rank, env_.world_size, env_.local_rank, env_.source, where);
  collective("rendezvous at " + where, env_, options_, [&] {
    if (file) {
      group_->store = c10::make_intrusive<c10d::FileStore>(
          options_.rendezvous.substr(file_prefix.size()), env_.world_size);
    } else {
      c10d::TCPStoreOptions store_options;
      store_options.port = static_cast<uint16_t>(env_.master_port);
      store_options.isServer = env_.rank == 0;
      store_options.numWorkers = static_cast<size_t>(env_.world_size);
      store_options.waitWorkers = true;
      store_options.timeout = timeout;
      group_->store = c10::make_intrusive<c10d::TCPStore>(env_.master_addr, store_options);
    }
    group_->store->setTimeout(timeout);
  });
  join(where);
}

Communicator::Communicator(const DistributedEnv& env, const DistributedOptions& options,
                           std::unique_ptr<Group> group)
    : env_(env), options_(options), group_(std::move(group)) {
  join(env_.group);
}

void Communicator::join(const std::string& where) {
  const auto timeout = milliseconds(options_.timeout_seconds);
  if (options_.backend == "nccl") {
    if (!at::hasCUDA()) {
      throw Error(
          "--dist-backend nccl: this machine has no CUDA GPU, and NCCL runs collectives between "
          "GPUs; use --dist-backend gloo");
    }
    collective("NCCL rendezvous at " + where, env_, options_, [&] {
      group_->backend = make_nccl_backend(group_->store, env_.rank, env_.world_size, timeout);
    });
    group_->staged = true;
    return;
  }
  if (options_.backend != "gloo") {
    throw Error("--dist-backend '" + options_.backend + "': expected gloo or nccl");
  }
  collective("rendezvous at " + where, env_, options_, [&] {
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(timeout);
    // GLOO_SOCKET_IFNAME picks the network interface as in PyTorch; else this host's name.
    const Environment process = process_environment();
    const auto interface = process.find("GLOO_SOCKET_IFNAME");
    gloo_options->devices.push_back(
        interface != process.end() && !interface->second.empty()
            ? c10d::ProcessGroupGloo::createDeviceForInterface(interface->second)
            : c10d::ProcessGroupGloo::createDefaultDevice());
    gloo_options->threads = 2;
    group_->backend = c10::make_intrusive<c10d::ProcessGroupGloo>(group_->store, env_.rank,
                                                                  env_.world_size, gloo_options);
  });
}

std::unique_ptr<Communicator> Communicator::subgroup(int size) const {
  if (size < 1 || env_.world_size % size != 0) {
    throw Error(fmt::format("groups of {} rank(s) do not divide the {} ranks of the job", size,
                            env_.world_size));
  }
  const int index = env_.rank / size;
  DistributedEnv env = env_;
  env.rank = env_.rank % size;
  env.world_size = size;
  env.group = fmt::format("slide group {} of {} (ranks {}-{})", index + 1, env_.world_size / size,
                          index * size, index * size + size - 1);
  auto group = std::make_unique<Group>();
  group->store =
      c10::make_intrusive<c10d::PrefixStore>(fmt::format("group{}/", index), group_->store);
  // NOLINTNEXTLINE(cppcoreguidelines-owning-memory): the constructor is private
  return std::unique_ptr<Communicator>(new Communicator(env, options_, std::move(group)));
}

Communicator::~Communicator() = default;

namespace {

// Consecutive tensors of one dtype, up to `bucket_bytes` (a larger tensor makes its own bucket).
std::vector<std::vector<at::Tensor>> buckets_of(const std::vector<at::Tensor>& tensors,
                                                int64_t bucket_bytes) {
  std::vector<std::vector<at::Tensor>> buckets;
  int64_t bytes = 0;
  for (const at::Tensor& t : tensors) {
    const int64_t size = t.numel() * static_cast<int64_t>(t.element_size());
    if (buckets.empty() || buckets.back().front().scalar_type() != t.scalar_type() ||
        bytes + size > bucket_bytes) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(t);
    bytes += size;
  }
  return buckets;
}

at::Tensor flatten(const std::vector<at::Tensor>& bucket) {
  std::vector<at::Tensor> flat;
  flat.reserve(bucket.size());
  for (const at::Tensor& t : bucket) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& bucket) {
  int64_t offset = 0;
  for (const at::Tensor& t : bucket) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace

// What a collective is handed: `t` itself, or under NCCL a host tensor's copy on the rank's CUDA
// device (copied back by unstage).
at::Tensor Communicator::stage(const at::Tensor& t) const {
  return group_->staged && !t.is_cuda() ? t.to(at::kCUDA) : t;
}

void Communicator::unstage(const at::Tensor& staged, const at::Tensor& t) const {
  if (!staged.is_same(t)) t.copy_(staged);
}

void Communicator::allreduce_sum(const std::vector<at::Tensor>& tensors, int64_t bucket_bytes) {
  const auto timeout = milliseconds(options_.timeout_seconds);
  const std::vector<std::vector<at::Tensor>> buckets = buckets_of(tensors, bucket_bytes);
  std::vector<at::Tensor> flats, hosts;  // as reduced (staged under NCCL), and here
  std::vector<bool> copied;              // by bucket: summed in a flat copy, to be copied back
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  collective("allreduce", env_, options_, [&] {
    for (const auto& bucket : buckets) {
      // A bucket of one dense tensor (a checkpoint, in any memory format) is summed where it
      // lies: a flat view of its memory, the same layout on every rank, instead of a copy there
      // and back (two passes over a checkpoint of hundreds of megabytes).
      const at::Tensor& first = bucket.front();
      const bool in_place = bucket.size() == 1 && first.is_non_overlapping_and_dense();
      const at::Tensor host = in_place ? first.as_strided({first.numel()}, {1}) : flatten(bucket);
      std::vector<at::Tensor> flat{stage(host)};
      copied.push_back(!in_place);
      c10d::AllreduceOptions reduce;
      reduce.reduceOp = c10d::ReduceOp::SUM;
      reduce.timeout = timeout;
      works.push_back(group_->backend->allreduce(flat, reduce));
      hosts.push_back(host);
      flats.push_back(flat.front());
    }
    for (const auto& work : works) work->wait(timeout);
  });
  for (size_t b = 0; b < buckets.size(); ++b) {
    unstage(flats[b], hosts[b]);
    if (copied[b]) unflatten(hosts[b], buckets[b]);
  }
}

void Communicator::allgather(const at::Tensor& mine, const std::vector<at::Tensor>& all) {
  const auto timeout = milliseconds(options_.timeout_seconds);
  // One broadcast from each rank in turn, not Gloo's all-gather: between two local processes
  // its all-gather of 128 MiB a rank took 320–920 ms where two broadcasts took 75 ms
  // (bench/NOTES.md, session 63). Broadcasts also take device tensors where Gloo has CUDA
  // support (its all-gather is host only). Every `all[q]` has `mine`'s size and is contiguous.
  all[static_cast<size_t>(env_.rank)].copy_(mine);
  for (size_t q = 0; q < all.size(); ++q) {
    std::vector<at::Tensor> one{stage(all[q])};
    collective("all-gather", env_, options_, [&] {
      c10d::BroadcastOptions from;
      from.rootRank = static_cast<int64_t>(q);
      from.timeout = timeout;
      group_->backend->broadcast(one, from)->wait(timeout);
    });
    unstage(one.front(), all[q]);
  }
}

void Communicator::broadcast(const std::vector<at::Tensor>& tensors) {
  const auto timeout = milliseconds(options_.timeout_seconds);
  for (const auto& bucket : buckets_of(tensors, int64_t{25} << 20)) {
    const at::Tensor host = flatten(bucket);
    std::vector<at::Tensor> flat{stage(host)};
    collective("broadcast", env_, options_, [&] {
      c10d::BroadcastOptions from_rank0;
      from_rank0.rootRank = 0;
      from_rank0.timeout = timeout;
      group_->backend->broadcast(flat, from_rank0)->wait(timeout);
    });
    unstage(flat.front(), host);
    unflatten(host, bucket);
  }
}

void Communicator::barrier() {
  const auto timeout = milliseconds(options_.timeout_seconds);
  collective("barrier", env_, options_, [&] {
    c10d::BarrierOptions options;
    options.timeout = timeout;
    group_->backend->barrier(options)->wait(timeout);
  });
}

}  // namespace tessel::pipelines
