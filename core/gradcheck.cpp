#include "core/gradcheck.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <sstream>

#include "core/tile_source.h"

namespace tessel::core {

std::string Comparison::to_string() const {
  std::ostringstream os;
  os << "loss " << loss << ", logits " << logits << ", input grad " << input_grad
     << ", worst parameter grad " << worst_param << " (" << worst_param_name
     << "); norm-wise: output " << output_norm << ", input grad " << input_grad_norm
     << ", parameter grads " << params_norm;
  if (!worst_buffer_name.empty()) {
    os << "; running statistics " << worst_buffer << " (" << worst_buffer_name << ")";
  }
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

bool within_rounding(const Comparison& c, const Comparison& floor, Precision precision) {
  const double least = least_tolerance(precision);
  if (precision == Precision::kFloat32) return c.worst() <= std::max(least, 2 * floor.worst());
  const auto ok = [least](double error, double own) { return error <= std::max(least, 2 * own); };
  return ok(c.output_norm, floor.output_norm) && ok(c.input_grad_norm, floor.input_grad_norm) &&
         ok(c.params_norm, floor.params_norm);
}

double norm_relative_error(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double difference = 0, reference = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].defined() && !b[i].defined()) continue;
    if (!a[i].defined() || !b[i].defined() || a[i].sizes() != b[i].sizes()) return 1e300;
    const at::Tensor bd = b[i].to(at::kDouble);
    difference += (a[i].to(at::kDouble) - bd).square().sum().item<double>();
    reference += bd.square().sum().item<double>();
  }
  return std::sqrt(difference) / std::max(std::sqrt(reference), 1e-30);
}

double relative_error(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() && !b.defined()) return 0;
  if (!a.defined() || !b.defined()) return 1e300;
  if (a.sizes() != b.sizes()) return 1e300;
  if (a.numel() == 0) return 0;
  const double scale = std::max(b.abs().max().item<double>(), 1e-30);
  return (a - b).abs().max().item<double>() / scale;
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

struct Outcome {
  StepResult step;
  std::vector<std::pair<std::string, at::Tensor>> grads;
  std::vector<std::pair<std::string, at::Tensor>> buffers;  // after the step
};

std::vector<std::pair<std::string, at::Tensor>> buffers_of(Graph& graph) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& b : graph.module().named_buffers()) out.emplace_back(b.key(), b.value().clone());
  return out;
}

void restore_buffers(Graph& graph, const std::vector<std::pair<std::string, at::Tensor>>& saved) {
  at::NoGradGuard no_grad;
  size_t i = 0;
  for (auto& b : graph.module().named_buffers()) b.value().copy_(saved.at(i++).second);
}

Outcome run(Graph& graph, const Plan& plan, const at::Tensor& image, const LossFn& loss,
            StepOptions options) {
  for (auto& p : graph.module().parameters()) p.mutable_grad() = at::Tensor();
  TensorTileSource source(image);
  options.input_gradient = true;
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

// relative_error of `a` against `b` in a's dtype (b may be the float64 reference).
double error_in_dtype_of(const at::Tensor& a, const at::Tensor& b) {
  return relative_error(a, a.defined() && b.defined() ? b.to(a.scalar_type()) : b);
}

Comparison compare(const Outcome& a, const Outcome& b) {
  Comparison c;
  c.loss = error_in_dtype_of(a.step.loss, b.step.loss);
  c.logits = error_in_dtype_of(a.step.logits, b.step.logits);
  c.input_grad = error_in_dtype_of(a.step.input_grad, b.step.input_grad);
  std::vector<at::Tensor> grads_a, grads_b;
  for (size_t i = 0; i < a.grads.size(); ++i) {
    const double e = error_in_dtype_of(a.grads[i].second, b.grads[i].second);
    if (e >= c.worst_param) {
      c.worst_param = e;
      c.worst_param_name = a.grads[i].first;
    }
    grads_a.push_back(a.grads[i].second);
    grads_b.push_back(b.grads[i].second);
  }
  for (size_t i = 0; i < a.buffers.size() && i < b.buffers.size(); ++i) {
    const double e = error_in_dtype_of(a.buffers[i].second, b.buffers[i].second);
    if (e >= c.worst_buffer) {
      c.worst_buffer = e;
      c.worst_buffer_name = a.buffers[i].first;
    }
  }
  c.output_norm = norm_relative_error({a.step.logits}, {b.step.logits});
  c.input_grad_norm = norm_relative_error({a.step.input_grad}, {b.step.input_grad});
  c.params_norm = norm_relative_error(grads_a, grads_b);
  return c;
}

}  // namespace

Comparison compare_with_plain(Graph& graph, const Plan& plan, const at::Tensor& image_anywhere,
                              uint64_t seed, const StepOptions& options) {
  const c10::Device device = device_of(graph, image_anywhere);
  const at::Tensor image = image_anywhere.to(device);
  const CheckLoss loss(graph, plan, seed, device, image.scalar_type());
  // Both steps start from the same running statistics (batch norm in training updates them).
  const auto before = buffers_of(graph);
  const Outcome tiled = run(graph, plan, image, loss.fn(), options);
  restore_buffers(graph, before);
  const Outcome reference = run(graph, plain_of(plan), image, loss.fn(), options);
  Comparison c = compare(tiled, reference);
  c.offload_bytes = tiled.step.offload_written_bytes + tiled.step.offload_read_bytes;
  return c;
}

Comparison rounding_of_plain(Graph& graph, const Plan& plan, const at::Tensor& image_anywhere,
                             uint64_t seed, const StepOptions& options) {
  const c10::Device device = device_of(graph, image_anywhere);
  const at::Tensor image = image_anywhere.to(device);
  const at::ScalarType dtype = image.scalar_type();
  const Plan plain = plain_of(plan);
  const Outcome low =
      run(graph, plain, image, CheckLoss(graph, plan, seed, device, dtype).fn(), options);
  // The same weights in float64 (each float32 value is exact in float64), then back.
  graph.module().to(at::kDouble);
  StepOptions exact_options = options;
  exact_options.precision = Precision::kFloat32;
  const Outcome exact = run(graph, plain, image.to(at::kDouble),
                            CheckLoss(graph, plan, seed, device, at::kDouble).fn(), exact_options);
  graph.module().to(dtype);
  for (auto& p : graph.module().parameters()) p.mutable_grad() = at::Tensor();  // float64 grads
  return compare(low, exact);
}

}  // namespace tessel::core
