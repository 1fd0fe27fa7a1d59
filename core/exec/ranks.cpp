#include "core/exec/ranks.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <string>

#include "core/error.h"

namespace tessel::core {

TileRange rank_tiles(int64_t tiles, int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks) {
    throw Error("internal: rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  }
  return {tiles * rank / ranks, tiles * (rank + 1) / ranks};
}

LocalGroup::LocalGroup(int size) : size_(size), posted_(static_cast<size_t>(size), nullptr) {
  if (size < 1) throw Error("internal: a group of " + std::to_string(size) + " ranks");
}

void LocalGroup::abort() {
  const std::scoped_lock lock(mutex_);
  aborted_ = true;
  cv_.notify_all();
}

void LocalGroup::arrive() {
  std::unique_lock lock(mutex_);
  const auto stopped = [&] {
    return Error("another rank of the slide-parallel step failed; this one stops with it");
  };
  if (aborted_) throw stopped();
  const int64_t generation = generation_;
  if (++waiting_ == size_) {
    waiting_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return aborted_ || generation_ != generation; });
  if (generation_ == generation) throw stopped();
}

// Every rank posts its tensors and waits for the others; each sums them in rank order (the same
// sum on every rank), waits until every rank has read every other's, then writes its own.
void LocalRanks::allreduce_sum(const std::vector<at::Tensor>& tensors) {
  at::NoGradGuard no_grad;
  group_.posted_[static_cast<size_t>(rank_)] = &tensors;
  group_.arrive();
  std::vector<at::Tensor> sums;
  sums.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    at::Tensor sum;
    for (int r = 0; r < group_.size(); ++r) {
      const std::vector<at::Tensor>& theirs = *group_.posted_[static_cast<size_t>(r)];
      if (theirs.size() != tensors.size() || !theirs[i].sizes().equals(tensors[i].sizes())) {
        group_.abort();
        throw Error("internal: ranks disagree on a collective's tensors");
      }
      const at::Tensor t = theirs[i].to(tensors[i].device());
      sum = sum.defined() ? sum + t : t.clone();
    }
    sums.push_back(sum);
  }
  group_.arrive();
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(sums[i]);
}

}  // namespace tessel::core
