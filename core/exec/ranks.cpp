#include "core/exec/ranks.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <string>

#include "core/error.h"

namespace tessel::core {

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

// Every rank posts its tensor and waits for the others; each copies every rank's, then waits
// until every rank has read its own before the next collective can replace it.
void LocalRanks::allgather(const at::Tensor& mine, const std::vector<at::Tensor>& all) {
  at::NoGradGuard no_grad;
  const std::vector<at::Tensor> posted{mine};
  group_.posted_[static_cast<size_t>(rank_)] = &posted;
  group_.arrive();
  if (static_cast<int>(all.size()) != group_.size()) {
    group_.abort();
    throw Error("internal: an all-gather into " + std::to_string(all.size()) + " tensors for " +
                std::to_string(group_.size()) + " ranks");
  }
  for (int r = 0; r < group_.size(); ++r) {
    const at::Tensor& theirs = group_.posted_[static_cast<size_t>(r)]->front();
    if (!theirs.sizes().equals(mine.sizes())) {
      group_.abort();
      throw Error("internal: ranks disagree on an all-gather's size");
    }
    all[static_cast<size_t>(r)].copy_(theirs);
  }
  group_.arrive();
}

}  // namespace tessel::core
