#include "core/plan/cost_model.h"

namespace tessel::core::planning {

PlanCost scheme_cost(const Analysis& a, const Segment& s) {
  return std::visit([&](const auto& scheme) { return scheme_cost(a, s, scheme); }, s.scheme);
}

bool has_barrier(const Graph& graph, const Segment& s) {
  for (NodeId v = s.input + 1; v <= s.output; ++v) {
    if (graph.node(v).is_barrier()) return true;
  }
  return false;
}

}  // namespace tessel::core::planning
