// `tessel bench allreduce`: the gradient exchange of one training step, timed alone: a model's
// gradients (zeros of its parameters' shapes) summed over the ranks a launcher started, as
// `tessel train --distributed` sums them (pipelines/distributed.h). bench/run --only dist runs it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipelines/distributed.h"

namespace tessel::pipelines {

struct AllreduceBenchResult {
  std::string model;
  int world_size = 1;
  int64_t parameters = 0;  // gradient elements (float32) exchanged per step
  int64_t bucket_bytes = 0;
  std::vector<double> step_ms;  // one allreduce of all the gradients per timed repeat
};

// Every rank calls this with the same arguments; `warmup` untimed exchanges come first, and a
// barrier precedes each timed one so that no rank's lateness is counted as transfer time.
AllreduceBenchResult bench_allreduce(Communicator& communicator, const std::string& model,
                                     int repeat, int warmup, int64_t bucket_bytes);

// One JSON line.
std::string to_json(const AllreduceBenchResult& r);

}  // namespace tessel::pipelines
