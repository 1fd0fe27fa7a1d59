#include "core/exec/attention.h"

#include <ATen/ATen.h>

#include <limits>
#include <utility>
#include <vector>

#include "core/error.h"

namespace tessel::core {

namespace {

// The scores (B×n) and the features (C×n) of x (1×(B+C)×h×w), positions row-major.
std::pair<at::Tensor, at::Tensor> scores_and_features(const at::Tensor& x, int64_t branches) {
  const at::Tensor flat = x.flatten(2)[0];
  return {flat.narrow(0, 0, branches), flat.narrow(0, branches, flat.size(0) - branches)};
}

}  // namespace

at::Tensor attention_pool_plain(const Node& pool, const at::Tensor& x) {
  const auto [scores, features] = scores_and_features(x, pool.branches);
  const at::Tensor alpha = at::softmax(scores, 1);
  return at::matmul(alpha, features.t()).reshape({1, -1});
}

at::Tensor attention_weights(const at::Tensor& scores) {
  return at::softmax(scores.flatten(2), 2).view_as(scores);
}

AttentionStream::AttentionStream(const Node& pool, const at::TensorOptions& options)
    : branches_(pool.branches) {
  const at::TensorOptions f64 = options.dtype(at::kDouble);
  max_ = at::full({branches_}, -std::numeric_limits<double>::infinity(), f64);
  sum_ = at::zeros({branches_}, f64);
  acc_ = at::zeros({branches_, pool.channels / branches_}, f64);
}

void AttentionStream::add(const at::Tensor& x) {
  if (x.numel() == 0) return;
  const auto [scores, features] = scores_and_features(x.to(at::kDouble), branches_);
  // Rescaled to the new running maximum: exp(s − m) ≤ 1, and exp(−∞ − m) = 0 at the start.
  const at::Tensor m = at::maximum(max_, std::get<0>(scores.max(1)));
  const at::Tensor rescale = at::exp(max_ - m);
  const at::Tensor e = at::exp(scores - m.unsqueeze(1));
  sum_ = sum_ * rescale + e.sum(1);
  acc_ = acc_ * rescale.unsqueeze(1) + at::matmul(e, features.t());
  max_ = m;
}

int64_t AttentionStream::merge_ranks(Ranks& ranks) {
  const int64_t b = branches_;
  const at::Tensor mine = at::cat({max_, sum_, acc_.flatten()});
  std::vector<at::Tensor> all;
  for (int q = 0; q < ranks.size(); ++q) all.push_back(at::empty_like(mine));
  ranks.allgather(mine, all);
  max_ = all[0].narrow(0, 0, b).clone();
  for (const at::Tensor& theirs : all) max_ = at::maximum(max_, theirs.narrow(0, 0, b));
  sum_.zero_();
  acc_.zero_();
  for (const at::Tensor& theirs : all) {
    // A rank without positions has max −∞ and sums 0: its rescale exp(−∞ − m) is 0.
    const at::Tensor rescale = at::exp(theirs.narrow(0, 0, b) - max_);
    sum_ += theirs.narrow(0, b, b) * rescale;
    acc_ += theirs.narrow(0, 2 * b, acc_.numel()).view_as(acc_) * rescale.unsqueeze(1);
  }
  return static_cast<int64_t>(mine.nbytes());
}

at::Tensor AttentionStream::pooled(at::ScalarType dtype) {
  if (!(sum_ > 0).all().item<bool>()) {
    throw Error("attention pooling: no position was added (an empty feature map)");
  }
  pooled_ = acc_ / sum_.unsqueeze(1);
  return pooled_.reshape({1, -1}).to(dtype);
}

at::Tensor AttentionStream::surrogate(const at::Tensor& x, const at::Tensor& grad) const {
  if (!pooled_.defined()) throw Error("internal: the attention's backward before its forward");
  const at::Tensor g = grad.detach().to(at::kDouble).reshape({branches_, -1});
  const at::Tensor gz = (g * pooled_).sum(1, /*keepdim=*/true);  // g_b · z_b
  const auto [scores, features] = scores_and_features(x.to(at::kDouble), branches_);
  const at::Tensor alpha = at::exp(scores - max_.unsqueeze(1)) / sum_.unsqueeze(1);
  return (alpha * (at::matmul(g, features) - gz)).sum();
}

}  // namespace tessel::core
