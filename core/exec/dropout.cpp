#include "core/exec/dropout.h"

#include <ATen/ATen.h>

#include <cmath>

namespace tessel::core {

namespace {

thread_local bool active = false;
thread_local uint64_t step_seed = 0;

constexpr int64_t kLow32 = 0xFFFFFFFF;

// (h · m) mod 2³² for 0 ≤ h, m < 2³², in int64 without overflow: h's two 16-bit halves apart.
at::Tensor mul32(const at::Tensor& h, int64_t m) {
  const at::Tensor low = at::bitwise_and(h, 0xFFFF) * m;
  const at::Tensor high = at::bitwise_and(at::bitwise_right_shift(h, 16) * m, 0xFFFF);
  return at::bitwise_and(low + at::bitwise_left_shift(high, 16), kLow32);
}

// murmur3's 32-bit finaliser (Appleby): every input bit reaches every output bit.
at::Tensor fmix32(at::Tensor h) {
  h = at::bitwise_xor(h, at::bitwise_right_shift(h, 16));
  h = mul32(h, 0x85EBCA6B);
  h = at::bitwise_xor(h, at::bitwise_right_shift(h, 13));
  h = mul32(h, 0xC2B2AE35);
  return at::bitwise_xor(h, at::bitwise_right_shift(h, 16));
}

uint64_t fmix32(uint64_t h) {
  h &= kLow32;
  h ^= h >> 16;
  h = (h * 0x85EBCA6B) & kLow32;
  h ^= h >> 13;
  h = (h * 0xC2B2AE35) & kLow32;
  return h ^ (h >> 16);
}

}  // namespace

DropoutScope::DropoutScope(uint64_t seed) : previous_active_(active), previous_seed_(step_seed) {
  active = true;
  step_seed = seed;
}

DropoutScope::~DropoutScope() {
  active = previous_active_;
  step_seed = previous_seed_;
}

at::Tensor dropout_keep(uint64_t seed, int64_t node, double p, int64_t channels,
                        const Region& region, const at::Device& device) {
  // The seed's two halves and the node, then channel, row and column, each mixed in turn.
  const uint64_t start = fmix32(fmix32(fmix32(seed) ^ (seed >> 32)) ^ static_cast<uint64_t>(node));
  const at::TensorOptions longs = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor h = at::arange(channels, longs).view({channels, 1, 1});
  h = fmix32(at::bitwise_xor(h, static_cast<int64_t>(start)));
  h = fmix32(at::bitwise_xor(h, at::arange(region.y.begin, region.y.end, longs).view({1, -1, 1})));
  h = fmix32(at::bitwise_xor(h, at::arange(region.x.begin, region.x.end, longs).view({1, 1, -1})));
  // Kept when the hash, uniform on [0, 2³²), is at least p · 2³².
  const auto threshold = static_cast<int64_t>(std::llround(p * 4294967296.0));
  return at::ge(h, threshold);
}

at::Tensor spatial_dropout(const Node& dropout, const at::Tensor& x, const Region& region) {
  if (!active || dropout.dropout_p <= 0) return x;
  const at::Tensor keep =
      dropout_keep(step_seed, dropout.id, dropout.dropout_p, x.size(1), region, x.device());
  return x * (keep.to(x.scalar_type()) * (1.0 / (1.0 - dropout.dropout_p))).unsqueeze(0);
}

}  // namespace tessel::core
