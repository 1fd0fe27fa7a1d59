// What this Tessel can do on this machine: library versions, threads, devices (`tessel doctor`).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tessel::pipelines {

struct Environment {
  std::vector<std::pair<std::string, std::string>> entries;  // name, value; in print order
};

// Probes the linked libraries and the devices. Cheap; never throws.
Environment probe_environment();

std::string to_string(const Environment& env);

}  // namespace tessel::pipelines
