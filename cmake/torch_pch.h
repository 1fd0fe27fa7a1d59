// The LibTorch pieces Tessel's translation units use, precompiled once (cmake/TesselCompiler).
// Not <torch/torch.h>: it pulls in everything (data loaders, serialization, jit).
#pragma once
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
