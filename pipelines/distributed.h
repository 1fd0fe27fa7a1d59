// Data-parallel training across processes and nodes (`tessel train --distributed`,
// docs/distributed.md): who this process is, read from whichever launcher started it (torchrun,
// SLURM, Open MPI), the rendezvous, and the few collectives training needs. LibTorch's c10d
// process group (Gloo) does the communication; its headers stay in distributed.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/exec/ranks.h"

namespace at {
class Tensor;
}  // namespace at

namespace tessel::pipelines {

// This process's place in the job.
struct DistributedEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;       // on its node
  std::string master_addr;  // rank 0's host, where the TCP rendezvous listens
  int master_port = 0;
  std::string source;  // the launcher the values came from: "torchrun", "openmpi" or "slurm"
  // A group within the job (Communicator::subgroup): its name in errors, e.g. "slide group 1 of
  // 2 (ranks 2-3)"; empty for the whole job.
  std::string group;
};

using Environment = std::map<std::string, std::string>;

// This process's environment variables.
Environment process_environment();

// Reads the launcher's variables; torchrun's RANK/WORLD_SIZE win over Open MPI's, which win over
// SLURM's (torchrun and mpirun are often started inside a SLURM allocation). MASTER_ADDR and
// MASTER_PORT override the address SLURM and Open MPI would imply; without them SLURM's is the
// first host of SLURM_JOB_NODELIST and the port 29500. Throws tessel::Error naming the variables
// for no launcher at all, a partial set, a value that is not a number, or a rank outside the job.
// `need_master`: the TCP rendezvous needs MASTER_ADDR (a file rendezvous does not).
DistributedEnv distributed_env(const Environment& env, bool need_master = true);

// SLURM's compressed host list: "node[01-04,07],gpu5" → node01 … node04, node07, gpu5. Throws
// tessel::Error for unbalanced brackets or a bad range.
std::vector<std::string> expand_nodelist(const std::string& nodelist);

// The GPU a rank takes on its node: with the device setting "auto" or "cuda" (no index), GPU
// local_rank mod `gpus` (one rank per GPU, as torchrun and srun start them; ranks beyond the
// GPUs share them in turn); -1 where the setting names its own ("cuda:N", "cpu") or there is no
// GPU.
int rank_gpu(const std::string& device_setting, int local_rank, int gpus);

struct DistributedOptions {
  // "env://" (or empty): a TCP store on MASTER_ADDR:MASTER_PORT, served by rank 0;
  // "file:///shared/path": a file store on a file system every rank sees.
  std::string rendezvous = "env://";
  double timeout_seconds = 300;  // every rendezvous and collective; a dead rank fails the others
  // "gloo" (TCP; CPU tensors, and CUDA ones through the host) or "nccl" (ranks on GPUs, each its
  // own: host tensors are staged on the rank's current CUDA device).
  std::string backend = "gloo";
};

// One process group for the run. Every call is collective: every rank makes the same calls in the
// same order, and a rank that died or stopped answering makes the others throw tessel::Error
// (naming the rank count and the timeout) instead of hanging.
// It is also the engine's core::Ranks for a step split over the ranks (slide-parallel,
// docs/slide-parallel.md).
class Communicator : public core::Ranks {
 public:
  Communicator(const DistributedEnv& env, const DistributedOptions& options);
  ~Communicator() override;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const override { return env_.rank; }
  int size() const override { return env_.world_size; }
  int world_size() const { return env_.world_size; }
  int local_rank() const { return env_.local_rank; }

  // Sums each tensor over the ranks, in place. Contiguous tensors of one dtype are packed into flat
  // buckets of at most `bucket_bytes` that are reduced concurrently (few large messages instead of
  // one per parameter).
  void allreduce_sum(const std::vector<at::Tensor>& tensors, int64_t bucket_bytes);
  void allreduce_sum(const std::vector<at::Tensor>& tensors) override {
    allreduce_sum(tensors, int64_t{25} << 20);
  }
  void allgather(const at::Tensor& mine, const std::vector<at::Tensor>& all) override;
  // The consecutive ranks [g·size, (g+1)·size) that hold this one, as a group of their own
  // (parallel: hybrid, where each group shares a slide): rank and size within it. Every rank
  // calls it with the same size, which must divide the rank count; the groups rendezvous on this
  // group's store, each under its own prefix.
  std::unique_ptr<Communicator> subgroup(int size) const;
  // Rank 0's values into every rank's tensors, in place.
  void broadcast(const std::vector<at::Tensor>& tensors);
  void barrier();

 private:
  struct Group;
  Communicator(const DistributedEnv& env, const DistributedOptions& options,
               std::unique_ptr<Group> group);
  void join(const std::string& where);  // the process group, on group_'s store
  at::Tensor stage(const at::Tensor& t) const;
  void unstage(const at::Tensor& staged, const at::Tensor& t) const;
  DistributedEnv env_;
  DistributedOptions options_;
  std::unique_ptr<Group> group_;
};

}  // namespace tessel::pipelines
