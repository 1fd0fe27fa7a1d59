// The one exception type Tessel throws. Messages name the thing (file, layer, parameter) and
// say what to do; they are caught only at the boundary (CLI main, GUI action, pipeline run).
#pragma once

#include <stdexcept>
#include <string>

namespace tessel {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// An error that ends a training run or an evaluation instead of skipping the slide at hand:
// every later slide would fail the same way, or the weights can no longer be trusted.
class RunError : public Error {
 public:
  using Error::Error;
};

// The machine's fault, not the input's: the scratch space for offloaded checkpoints is full,
// unwritable or lost a file.
class ScratchError : public RunError {
 public:
  using RunError::RunError;
};

// The device ran out of memory inside a step (another process on the GPU, fragmentation beyond
// the memory model).
class OutOfDeviceMemory : public RunError {
 public:
  using RunError::RunError;
};

// A non-finite loss or gradient: training stops before the weights take it.
class Diverged : public RunError {
 public:
  using RunError::RunError;
};

}  // namespace tessel
