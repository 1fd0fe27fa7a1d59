#include "io/shrink.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace tessel::io {
namespace {

using core::Window;

// Weights of one axis sum to exactly kOne, so a flat area stays exactly its value.
constexpr int kWeightBits = 14;
constexpr uint32_t kOne = uint32_t{1} << kWeightBits;

// The source pixels output position `x` averages and their fixed-point weights.
struct Taps {
  int64_t first = 0;
  std::vector<uint32_t> weights;
};

Taps taps_of(int64_t x, double scale, int64_t source_size) {
  // Both ends computed as i · scale for the same i everywhere, so neighbours share their edge.
  const double begin = static_cast<double>(x) * scale;
  const double end = std::min(static_cast<double>(x + 1) * scale, static_cast<double>(source_size));
  const Window range = shrink_footprint(Window{x, x + 1}, scale, source_size);
  Taps taps{range.begin, {}};
  if (!(end > begin)) {  // past the source (a 1-pixel output of a tiny source): its last pixel
    taps.weights.assign(static_cast<size_t>(range.size()), 0);
    taps.weights.back() = kOne;
    return taps;
  }
  // Cumulative rounding: weight j is round(kOne·C(j)) − round(kOne·C(j−1)) with C the covered
  // fraction up to the end of pixel j, so the weights add up to kOne exactly.
  uint32_t previous = 0;
  for (int64_t j = range.begin; j < range.end; ++j) {
    const double covered = (std::min(static_cast<double>(j + 1), end) - begin) / (end - begin);
    const uint32_t cumulative =
        j + 1 == range.end ? kOne : static_cast<uint32_t>(std::lround(covered * kOne));
    taps.weights.push_back(cumulative - previous);
    previous = cumulative;
  }
  return taps;
}

}  // namespace

core::Window shrink_footprint(core::Window out, double scale, int64_t source_size) {
  if (out.empty()) return {0, 0};
  const auto begin = static_cast<int64_t>(std::floor(static_cast<double>(out.begin) * scale));
  const auto end = static_cast<int64_t>(std::ceil(static_cast<double>(out.end) * scale));
  const int64_t clipped_begin = std::clamp<int64_t>(begin, 0, source_size - 1);
  return {clipped_begin, std::clamp<int64_t>(end, clipped_begin + 1, source_size)};
}

core::Region shrink_footprint(const core::Region& out, double scale, int64_t source_height,
                              int64_t source_width) {
  return {shrink_footprint(out.y, scale, source_height),
          shrink_footprint(out.x, scale, source_width)};
}

void shrink_rgb(const uint8_t* source, const core::Region& out, double scale, int64_t source_height,
                int64_t source_width, uint8_t* rgb) {
  if (out.empty()) return;
  const core::Region footprint = shrink_footprint(out, scale, source_height, source_width);
  const int64_t fw = footprint.x.size();
  const int64_t ow = out.x.size();
  std::vector<Taps> columns;
  for (int64_t x = out.x.begin; x < out.x.end; ++x) {
    columns.push_back(taps_of(x, scale, source_width));
  }
  // Horizontal pass over every source row of the footprint: values scaled by kOne, exact.
  std::vector<uint32_t> rows(static_cast<size_t>(footprint.y.size() * ow * 3));
  for (int64_t i = 0; i < footprint.y.size(); ++i) {
    const uint8_t* in = source + 3 * i * fw;
    uint32_t* row = rows.data() + 3 * i * ow;
    for (int64_t x = 0; x < ow; ++x) {
      const Taps& taps = columns[static_cast<size_t>(x)];
      uint32_t sum[3] = {0, 0, 0};
      for (size_t k = 0; k < taps.weights.size(); ++k) {
        const uint8_t* p = in + 3 * (taps.first - footprint.x.begin + static_cast<int64_t>(k));
        for (int c = 0; c < 3; ++c) sum[c] += taps.weights[k] * p[c];
      }
      for (int c = 0; c < 3; ++c) row[3 * x + c] = sum[c];
    }
  }
  // Vertical pass: kOne² scale in 64 bits, rounded to nearest.
  constexpr uint64_t kHalf = uint64_t{1} << (2 * kWeightBits - 1);
  for (int64_t y = out.y.begin; y < out.y.end; ++y) {
    const Taps taps = taps_of(y, scale, source_height);
    uint8_t* dst = rgb + 3 * (y - out.y.begin) * ow;
    for (int64_t x = 0; x < 3 * ow; ++x) {
      uint64_t sum = 0;
      for (size_t k = 0; k < taps.weights.size(); ++k) {
        const int64_t i = taps.first - footprint.y.begin + static_cast<int64_t>(k);
        sum += uint64_t{taps.weights[k]} * rows[static_cast<size_t>(3 * i * ow + x)];
      }
      const uint64_t value = (sum + kHalf) >> (2 * kWeightBits);
      assert(value <= 255);
      dst[x] = static_cast<uint8_t>(value);
    }
  }
}

}  // namespace tessel::io
