// Per-node data, indexed by node id: `values[node]` where a std::vector would need
// `values[static_cast<size_t>(node)]` at every use.
#pragma once

#include <cstddef>
#include <vector>

namespace tessel::core {

using NodeId = int;  // as core/graph/graph.h

template <typename T>
class NodeVec {
 public:
  NodeVec() = default;
  // One default value per node of a graph with `nodes` nodes.
  explicit NodeVec(NodeId nodes) : values_(static_cast<size_t>(nodes)) {}
  NodeVec(NodeId nodes, const T& value) : values_(static_cast<size_t>(nodes), value) {}

  T& operator[](NodeId v) { return values_[static_cast<size_t>(v)]; }
  const T& operator[](NodeId v) const { return values_[static_cast<size_t>(v)]; }
  T& at(NodeId v) { return values_.at(static_cast<size_t>(v)); }
  const T& at(NodeId v) const { return values_.at(static_cast<size_t>(v)); }

  NodeId size() const { return static_cast<NodeId>(values_.size()); }
  auto begin() { return values_.begin(); }
  auto end() { return values_.end(); }
  auto begin() const { return values_.begin(); }
  auto end() const { return values_.end(); }

 private:
  std::vector<T> values_;
};

}  // namespace tessel::core
