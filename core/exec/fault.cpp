#include "core/exec/fault.h"

#include "core/error.h"
#include "core/graph/graph.h"
#include "core/plan/geometry.h"
#include "core/plan/plan.h"

namespace tessel::core {

Fault parse_fault(const std::string& name) {
  if (name == "nan-grad") return Fault::kNanGrad;
  if (name == "nan-stat") return Fault::kNanStat;
  if (name == "halo") return Fault::kHalo;
  if (name == "none") return Fault::kNone;
  throw Error("unknown fault '" + name + "': nan-grad, nan-stat or halo");
}

std::string to_string(Fault fault) {
  switch (fault) {
    case Fault::kNanGrad:
      return "nan-grad";
    case Fault::kNanStat:
      return "nan-stat";
    case Fault::kHalo:
      return "halo";
    case Fault::kNone:
      break;
  }
  return "none";
}

int halo_fault_segment(const Graph& graph, const Plan& plan) {
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    if (s.forward.tiles() < 2 && s.backward.tiles() < 2) continue;
    const Shape& in = plan.shapes[static_cast<size_t>(s.input)];
    for (const Partition* p : {&s.forward, &s.backward}) {
      for (int64_t t = 0; t < p->tiles(); ++t) {
        const Region r = segment_needs(graph, plan.shapes, s.input, s.output,
                                       p->tile(t))[static_cast<size_t>(s.input)];
        const bool partial =
            r.y.begin > 0 || r.x.begin > 0 || r.y.end < in.height || r.x.end < in.width;
        if (partial && !r.empty()) return static_cast<int>(i);
      }
    }
  }
  return -1;
}

}  // namespace tessel::core
