// One slide's step split over ranks (issue 54, docs/slide-parallel.md): the collectives a
// slide-parallel step needs, and which rank runs which tile. The engine sees only `Ranks`;
// pipelines/ implements it over c10d for processes, `LocalRanks` here over threads of one process
// (tests; one process driving several devices).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/plan/rank_tiles.h"

namespace at {
class Tensor;
}  // namespace at

namespace tessel::core {

// This rank's place in a group of ranks that share one step. Every call is collective: every rank
// makes the same calls in the same order, with tensors of the same shapes and dtypes.
class Ranks {
 public:
  virtual ~Ranks() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sums each tensor over the ranks, in place; every rank ends with the same values (summed in
  // the same order on every rank).
  virtual void allreduce_sum(const std::vector<at::Tensor>& tensors) = 0;
  // Every rank's `mine` (a flat tensor of the same size and dtype on every rank) into `all[q]`
  // for rank q, this rank's own included.
  virtual void allgather(const at::Tensor& mine, const std::vector<at::Tensor>& all) = 0;
};

// Ranks as threads of one process: `LocalGroup` is what they share, each thread holds its own
// `LocalRanks`. A rank that fails calls `abort`, so the others' collectives throw instead of
// waiting for it forever.
class LocalGroup {
 public:
  explicit LocalGroup(int size);
  int size() const { return size_; }
  void abort();

 private:
  friend class LocalRanks;
  // Waits until every rank has arrived (a cyclic barrier); throws tessel::Error once aborted.
  void arrive();
  int size_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int waiting_ = 0;
  int64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<const std::vector<at::Tensor>*> posted_;  // each rank's tensors in a collective
};

class LocalRanks : public Ranks {
 public:
  LocalRanks(LocalGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }
  void allreduce_sum(const std::vector<at::Tensor>& tensors) override;
  void allgather(const at::Tensor& mine, const std::vector<at::Tensor>& all) override;

 private:
  LocalGroup& group_;
  int rank_;
};

}  // namespace tessel::core
