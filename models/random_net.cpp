// Random networks for the engine's exactness tests (models/zoo.h).
#include <functional>
#include <random>

#include "core/error.h"
#include "models/zoo.h"

namespace tessel::models {

using core::ConvSpec;
using core::Graph;
using core::NodeId;
using core::PoolSpec;
using core::Shape;

namespace {

class Drawer {
 public:
  explicit Drawer(uint64_t seed) : rng_(seed) {}
  int64_t pick(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }

 private:
  std::mt19937_64 rng_;
};

}  // namespace

Graph random_network(uint64_t seed, int64_t min_size, int64_t in_channels) {
  Drawer d(seed);
  Graph g(in_channels);
  NodeId x = g.input();
  int64_t channels = in_channels;
  const Shape probe{in_channels, min_size, min_size};
  // Whether an op with these windows keeps every activation at least 1 px at min_size.
  auto fits = [&](const core::AxisOp& ay, const core::AxisOp& ax) {
    const Shape cur = g.shapes(probe)[static_cast<size_t>(x)];
    return core::output_size(ay, cur.height) >= 1 && core::output_size(ax, cur.width) >= 1;
  };
  const int blocks = static_cast<int>(d.pick(2, 6));
  for (int b = 0; b < blocks; ++b) {
    switch (d.pick(0, 5)) {
      case 0:
      case 1: {  // a conv with every option drawn
        const int64_t out = d.pick(1, 4) * (d.chance(0.3) ? 2 : 1);
        const int64_t ky = d.pick(1, 4), kx = d.chance(0.7) ? ky : d.pick(1, 4);
        int64_t groups = 1;
        if (d.chance(0.25) && channels % 2 == 0 && out % 2 == 0) groups = 2;
        ConvSpec spec = ConvSpec(channels, out, 1)
                            .kernel(ky, kx)
                            .stride(d.pick(1, 3), d.pick(1, 2))
                            .padding(d.pick(0, 3), d.pick(0, 2))
                            .dilation(d.pick(1, 2), d.pick(1, 2))
                            .groups(groups)
                            .bias(d.chance(0.7));
        const core::AxisOp ay{spec.kernel_size[0], spec.stride_[0], spec.padding_[0],
                              spec.dilation_[0], false};
        const core::AxisOp ax{spec.kernel_size[1], spec.stride_[1], spec.padding_[1],
                              spec.dilation_[1], false};
        if (fits(ay, ax)) {
          x = g.conv(x, spec);
          channels = out;
        }
        break;
      }
      case 2: {  // a pool
        const int64_t k = d.pick(1, 3);
        PoolSpec spec =
            PoolSpec(k).stride(d.pick(1, 3)).padding(d.pick(0, k / 2)).ceil_mode(d.chance(0.5));
        const bool max = d.chance(0.5);
        if (max && d.chance(0.3)) spec.dilation(2);
        if (!max) spec.count_include_pad(d.chance(0.5));
        if (!max && d.chance(0.15)) spec.divisor_override(d.pick(1, 5));
        const core::AxisOp ay{spec.kernel_size[0], spec.stride_[0], spec.padding_[0],
                              spec.dilation_[0], spec.ceil_mode_};
        if (fits(ay, ay)) x = max ? g.max_pool(x, spec) : g.avg_pool(x, spec);
        break;
      }
      case 3: {  // pointwise
        switch (d.pick(0, 6)) {
          case 0:
            x = g.relu(x);
            break;
          case 1:
            x = g.leaky_relu(x, 0.1);
            break;
          case 2:
            x = g.gelu(x);
            break;
          case 3:
            x = g.sigmoid(x);
            break;
          case 4:
            x = g.tanh(x);
            break;
          case 5:
            x = g.identity(x);
            break;
          default:
            x = g.frozen_batch_norm(x);
            break;
        }
        break;
      }
      case 4: {  // residual: conv-act-conv + shortcut, same size
        const int64_t k = 2 * d.pick(0, 2) + 1, dil = d.pick(1, 2);
        NodeId y = g.conv(x, ConvSpec(channels, channels, k).padding(dil * (k / 2)).dilation(dil));
        y = g.relu(y);
        y = g.conv(y, ConvSpec(channels, channels, 3).padding(1).bias(d.chance(0.5)));
        x = g.add(y, x);
        break;
      }
      default: {  // two branches joined by concat (one of them a same-size pool)
        const int64_t a = d.pick(1, 3);
        int64_t b = d.pick(1, 3);
        NodeId left = g.conv(x, ConvSpec(channels, a, 3).padding(1));
        NodeId right = d.chance(0.5) ? g.conv(x, ConvSpec(channels, b, 1))
                                     : g.max_pool(x, PoolSpec(3).stride(1).padding(1));
        if (g.node(right).kind == core::OpKind::kMaxPool) b = channels;
        x = g.concat({left, right});
        channels = a + b;
        break;
      }
    }
  }
  switch (d.pick(0, 2)) {
    case 0:
      x = g.linear(g.global_avg_pool(x), d.pick(1, 3));
      break;
    case 1:
      x = g.linear(g.global_max_pool(x), d.pick(1, 3));
      break;
    default:
      break;  // no head: the loss reads the spatial output
  }
  return g;
}

}  // namespace tessel::models
