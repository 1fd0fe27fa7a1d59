// Optimizers for training runs (SGD with momentum, Adam, AdamW from LibTorch), the learning-rate
// schedule, and their state as named tensors for HDF5 checkpoints, so a resumed run continues
// exactly where it stopped.
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

#include "io/checkpoint.h"
#include "pipelines/train_config.h"

namespace tessel::pipelines {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainConfig& config,
                                                        torch::nn::Module& module);

// The learning rate during epoch `epoch` (0-based) at `fraction` ∈ [0, 1) of it: linear warm-up
// from lr/10 over warmup_epochs, then constant, step (× gamma every step_epochs) or cosine (to 0
// at the last epoch).
double learning_rate(const TrainConfig& config, int64_t epoch, double fraction);
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

// The optimizer's per-parameter state ("<param>.momentum_buffer", "<param>.exp_avg",
// "<param>.step", ...) for the module's named parameters, and back.
std::vector<io::NamedTensor> optimizer_state(const TrainConfig& config,
                                             torch::optim::Optimizer& optimizer,
                                             torch::nn::Module& module);
void restore_optimizer_state(const TrainConfig& config, torch::optim::Optimizer& optimizer,
                             torch::nn::Module& module, const std::vector<io::NamedTensor>& state);

}  // namespace tessel::pipelines
