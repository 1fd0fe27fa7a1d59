// Random networks for the engine's exactness tests (models/zoo.h).
#include <functional>
#include <limits>
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

Graph random_network(uint64_t seed, int64_t min_size, int64_t in_channels, bool barriers) {
  Drawer d(seed);
  // Barriers come from their own stream, so the network around them is the one without.
  Drawer b_draw(seed * 6364136223846793005ULL + 1442695040888963407ULL);
  Graph g(in_channels);
  NodeId x = g.input();
  int64_t channels = in_channels;
  const Shape probe{in_channels, min_size, min_size};
  // Maybe a barrier after a nonlinearity on `at`: batch norm where it sees at least 8
  // positions per channel at min_size (fewer make a statistic so ill-conditioned that plain
  // float64 itself rounds to ~1e-6), group norm with 2+ channels per group, or SE.
  auto maybe_barrier = [&](NodeId at, double p) {
    if (!barriers || !b_draw.chance(p)) return at;
    const Shape s = g.shapes(probe)[static_cast<size_t>(at)];
    const int64_t c = g.node(at).channels;
    const int64_t kind = b_draw.pick(0, 2);
    auto act = [&](NodeId v) { return b_draw.chance(0.5) ? g.relu(v) : g.tanh(v); };
    at = act(at);
    // A norm is followed by a nonlinearity: with only linear ops to the global average pool
    // the loss would not depend on the normalised values (their mean is 0), and the gradients
    // before the norm would be exactly 0 in plain and tiled alike.
    if (kind == 0 && s.height * s.width >= 8) return act(g.batch_norm(at));
    if (kind == 1 && c % 2 == 0 && c * s.height * s.width >= 16) {
      return act(g.group_norm(at, b_draw.chance(0.5) ? c / 2 : 1));
    }
    core::SqueezeSpec se;
    se.squeeze_channels = b_draw.pick(1, 3);
    se.activation = b_draw.chance(0.5) ? core::Pointwise::kRelu : core::Pointwise::kSilu;
    if (b_draw.chance(0.5)) se.gate = core::Pointwise::kHardSigmoid;
    return g.squeeze_excite(at, se);
  };
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
        if (d.chance(0.3)) {  // each side its own padding (ONNX pads, TensorFlow's SAME)
          spec.padding(d.pick(0, 3), d.pick(0, 2), d.pick(0, 3), d.pick(0, 2));
        }
        const core::AxisOp ay{spec.kernel_size[0], spec.stride_[0], spec.padding_[0],
                              spec.dilation_[0],   false,           spec.padding_end_[0]};
        const core::AxisOp ax{spec.kernel_size[1], spec.stride_[1], spec.padding_[1],
                              spec.dilation_[1],   false,           spec.padding_end_[1]};
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
        if (!spec.ceil_mode_ && d.chance(0.3)) {
          spec.padding(d.pick(0, k / 2), d.pick(0, k / 2), d.pick(0, k / 2), d.pick(0, k / 2));
        }
        const core::AxisOp ay{spec.kernel_size[0], spec.stride_[0], spec.padding_[0],
                              spec.dilation_[0],   spec.ceil_mode_, spec.padding_end_[0]};
        const core::AxisOp ax{spec.kernel_size[1], spec.stride_[1], spec.padding_[1],
                              spec.dilation_[1],   spec.ceil_mode_, spec.padding_end_[1]};
        if (fits(ay, ax)) x = max ? g.max_pool(x, spec) : g.avg_pool(x, spec);
        break;
      }
      case 3: {  // pointwise
        switch (d.pick(0, 15)) {
          case 7:
            x = g.gelu_tanh(x);
            break;
          case 8:
            x = g.silu(x);
            break;
          case 9:
            x = g.hard_sigmoid(x, 1.0 / 6.0, 0.5);
            break;
          case 10:
            x = g.hard_swish(x);
            break;
          case 11:
            x = g.clamp(x, -0.5, d.chance(0.5) ? 6.0 : std::numeric_limits<double>::infinity());
            break;
          case 12:
            x = g.erf(x);
            break;
          case 13:
            x = g.scalar(x, 0.7, -0.2);
            break;
          case 14:
            x = g.scale(x, d.chance(0.5));
            break;
          case 15:
            x = g.channel_norm(x, 1e-6);
            break;
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
        y = maybe_barrier(g.relu(y), 0.5);
        y = g.conv(y, ConvSpec(channels, channels, 3).padding(1).bias(d.chance(0.5)));
        switch (d.pick(0, 3)) {
          case 0:
            x = g.add(y, x);
            break;
          case 1:
            x = g.binary(y, x, core::Binary::kSub);
            break;
          case 2:
            x = g.binary(y, x, core::Binary::kMul);
            break;
          default:  // by a denominator in [0.5, 1.5]
            x = g.binary(x, g.scalar(g.sigmoid(y), 1.0, 0.5), core::Binary::kDiv);
            break;
        }
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
    x = maybe_barrier(x, 0.4);
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
