#include "core/exec/gradcheck.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/module.h>

#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/exec/ranks.h"
#include "core/graph/fill.h"
#include "core/tile_source.h"

namespace tessel::core {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// What keeps a tensor from being compared: a NaN or an infinity in it ("" when none).
std::string non_finite(const at::Tensor& t) {
  if (!t.defined() || t.numel() == 0 || !t.is_floating_point()) return "";
  const at::Tensor d = t.detach();
  if (d.isnan().any().item<bool>()) return "NaN";
  if (d.isinf().any().item<bool>()) return "inf";
  return "";
}

}  // namespace

double Comparison::worst() const {
  double worst = 0;
  for (const Quantity& q : quantities) {
    if (!q.ok() || std::isnan(q.max_error)) return kInfinity;
    worst = std::max(worst, q.max_error);
  }
  return worst;
}

const Quantity* Comparison::worst_quantity() const {
  const Quantity* worst = nullptr;
  for (const Quantity& q : quantities) {
    if (!q.ok() || std::isnan(q.max_error)) return &q;
    if (worst == nullptr || q.max_error > worst->max_error) worst = &q;
  }
  return worst;
}

const Quantity* Comparison::find(const std::string& name) const {
  for (const Quantity& q : quantities) {
    if (q.name == name) return &q;
  }
  return nullptr;
}

std::string Comparison::faults() const {
  std::string out;
  for (const Quantity& q : quantities) {
    if (!q.ok()) out += q.name + ": " + q.fault + "\n";
  }
  return out;
}

std::string Comparison::to_string() const {
  std::ostringstream os;
  os << faults();
  for (const Quantity& q : quantities) {
    os << q.name << ": " << q.max_error << " (norm-wise " << q.norm_error << ")";
    if (q.floored) os << ", its reference (near) zero: judged against " << q.floor;
    os << "\n";
  }
  if (const Quantity* w = worst_quantity()) os << "worst: " << w->name << " " << worst() << "\n";
  return os.str();
}

double least_tolerance(Precision precision) {
  switch (precision) {
    case Precision::kTf32:
      return 4 * std::ldexp(1.0, -11);
    case Precision::kBf16:
      return 4 * std::ldexp(1.0, -8);
    case Precision::kFloat32:
      break;
  }
  return 1e-4;
}

double bar_error(const Quantity& q, Precision precision) {
  if (!q.ok()) return kInfinity;
  const double e = precision == Precision::kFloat32 ? q.max_error : q.norm_error;
  return std::isnan(e) ? kInfinity : e;
}

double bar_for(const Quantity& q, const Comparison& floor, Precision precision,
               const Comparison& tiled_floor) {
  const Quantity* own = floor.find(q.name);
  if (own == nullptr || !own->ok()) return 0;  // nothing to judge it against: it fails
  const double least = least_tolerance(precision);
  const double plain = bar_error(*own, precision);
  if (!std::isfinite(plain)) return 0;
  double e = plain;
  if (!tiled_floor.quantities.empty()) {
    const Quantity* tiled = tiled_floor.find(q.name);
    if (tiled == nullptr) return 0;
    const double t = bar_error(*tiled, precision);
    if (!(t <= std::max(least, kTiledRounding * plain))) return 0;
    e = std::max(e, t);
  }
  return std::max(least, 2 * e);
}

const Quantity* tightest(const Comparison& c, const Comparison& floor, Precision precision,
                         const Comparison& tiled_floor) {
  const Quantity* tight = nullptr;
  double most = -1;
  for (const Quantity& q : c.quantities) {
    const double bar = bar_for(q, floor, precision, tiled_floor);
    const double e = bar_error(q, precision);
    const double ratio = bar > 0 ? e / bar : kInfinity;
    if (std::isnan(ratio) || ratio > most) {
      most = std::isnan(ratio) ? kInfinity : ratio;
      tight = &q;
    }
  }
  return tight;
}

bool within_rounding(const Comparison& c, const Comparison& floor, Precision precision,
                     const Comparison& tiled_floor) {
  if (c.quantities.empty()) return false;
  for (const Quantity& q : c.quantities) {
    if (!(bar_error(q, precision) <= bar_for(q, floor, precision, tiled_floor))) return false;
  }
  return true;
}

double norm_relative_error(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return kInfinity;
  double difference = 0, reference = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].defined() && !b[i].defined()) continue;
    if (!a[i].defined() || !b[i].defined() || a[i].sizes() != b[i].sizes()) return kInfinity;
    const at::Tensor bd = b[i].detach().to(at::kDouble);
    difference += (a[i].detach().to(at::kDouble) - bd).square().sum().item<double>();
    reference += bd.square().sum().item<double>();
  }
  // A NaN in either side makes both sums NaN, and the quotient NaN: never below a bar.
  return std::sqrt(difference) / std::max(std::sqrt(reference), 1e-30);
}

double relative_error(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() && !b.defined()) return 0;
  if (!a.defined() || !b.defined()) return kInfinity;
  if (a.sizes() != b.sizes()) return kInfinity;
  if (a.numel() == 0) return 0;
  const at::Tensor ad = a.detach().to(at::kDouble), bd = b.detach().to(at::kDouble);
  // at::max propagates NaN; std::max(NaN, x) is NaN only when NaN is its first argument.
  const double scale = bd.abs().max().item<double>();
  const double difference = (ad - bd).abs().max().item<double>();
  if (std::isnan(scale) || std::isnan(difference)) return std::nan("");
  return difference / std::max(scale, 1e-30);
}

void randomise(Graph& graph, uint64_t seed) {
  graph.init_parameters(seed);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed + 1);
  at::NoGradGuard no_grad;
  for (auto& p : graph.module().named_parameters()) {
    if (p.key().find(".bias") != std::string::npos) fill_normal(p.value(), 0.0, 0.5, gen);
    // Per-channel weights (batch norm, scale, channel norm) around 1.
    if (p.value().dim() == 1 && p.key().find(".weight") != std::string::npos) {
      fill_uniform(p.value(), 0.5, 1.5, gen);
    }
  }
  for (auto& b : graph.module().named_buffers()) {
    if (b.key().find("running_var") != std::string::npos) fill_uniform(b.value(), 0.5, 2.0, gen);
    if (b.key().find("running_mean") != std::string::npos) fill_normal(b.value(), 0.0, 0.3, gen);
  }
}

namespace {

using Named = std::vector<std::pair<std::string, at::Tensor>>;

struct Outcome {
  StepResult step;
  Named grads;
  Named buffers;  // after the step
};

Named buffers_of(Graph& graph) {
  Named out;
  for (auto& b : graph.module().named_buffers()) out.emplace_back(b.key(), b.value().clone());
  return out;
}

void restore_buffers(Graph& graph, const Named& saved) {
  at::NoGradGuard no_grad;
  size_t i = 0;
  for (auto& b : graph.module().named_buffers()) b.value().copy_(saved.at(i++).second);
}

Outcome run(Graph& graph, const Plan& plan, const at::Tensor& image, const LossFn& loss,
            const StepOptions& options, const Background* background) {
  for (auto& p : graph.module().parameters()) p.mutable_grad() = at::Tensor();
  TensorTileSource source(image);
  if (background != nullptr) source.set_background(*background);
  Outcome o;
  o.step = train_step(graph, plan, source, at::Tensor(), loss, options);
  for (auto& p : graph.module().named_parameters()) {
    o.grads.emplace_back(
        p.key(), p.value().grad().defined() ? p.value().grad().clone() : at::zeros_like(p.value()));
  }
  o.buffers = buffers_of(graph);
  return o;
}

// The loss both steps of a check use: a fixed random projection of the output, drawn in float64
// on the CPU, so a float32 and a float64 step see the same projection, rounded. Linear in the
// output, so no gradient vanishes: cross-entropy saturated for resnet34's large random logits
// (float32 loss exactly 0, gradients all rounding, 1.8e-4 apart on a GPU).
struct CheckLoss {
  at::Tensor projection;
  CheckLoss(const Graph& graph, const Plan& plan, uint64_t seed, c10::Device device,
            at::ScalarType dtype) {
    const auto& out = plan.shapes.back();
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed + 7);
    const bool spatial = graph.node(graph.output()).spatial();
    projection = (spatial ? at::randn({1, out.channels, out.height, out.width}, gen, at::kDouble)
                          : at::randn({1, out.channels}, gen, at::kDouble))
                     .to(device, dtype);
  }
  LossFn fn() const {
    return
        [this](const at::Tensor& logits, const at::Tensor&) { return (logits * projection).sum(); };
  }
  // The loss's scale without cancellation, Σ|projection × output|: a loss whose terms cancel
  // to near zero is judged against it.
  double scale(const at::Tensor& logits) const {
    if (!logits.defined()) return 0;
    return (logits.detach().to(at::kDouble) * projection.to(at::kDouble))
        .abs()
        .sum()
        .item<double>();
  }
};

// Where a graph's steps run: its parameters' device (the image's for a network without any).
c10::Device device_of(Graph& graph, const at::Tensor& image) {
  for (const auto& p : graph.module().parameters()) return p.device();
  return image.device();
}

Plan plain_of(const Plan& plan) {
  Plan plain = plan;
  plain.strategy = Strategy::kNone;
  plain.segments.clear();
  return plain;
}

// Quantity `name` of tensor `a` (tiled, or the reduced precision) against `b` (plain, or the
// float64 reference, compared in a's dtype), its reference raised to `floor`.
Quantity quantity(const std::string& name, const at::Tensor& a, const at::Tensor& b, double floor) {
  Quantity q;
  q.name = name;
  if (a.defined() != b.defined()) {
    q.fault = a.defined() ? "only in the tiled step" : "missing from the tiled step";
    return q;
  }
  if (!a.defined()) return q;
  if (a.sizes() != b.sizes()) {
    q.fault = "shapes differ";
    return q;
  }
  if (const std::string bad = non_finite(a); !bad.empty()) q.fault = bad + " in the tiled step";
  if (const std::string bad = non_finite(b); !bad.empty() && q.ok()) {
    q.fault = bad + " in the plain step";
  }
  if (!q.ok() || a.numel() == 0) return q;
  const at::Tensor ad = a.detach().to(at::kDouble);
  // Rounded to a's dtype first: a float32 step against float64 is judged on what float32 holds.
  const at::Tensor bd = b.detach().to(a.scalar_type()).to(at::kDouble);
  const double scale = bd.abs().max().item<double>();
  q.floor = floor;
  q.floored = scale < floor;
  q.max_error = (ad - bd).abs().max().item<double>() / std::max({scale, floor, 1e-30});
  const double norm = bd.square().sum().item<double>();
  const double norm_floor = floor * std::sqrt(static_cast<double>(a.numel()));
  q.norm_error = std::sqrt((ad - bd).square().sum().item<double>()) /
                 std::max({std::sqrt(norm), norm_floor, 1e-30});
  return q;
}

// Quantities named `prefix` + name, matched by position and name; a name on one side only, or
// a count that differs, is a fault.
void add_named(Comparison& c, const std::string& prefix, const Named& a, const Named& b,
               double floor) {
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (i >= a.size() || i >= b.size() || a[i].first != b[i].first) {
      Quantity q;
      q.name = prefix + (i < a.size() ? a[i].first : b[i].first);
      q.fault = "the two steps have different " + prefix + "sets (" + std::to_string(a.size()) +
                " tiled, " + std::to_string(b.size()) + " plain)";
      c.quantities.push_back(q);
      continue;
    }
    c.quantities.push_back(quantity(prefix + a[i].first, a[i].second, b[i].second, floor));
  }
}

// The step's gradient scale: the largest |b| over the reference's parameter and image gradients.
double gradient_scale(const Outcome& reference) {
  double scale = 0;
  const auto grow = [&](const at::Tensor& t) {
    if (!t.defined() || t.numel() == 0 || !non_finite(t).empty()) return;
    scale = std::max(scale, t.detach().abs().max().item<double>());
  };
  for (const auto& [name, g] : reference.grads) grow(g);
  grow(reference.step.input_grad);
  return scale;
}

// Where the image has a background, its gradient there is compared as a sum per channel, and
// pixel by pixel elsewhere. A max pool's window inside the uniform region holds values equal in
// exact arithmetic: plain routes its gradient to the one its rounding makes largest, the tiled
// step to another, and both are the gradient. Every position such a window reads has its cone in
// the background, so the choice moves the image's gradient only within the background and keeps
// its sum there (and every parameter's gradient: those positions share one Jacobian).
void add_input_grad(Comparison& c, const Outcome& a, const Outcome& b, double zero,
                    const Background* background) {
  const at::Tensor& ga = a.step.input_grad;
  const at::Tensor& gb = b.step.input_grad;
  if (background == nullptr || !ga.defined() || !gb.defined() || ga.sizes() != gb.sizes()) {
    c.quantities.push_back(quantity("input gradient", ga, gb, zero));
    return;
  }
  const at::Tensor glass = background_pixels(*background).to(ga.device());
  const auto off = [&](const at::Tensor& g) { return g.masked_fill(glass, 0); };
  const auto sum = [&](const at::Tensor& g) {
    return g.masked_fill(glass.logical_not(), 0).sum({2, 3}, false, at::kDouble);
  };
  c.quantities.push_back(quantity("input gradient", off(ga), off(gb), zero));
  c.quantities.push_back(quantity("input gradient's sum over the background", sum(ga), sum(gb),
                                  zero * static_cast<double>(background->cells.area())));
}

Comparison compare(const Outcome& a, const Outcome& b, double loss_scale,
                   const Background* background = nullptr) {
  const double zero = kZeroScale * gradient_scale(b);
  Comparison c;
  c.quantities.push_back(quantity("loss", a.step.loss, b.step.loss, kZeroScale * loss_scale));
  c.quantities.push_back(quantity("output", a.step.logits, b.step.logits, 0));
  if (a.step.input_grad.defined() || b.step.input_grad.defined()) {
    add_input_grad(c, a, b, zero, background);
  }
  add_named(c, "gradient of ", a.grads, b.grads, zero);
  add_named(c, "buffer ", a.buffers, b.buffers, 0);
  return c;
}

// The step options of both steps of a check of `plan`: the image's gradient as the plan was
// made for; a fault and the ranks for the tiled step only.
StepOptions check_options(const Plan& plan, StepOptions options, bool tiled) {
  if (options.input_gradient && !plan.input_gradient) {
    throw Error(
        "internal: the check asks for the image's gradient, the plan was made without it "
        "(PlanOptions::input_gradient)");
  }
  options.input_gradient = plan.input_gradient;
  if (!tiled) {
    options.inject = Fault::kNone;
    options.ranks = nullptr;
  }
  return options;
}

}  // namespace

bool tiles(const Plan& plan) {
  for (const Segment& s : plan.segments) {
    if (s.forward.tiles() > 1 || s.backward.tiles() > 1) return true;
  }
  return false;
}

namespace {

// `c` with what the tiled step `tiled` moved, summed over ranks and skipped as glass.
Comparison with_counts(Comparison c, const Outcome& tiled) {
  c.offload_bytes = tiled.step.offload.written_bytes + tiled.step.offload.read_bytes;
  c.summed_bytes = tiled.step.summed_bytes;
  c.glass_forward_tiles = tiled.step.glass_forward_tiles;
  c.glass_backward_tiles = tiled.step.glass_backward_tiles;
  c.glass_filled = tiled.step.glass_filled;
  return c;
}

}  // namespace

Comparison compare_with_plain(Graph& graph, const Plan& plan, const at::Tensor& image_anywhere,
                              uint64_t seed, const StepOptions& options,
                              const Background* background) {
  const c10::Device device = device_of(graph, image_anywhere);
  const at::Tensor image = image_anywhere.to(device);
  const CheckLoss loss(graph, plan, seed, device, image.scalar_type());
  // Both steps start from the same running statistics (batch norm in training updates them).
  const Named before = buffers_of(graph);
  const Outcome tiled =
      run(graph, plan, image, loss.fn(), check_options(plan, options, true), background);
  restore_buffers(graph, before);
  const Outcome reference =
      run(graph, plain_of(plan), image, loss.fn(), check_options(plan, options, false), nullptr);
  return with_counts(compare(tiled, reference, loss.scale(reference.step.logits), background),
                     tiled);
}

std::vector<Comparison> compare_split_with_plain(const std::vector<Graph*>& replicas,
                                                 const Plan& plan, const at::Tensor& image_anywhere,
                                                 uint64_t seed, const StepOptions& options,
                                                 const Background* background) {
  if (replicas.empty()) throw Error("internal: a split check without ranks");
  Graph& first = *replicas.front();
  const c10::Device device = device_of(first, image_anywhere);
  const at::Tensor image = image_anywhere.to(device);
  const CheckLoss loss(first, plan, seed, device, image.scalar_type());
  const Named before = buffers_of(first);
  LocalGroup group(static_cast<int>(replicas.size()));
  std::vector<Outcome> split(replicas.size());
  std::mutex mutex;
  std::exception_ptr failed;  // the first rank's to fail (the others then stop with it)
  {
    std::vector<std::jthread> threads;
    for (size_t r = 0; r < replicas.size(); ++r) {
      threads.emplace_back([&, r] {
        try {
          LocalRanks ranks(group, static_cast<int>(r));
          StepOptions o = check_options(plan, options, true);
          o.ranks = &ranks;
          split[r] = run(*replicas[r], plan, image, loss.fn(), o, background);
        } catch (...) {
          const std::scoped_lock lock(mutex);
          if (!failed) failed = std::current_exception();
          group.abort();
        }
      });
    }
  }
  if (failed) std::rethrow_exception(failed);
  restore_buffers(first, before);
  const Outcome reference =
      run(first, plain_of(plan), image, loss.fn(), check_options(plan, options, false), nullptr);
  std::vector<Comparison> out;
  for (const Outcome& o : split) {
    out.push_back(
        with_counts(compare(o, reference, loss.scale(reference.step.logits), background), o));
  }
  return out;
}

Comparison compare_rank_with_plain(Graph& graph, const Plan& plan, const at::Tensor& image_anywhere,
                                   uint64_t seed, const StepOptions& options,
                                   const Background* background) {
  if (options.ranks == nullptr) throw Error("internal: a rank's check without its ranks");
  const c10::Device device = device_of(graph, image_anywhere);
  const at::Tensor image = image_anywhere.to(device);
  const CheckLoss loss(graph, plan, seed, device, image.scalar_type());
  const Named before = buffers_of(graph);
  const Outcome split =
      run(graph, plan, image, loss.fn(), check_options(plan, options, true), background);
  restore_buffers(graph, before);
  const Outcome reference =
      run(graph, plain_of(plan), image, loss.fn(), check_options(plan, options, false), nullptr);
  return with_counts(compare(split, reference, loss.scale(reference.step.logits), background),
                     split);
}

PrecisionCheck check_in_precision(Graph& graph, const Plan& plan, const at::Tensor& image_anywhere,
                                  uint64_t seed, const StepOptions& options,
                                  const Background* background) {
  const c10::Device device = device_of(graph, image_anywhere);
  const at::Tensor image = image_anywhere.to(device);
  const at::ScalarType dtype = image.scalar_type();
  const Plan plain = plain_of(plan);
  const Named before = buffers_of(graph);
  const auto step = [&](const Plan& p, const at::Tensor& x, at::ScalarType t, bool tiled) {
    restore_buffers(graph, before);
    StepOptions o = check_options(plan, options, tiled);
    if (t == at::kDouble) o.precision = Precision::kFloat32;
    return run(graph, p, x, CheckLoss(graph, plan, seed, device, t).fn(), o,
               tiled ? background : nullptr);
  };
  const Outcome tiled_low = step(plan, image, dtype, true);
  const Outcome plain_low = step(plain, image, dtype, false);
  // The same weights and running statistics in float64 (each float32 value is exact in
  // float64), then back.
  graph.module().to(at::kDouble);
  const at::Tensor exact_image = image.to(at::kDouble);
  const Outcome tiled_exact = step(plan, exact_image, at::kDouble, true);
  const Outcome plain_exact = step(plain, exact_image, at::kDouble, false);
  graph.module().to(dtype);
  restore_buffers(graph, before);
  for (auto& p : graph.module().parameters()) p.mutable_grad() = at::Tensor();  // float64 grads
  const CheckLoss loss(graph, plan, seed, device, at::kDouble);
  PrecisionCheck check;
  check.tiled_vs_plain =
      compare(tiled_low, plain_low, loss.scale(plain_exact.step.logits), background);
  check.tiled_vs_plain.offload_bytes =
      tiled_low.step.offload.written_bytes + tiled_low.step.offload.read_bytes;
  check.plain_floor =
      compare(plain_low, plain_exact, loss.scale(plain_exact.step.logits), background);
  check.tiled_floor =
      compare(tiled_low, tiled_exact, loss.scale(tiled_exact.step.logits), background);
  check.exact = compare(tiled_exact, plain_exact, loss.scale(plain_exact.step.logits), background);
  check.tiled_vs_plain.glass_forward_tiles = tiled_low.step.glass_forward_tiles;
  check.tiled_vs_plain.glass_backward_tiles = tiled_low.step.glass_backward_tiles;
  check.tiled_vs_plain.glass_filled = tiled_low.step.glass_filled;
  return check;
}

namespace {

// A smooth random field over rows × cols cells: normal noise on a grid of about 4 × 4 steps
// (blobs a quarter of the image across, as tissue fragments on a slide), bilinearly upsampled.
at::Tensor smooth_field(int64_t rows, int64_t cols, at::Generator& gen) {
  const int64_t step = std::max<int64_t>(2, std::min(rows, cols) / 4);
  const int64_t coarse_rows = rows / step + 2, coarse_cols = cols / step + 2;
  const at::Tensor coarse = at::randn({1, 1, coarse_rows, coarse_cols}, gen, at::kDouble);
  return at::upsample_bilinear2d(coarse, {rows, cols}, /*align_corners=*/false).view({rows, cols});
}

// Bridges one cell wide across the field: a few rows and columns set to `value` over a random
// stretch.
void add_bridges(at::Tensor& glass, bool value, at::Generator& gen) {
  const int64_t rows = glass.size(0), cols = glass.size(1);
  const at::Tensor picks = at::randint(1 << 20, {8}, gen, at::kLong);
  const auto pick = [&](int i, int64_t n) {
    return picks[i].item<int64_t>() % std::max<int64_t>(1, n);
  };
  for (int i = 0; i < 2; ++i) {
    const int64_t r = pick(4 * i, rows), c0 = pick(4 * i + 1, cols);
    glass[r].slice(0, c0, std::min(cols, c0 + cols / 2 + 1)).fill_(value);
    const int64_t c = pick(4 * i + 2, cols), r0 = pick(4 * i + 3, rows);
    glass.select(1, c).slice(0, r0, std::min(rows, r0 + rows / 2 + 1)).fill_(value);
  }
}

}  // namespace

Background synthetic_background(const Shape& shape, int64_t cell, double fraction, uint64_t seed) {
  if (cell < 1) throw Error("background cells must be at least one pixel");
  if (!(fraction >= 0 && fraction <= 1)) {
    throw Error("a background fraction is between 0 and 1, got " + std::to_string(fraction));
  }
  const int64_t rows = (shape.height + cell - 1) / cell, cols = (shape.width + cell - 1) / cell;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed * 2654435761ULL + 17);
  at::Tensor glass = at::zeros({rows, cols}, at::kBool);
  if (fraction >= 1) {
    glass.fill_(true);
  } else if (fraction > 0) {
    const at::Tensor field = smooth_field(rows, cols, gen);
    const int64_t k = std::clamp<int64_t>(
        static_cast<int64_t>(fraction * static_cast<double>(rows * cols)), 1, rows * cols);
    const double level = std::get<0>(field.flatten().kthvalue(k)).item<double>();
    glass = field <= level;
    add_bridges(glass, /*value=*/false, gen);
    add_bridges(glass, /*value=*/true, gen);
  }
  Background b;
  const at::Tensor flags = glass.to(at::kByte).flatten().contiguous();
  b.cells = CellMask::grid(
      shape.height, shape.width, cell,
      std::vector<uint8_t>(flags.data_ptr<uint8_t>(), flags.data_ptr<uint8_t>() + flags.numel()));
  // Held exactly by float32 images too.
  const at::Tensor colour = (at::rand({shape.channels}, gen, at::kDouble) * 2 - 1).to(at::kFloat);
  for (int64_t c = 0; c < shape.channels; ++c) b.value.push_back(colour[c].item<float>());
  return b;
}

at::Tensor background_pixels(const Background& background) {
  const CellMask& cells = background.cells;
  at::Tensor mask = at::zeros({1, 1, cells.height(), cells.width()}, at::kBool);
  for (int64_t r = 0; r < cells.rows(); ++r) {
    for (int64_t c = 0; c < cells.cols(); ++c) {
      if (!cells.cell_in(r, c)) continue;
      const Region x = cells.cell(r, c);
      mask.slice(2, x.y.begin, x.y.end).slice(3, x.x.begin, x.x.end).fill_(true);
    }
  }
  return mask;
}

at::Tensor paint_background(const at::Tensor& image, const Background& background) {
  const at::Tensor colour = at::tensor(background.value, at::TensorOptions().dtype(at::kDouble))
                                .view({1, -1, 1, 1})
                                .to(image.options());
  return at::where(background_pixels(background).to(image.device()), colour, image);
}

}  // namespace tessel::core
