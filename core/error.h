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

// The machine's fault, not the input's: the scratch space for offloaded checkpoints is full,
// unwritable or lost a file. A training run ends on it (every later slide would fail the same
// way) instead of skipping the slide at hand.
class ScratchError : public Error {
 public:
  using Error::Error;
};

// The device ran out of memory inside a step (another process on the GPU, fragmentation beyond
// the memory model): a run ends on it, like a ScratchError, instead of skipping the slide.
class OutOfDeviceMemory : public Error {
 public:
  using Error::Error;
};

}  // namespace tessel
