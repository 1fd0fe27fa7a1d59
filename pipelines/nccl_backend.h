// NCCL process groups (c10d's ProcessGroupNCCL) for ranks on GPUs (`--dist-backend nccl`,
// docs/distributed.md): collectives over NVLink or InfiniBand instead of Gloo's TCP. Built where
// LibTorch has CUDA; its own translation unit, so the rest of pipelines/ does not pull NCCL's
// headers in.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

namespace tessel::pipelines {

// A NCCL group of `size` ranks on `store`, this process being `rank`, on the current CUDA device
// (each rank its own: NCCL refuses two ranks on one device). Throws tessel::Error where this
// build has no NCCL.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout);

}  // namespace tessel::pipelines
