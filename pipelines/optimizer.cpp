#include "pipelines/optimizer.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <map>
#include <numbers>

#include "core/error.h"

namespace tessel::pipelines {
namespace {

// LibTorch keys optimizer state by the parameter's TensorImpl address.
void* state_key(const at::Tensor& p) { return p.unsafeGetTensorImpl(); }

// Adam and AdamW share their state's fields; one function serves both.
template <typename State>
void add_adam_state(std::vector<io::NamedTensor>& out, const std::string& name, State& s) {
  out.push_back({name + ".step", at::tensor(s.step())});
  out.push_back({name + ".exp_avg", s.exp_avg()});
  out.push_back({name + ".exp_avg_sq", s.exp_avg_sq()});
  if (s.max_exp_avg_sq().defined()) out.push_back({name + ".max_exp_avg_sq", s.max_exp_avg_sq()});
}

template <typename State>
std::unique_ptr<State> adam_state(const std::map<std::string, at::Tensor>& saved,
                                  const std::string& name) {
  auto s = std::make_unique<State>();
  s->step(saved.at(name + ".step").template item<int64_t>());
  s->exp_avg(saved.at(name + ".exp_avg").clone());
  s->exp_avg_sq(saved.at(name + ".exp_avg_sq").clone());
  if (saved.contains(name + ".max_exp_avg_sq")) {
    s->max_exp_avg_sq(saved.at(name + ".max_exp_avg_sq").clone());
  }
  return s;
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainConfig& c,
                                                        torch::nn::Module& module) {
  std::vector<at::Tensor> params = module.parameters();
  if (c.optimizer == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(c.lr).momentum(c.momentum).weight_decay(c.weight_decay));
  }
  if (c.optimizer == "adam") {
    return std::make_unique<torch::optim::Adam>(
        params, torch::optim::AdamOptions(c.lr).weight_decay(c.weight_decay));
  }
  if (c.optimizer == "adamw") {
    return std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(c.lr).weight_decay(c.weight_decay));
  }
  throw Error("optimizer '" + c.optimizer + "' is not sgd, adam or adamw");
}

double learning_rate(const TrainConfig& c, int64_t epoch, double fraction) {
  const double t = static_cast<double>(epoch) + fraction;
  if (t < c.warmup_epochs) return c.lr * (0.1 + 0.9 * t / c.warmup_epochs);
  if (c.schedule == "step") {
    return c.lr * std::pow(c.gamma, static_cast<double>(epoch / c.step_epochs));
  }
  if (c.schedule == "cosine") {
    const double span = static_cast<double>(c.epochs) - c.warmup_epochs;
    const double progress = span > 0 ? (t - c.warmup_epochs) / span : 1.0;
    return c.lr * 0.5 * (1.0 + std::cos(std::numbers::pi * std::min(progress, 1.0)));
  }
  return c.lr;
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

std::vector<io::NamedTensor> optimizer_state(const TrainConfig& c,
                                             torch::optim::Optimizer& optimizer,
                                             torch::nn::Module& module) {
  std::vector<io::NamedTensor> out;
  auto& states = optimizer.state();
  for (const auto& item : module.named_parameters()) {
    const auto it = states.find(state_key(item.value()));
    if (it == states.end()) continue;  // no step taken yet
    const std::string& name = item.key();
    if (c.optimizer == "sgd") {
      auto& s = static_cast<torch::optim::SGDParamState&>(*it->second);
      if (s.momentum_buffer().defined())
        out.push_back({name + ".momentum_buffer", s.momentum_buffer()});
    } else if (c.optimizer == "adam") {
      add_adam_state(out, name, static_cast<torch::optim::AdamParamState&>(*it->second));
    } else {
      add_adam_state(out, name, static_cast<torch::optim::AdamWParamState&>(*it->second));
    }
  }
  return out;
}

void restore_optimizer_state(const TrainConfig& c, torch::optim::Optimizer& optimizer,
                             torch::nn::Module& module,
                             const std::vector<io::NamedTensor>& saved_state) {
  std::map<std::string, at::Tensor> saved;
  for (const io::NamedTensor& t : saved_state) saved[t.name] = t.tensor;
  auto& states = optimizer.state();
  states.clear();
  try {
    for (const auto& item : module.named_parameters()) {
      const std::string& name = item.key();
      void* const key = state_key(item.value());
      if (c.optimizer == "sgd") {
        if (!saved.contains(name + ".momentum_buffer")) continue;
        auto s = std::make_unique<torch::optim::SGDParamState>();
        s->momentum_buffer(saved.at(name + ".momentum_buffer").clone());
        states[key] = std::move(s);
      } else if (!saved.contains(name + ".step")) {
        continue;
      } else if (c.optimizer == "adam") {
        states[key] = adam_state<torch::optim::AdamParamState>(saved, name);
      } else {
        states[key] = adam_state<torch::optim::AdamWParamState>(saved, name);
      }
    }
  } catch (const std::out_of_range&) {
    throw Error("the checkpoint's optimizer state does not fit optimizer '" + c.optimizer + "'");
  }
}

}  // namespace tessel::pipelines
