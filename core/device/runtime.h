// The process-wide runtime the engine runs in: LibTorch's thread pool, devices, versions.
#pragma once

#include <string>

namespace tessel::core {

// Sets LibTorch's intra-op thread count. `requested` <= 0 means "all hardware threads" (LibTorch
// defaults to 1 on some machines, which wastes the rest). Returns the count now in effect.
// Before oneDNN first runs, it also sizes oneDNN's CPU kernel cache for the many shapes a glass
// step's boxes run (ONEDNN_PRIMITIVE_CACHE_CAPACITY, unless set).
int configure_threads(int requested);

// LibTorch's intra-op thread count now in effect.
int intra_op_threads();

// Hardware threads as the OS reports them (at least 1).
int hardware_threads();

// "1.13.0": the LibTorch the engine was compiled against.
std::string torch_version();

// Whether LibTorch can run on a CUDA device in this process (false on CPU-only builds).
bool cuda_available();

}  // namespace tessel::core
