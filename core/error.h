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

}  // namespace tessel
