#include "core/gradcheck.h"

#include <ATen/CPUGeneratorImpl.h>

#include <sstream>

#include "core/tile_source.h"

namespace tessel::core {

std::string Comparison::to_string() const {
  std::ostringstream os;
  os << "loss " << loss << ", logits " << logits << ", input grad " << input_grad
     << ", worst parameter grad " << worst_param << " (" << worst_param_name << ")";
  return os.str();
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
    if (p.key().rfind("bn", 0) == 0 && p.key().find(".weight") != std::string::npos) {
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
};

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
  return o;
}

}  // namespace

Comparison compare_with_plain(Graph& graph, const Plan& plan, const at::Tensor& image_anywhere,
                              uint64_t seed, const StepOptions& options) {
  // Both steps run where the parameters live (the image's device for a network without any).
  c10::Device device = image_anywhere.device();
  for (const auto& p : graph.module().parameters()) {
    device = p.device();
    break;
  }
  const at::Tensor image = image_anywhere.to(device);
  const auto& out = plan.shapes.back();
  const bool spatial = graph.node(graph.output()).spatial();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed + 7);
  const at::Tensor projection =
      (spatial ? at::randn({1, out.channels, out.height, out.width}, gen, image.scalar_type())
               : at::randn({1, out.channels}, gen, image.scalar_type()))
          .to(device);
  const int64_t target = static_cast<int64_t>(seed % static_cast<uint64_t>(out.channels));
  const at::Tensor targets = at::full({1}, target, at::TensorOptions(at::kLong).device(device));
  const LossFn loss = [&](const at::Tensor& logits, const at::Tensor&) {
    if (spatial || out.channels == 1) return (logits * projection).sum();
    return at::cross_entropy_loss(logits, targets);
  };
  Plan plain = plan;
  plain.strategy = Strategy::kNone;
  plain.segments.clear();
  const Outcome tiled = run(graph, plan, image, loss, options);
  const Outcome reference = run(graph, plain, image, loss, options);
  Comparison c;
  c.offload_bytes = tiled.step.offload_written_bytes + tiled.step.offload_read_bytes;
  c.loss = relative_error(tiled.step.loss, reference.step.loss);
  c.logits = relative_error(tiled.step.logits, reference.step.logits);
  c.input_grad = relative_error(tiled.step.input_grad, reference.step.input_grad);
  for (size_t i = 0; i < tiled.grads.size(); ++i) {
    const double e = relative_error(tiled.grads[i].second, reference.grads[i].second);
    if (e >= c.worst_param) {
      c.worst_param = e;
      c.worst_param_name = tiled.grads[i].first;
    }
  }
  return c;
}

}  // namespace tessel::core
