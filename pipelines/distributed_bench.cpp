#include "pipelines/distributed_bench.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "models/zoo.h"

namespace tessel::pipelines {

AllreduceBenchResult bench_allreduce(Communicator& communicator, const std::string& model,
                                     int repeat, int warmup, int64_t bucket_bytes) {
  AllreduceBenchResult r;
  r.model = model;
  r.world_size = communicator.world_size();
  r.bucket_bytes = bucket_bytes;
  core::Graph graph = models::build_model(model);
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : graph.module().parameters()) {
    grads.push_back(at::zeros_like(p));
    r.parameters += p.numel();
  }
  for (int i = 0; i < warmup + repeat; ++i) {
    communicator.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    communicator.allreduce_sum(grads, bucket_bytes);
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= warmup)
      r.step_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return r;
}

std::string to_json(const AllreduceBenchResult& r) {
  return nlohmann::json{{"kind", "allreduce"},
                        {"model", r.model},
                        {"world_size", r.world_size},
                        {"parameters", r.parameters},
                        {"gradient_bytes", r.parameters * 4},
                        {"bucket_bytes", r.bucket_bytes},
                        {"step_ms", r.step_ms}}
      .dump();
}

}  // namespace tessel::pipelines
