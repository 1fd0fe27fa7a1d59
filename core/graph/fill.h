// Filling tensors from a CPU generator, whatever their device: a seed gives the same values on
// the CPU and on a GPU, so a run or a check can be repeated on either.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

namespace tessel::core {

void fill_normal(const at::Tensor& t, double mean, double std, at::Generator& gen);
void fill_uniform(const at::Tensor& t, double from, double to, at::Generator& gen);

}  // namespace tessel::core
