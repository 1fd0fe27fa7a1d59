#include "core/exec/shared_row.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <string>

#include "core/error.h"

namespace tessel::core {
namespace {

// A node's held rows in one shared row, `rows` (full width: `x`), as two pieces: `head`, rows
// [rows.begin, split), those that follow from what earlier rows kept (the inherited rows and the
// rows computed from them); `body`, rows [split, rows.end), computed from this row's own rows
// alone. Joining them is a copy of the whole activation (at::cat, forward and recompute: 3.5% of
// a vgg-mini 8192² 2PS step's CPU samples, and the fresh pages it wrote into another 1.5%).
// Either piece may be undefined (no rows).
struct HeldRows {
  at::Tensor head, body;
  Window rows;
  int64_t split = 0;
  Window x;
  // The body as its node made it, where the kept rows' hooks go (`body` may become the alias
  // RowsTap hands on, with autograd on).
  at::Tensor body_made;
  bool head_read = false, body_read = false;  // by this row's consumers
};

// Rows [begin, end) of `body` copied for a consumer that joins them to the head rows before
// them, and `body` itself handed on for every other reader (with autograd on). A slice's
// backward would allocate and zero-fill a gradient of the whole body for the few rows the copy
// reads; here the copy's gradient is added into the body's own gradient instead, in place
// where nothing else can see it (as the executor's kept-rows hook does).
struct RowsTap : torch::autograd::Function<RowsTap> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& body, int64_t begin,
                                                int64_t end) {
    ctx->saved_data["begin"] = begin;
    ctx->saved_data["end"] = end;
    return {body.slice(2, begin, end).clone(), body};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    // Undefined gradients come in as zeros (the default materialize_grads).
    const int64_t begin = ctx->saved_data["begin"].toInt(), end = ctx->saved_data["end"].toInt();
    at::Tensor part = std::move(grads[0]), whole = std::move(grads[1]);
    grads.clear();
    // Ours alone: two references (`whole` and LibTorch's own list it copied `grads` from,
    // torch/csrc/autograd/custom_function.h CppNode::apply) and a storage no view shares.
    // Else (an add's backward hands one tensor to both inputs, a concat's views of one) a copy.
    if (whole.use_count() > 2 || whole.storage().use_count() > 1) whole = whole.clone();
    whole.slice(2, begin, end).add_(part);
    return {whole, at::Tensor(), at::Tensor()};
  }
};

at::Tensor rows_of(const at::Tensor& t, int64_t first_row, Window want) {
  const int64_t begin = want.begin - first_row, end = want.end - first_row;
  if (begin == 0 && end == t.size(2)) return t;
  return t.slice(2, begin, end);
}

// Rows `want` of `h` for a consumer (inside h.rows): a view where they lie in one piece, else
// the head's rows joined to a copy of the body's first ones (RowsTap with autograd on).
TileTensor cover(HeldRows& h, Window want) {
  const Region region{want, h.x};
  if (want.empty()) return {h.head.defined() ? h.head : h.body, region};
  if (!h.body.defined() || want.end <= h.split) {
    h.head_read = true;
    return {rows_of(h.head, h.rows.begin, want), region};
  }
  if (!h.head.defined() || want.begin >= h.split) {
    h.body_read = true;
    if (at::GradMode::is_enabled() && (want.begin > h.split || want.end < h.rows.end)) {
      auto tap = RowsTap::apply(h.body, want.begin - h.split, want.end - h.split);
      h.body = tap[1];
      return {tap[0], region};
    }
    return {rows_of(h.body, h.split, want), region};
  }
  h.head_read = h.body_read = true;
  const at::Tensor top = rows_of(h.head, h.rows.begin, {want.begin, h.split});
  at::Tensor rest;
  if (at::GradMode::is_enabled()) {
    auto tap = RowsTap::apply(h.body, 0, want.end - h.split);
    h.body = tap[1];
    rest = tap[0];
  } else {
    rest = rows_of(h.body, h.split, {h.split, want.end});
  }
  return {at::cat({top, rest}, 2), region};
}

// The first output row of `computed` from which on node `node` reads no producer's head: the
// rows before it are computed from joined seams, the rest from the producers' bodies alone.
int64_t body_begin(const Node& node, const std::vector<Shape>& shapes, const Region& computed,
                   const std::vector<HeldRows>& held) {
  for (NodeId p : node.inputs) {
    if (!held[static_cast<size_t>(p)].body.defined()) return computed.y.end;
  }
  for (int64_t r = computed.y.begin; r < computed.y.end; ++r) {
    bool body_only = true;
    for (NodeId p : node.inputs) {
      const HeldRows& h = held[static_cast<size_t>(p)];
      const Region in =
          needed_input(node, {{r, computed.y.end}, computed.x}, shapes[static_cast<size_t>(p)]);
      body_only = body_only && (in.empty() || in.y.begin >= h.split);
    }
    if (body_only) return r;
  }
  return computed.y.end;
}

at::Tensor joined(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() || a.size(2) == 0) return b;
  if (!b.defined() || b.size(2) == 0) return a;
  return at::cat({a, b}, 2);
}

// Adds `g` (the next row's gradient of rows `rows` of `h`) into each piece's gradient as autograd
// passes it; false (nothing registered) where a piece holding some of those rows gets no
// gradient from this row, so the caller seeds them instead.
bool hook_kept(HeldRows& h, Window rows, const at::Tensor& g) {
  const Window in_head{rows.begin, std::min(rows.end, h.split)};
  const Window in_body{std::max(rows.begin, h.split), rows.end};
  const bool head_ok = in_head.empty() || (h.head_read && h.head.requires_grad());
  const bool body_ok = in_body.empty() || (h.body_read && h.body_made.requires_grad());
  if (!head_ok || !body_ok) return false;
  auto add_into = [&g, &rows](at::Tensor& piece, int64_t first_row, Window part) {
    const int64_t offset = part.begin - first_row;
    const at::Tensor gp = g.slice(2, part.begin - rows.begin, part.end - rows.begin);
    // LibTorch calls a tensor hook with a copy of the engine's handle
    // (torch/csrc/autograd/cpp_hook.cpp): two references and a storage of its own are the
    // engine's alone, the test its input buffers make before adding in place. Else (an add's
    // backward hands one tensor to both inputs) into a copy.
    piece.register_hook([gp, offset](const at::Tensor& grad) {
      if (grad.use_count() <= 2 && grad.storage().use_count() == 1) {
        grad.narrow(2, offset, gp.size(2)).add_(gp);
        return grad;
      }
      at::Tensor out = grad.clone();
      out.narrow(2, offset, gp.size(2)).add_(gp);
      return out;
    });
  };
  if (!in_head.empty()) add_into(h.head, h.rows.begin, in_head);
  if (!in_body.empty()) add_into(h.body_made, h.split, in_body);
  return true;
}

// One row of SharedRowRunner::run: the held rows by node, and the nodes whose kept rows get
// the next row's gradient.
class RowPass {
 public:
  RowPass(const Graph& graph, const std::vector<Shape>& shapes, NodeId first, NodeId output,
          const SharedRow& row)
      : graph_(graph),
        shapes_(shapes),
        first_(first),
        output_(output),
        row_(row),
        held_(static_cast<size_t>(output) + 1),
        uses_(static_cast<size_t>(output) + 1, 0) {
    for (NodeId v = first + 1; v <= output; ++v) {
      for (NodeId p : graph.node(v).inputs) ++uses_[static_cast<size_t>(p)];
    }
  }

  void start(TileTensor input) {
    options_ = input.tensor.options();
    HeldRows& in = held_[static_cast<size_t>(first_)];
    in.body = in.body_made = std::move(input.tensor);
    in.rows = input.region.y;
    in.x = input.region.x;
    in.split = in.rows.begin;
  }

  // Node `v`'s rows: those it computes, after `before` (the rows the previous row kept of it).
  void compute(NodeId v, const at::Tensor& before) {
    const auto i = static_cast<size_t>(v);
    const Node& node = graph_.node(v);
    const Region& computed = row_.computed[i];
    HeldRows& h = held_[i];
    h.rows = row_.held[i].y;
    h.x = row_.held[i].x;
    at::Tensor top;
    if (!computed.empty()) {
      const int64_t split = body_begin(node, shapes_, computed, held_);
      top = compute_head(node, {{computed.y.begin, split}, computed.x});
      compute_body(v, {{split, computed.y.end}, computed.x});
      h.split = split;
    } else {
      h.split = h.rows.end;
    }
    if (h.rows.empty()) {
      h.head = at::empty({1, node.channels, 0, 0}, options_);
    } else {
      h.head = joined(before.defined() && before.size(2) > 0 ? before : at::Tensor(), top);
    }
    check_rows(node, h);
  }

  // What node `v` keeps for the next row (into `kept`), or where the next row's gradient for
  // it (`handed`) goes.
  void keep(NodeId v, std::vector<at::Tensor>* kept, const std::vector<at::Tensor>* handed) {
    const auto i = static_cast<size_t>(v);
    const Region& keep = row_.kept[i];
    const at::Tensor& g = handed != nullptr && i < handed->size() ? (*handed)[i] : at::Tensor();
    if (g.defined() && !keep.empty()) {
      handed_to_.push_back(v);
    } else if (kept != nullptr && !keep.empty() && !at::GradMode::is_enabled()) {
      (*kept)[i] = cover(held_[i], keep.y).tensor.clone();
    } else if (kept != nullptr && !keep.empty()) {
      (*kept)[i] = cover(held_[i], keep.y).tensor;
    }
  }

  // Node `v`'s producers' rows go once every consumer has read them (those whose kept rows
  // get the next row's gradient stay until it is hooked).
  void release_inputs(NodeId v) {
    for (NodeId p : graph_.node(v).inputs) {
      const auto pi = static_cast<size_t>(p);
      if (--uses_[pi] == 0 && !std::count(handed_to_.begin(), handed_to_.end(), p)) held_[pi] = {};
    }
  }

  // The next row's gradients for the kept rows: hooked where this row's graph gives those rows
  // a gradient, else returned in `kept` for the caller to seed.
  void hand_gradients(std::vector<at::Tensor>* kept, const std::vector<at::Tensor>* handed) {
    for (NodeId v : handed_to_) {
      const auto i = static_cast<size_t>(v);
      const Window keep = row_.kept[i].y;
      if (!hook_kept(held_[i], keep, (*handed)[i]) && kept != nullptr) {
        (*kept)[i] = cover(held_[i], keep).tensor;
      }
    }
  }

  at::Tensor output() const {
    const HeldRows& out = held_[static_cast<size_t>(output_)];
    return joined(out.head, out.body);
  }

 private:
  std::vector<Shape> input_shapes(const Node& node) const {
    std::vector<Shape> out;
    for (NodeId p : node.inputs) out.push_back(shapes_[static_cast<size_t>(p)]);
    return out;
  }

  // The rows computed from joined seams (reading some producer's head).
  at::Tensor compute_head(const Node& node, const Region& rows) {
    if (rows.empty()) return {};
    std::vector<TileTensor> ins;
    for (NodeId p : node.inputs) {
      const auto pi = static_cast<size_t>(p);
      ins.push_back(cover(held_[pi], needed_input(node, rows, shapes_[pi]).y));
    }
    return forward_tile(node, rows, ins, input_shapes(node));
  }

  // The rows computed from the producers' bodies alone.
  void compute_body(NodeId v, const Region& rows) {
    if (rows.empty()) return;
    const Node& node = graph_.node(v);
    std::vector<TileTensor> ins;
    for (NodeId p : node.inputs) {
      HeldRows& ph = held_[static_cast<size_t>(p)];
      ph.body_read = true;
      ins.push_back({ph.body, {{ph.split, ph.rows.end}, ph.x}});
    }
    // In place as the executor's run_tile does, where the producer's body is a tensor of this
    // row's own that nothing else reads.
    const NodeId pid = node.inputs[0];
    const bool overwrite = !at::GradMode::is_enabled() && pid != first_ &&
                           allocates_output(graph_.node(pid)) &&
                           graph_.consumers()[static_cast<size_t>(pid)].size() == 1;
    HeldRows& h = held_[static_cast<size_t>(v)];
    h.body = h.body_made = forward_tile(node, rows, ins, input_shapes(node), overwrite);
  }

  static void check_rows(const Node& node, HeldRows& h) {
    const int64_t head_rows = h.head.defined() ? h.head.size(2) : 0;
    const int64_t body_rows = h.body.defined() ? h.body.size(2) : 0;
    if (!h.rows.empty() &&
        (head_rows != h.split - h.rows.begin || head_rows + body_rows != h.rows.size())) {
      throw Error("internal: shared rows of " + node.name + " hold " +
                  std::to_string(head_rows + body_rows) + " rows, the plan " +
                  std::to_string(h.rows.size()));
    }
    if (head_rows == 0 && !h.rows.empty()) h.head = at::Tensor();
  }

  const Graph& graph_;
  const std::vector<Shape>& shapes_;
  const NodeId first_, output_;
  const SharedRow& row_;
  std::vector<HeldRows> held_;
  std::vector<int> uses_;
  at::TensorOptions options_;
  std::vector<NodeId> handed_to_;
};

}  // namespace

at::Tensor SharedRowRunner::run(const SharedRow& row, TileTensor input,
                                const std::vector<at::Tensor>& inherited,
                                std::vector<at::Tensor>* kept,
                                const std::vector<at::Tensor>* handed) {
  RowPass pass(graph_, shapes_, first_, output_, row);
  pass.start(std::move(input));
  if (kept != nullptr) kept->assign(static_cast<size_t>(output_) + 1, at::Tensor());
  for (NodeId v = first_ + 1; v <= output_; ++v) {
    const auto i = static_cast<size_t>(v);
    pass.compute(v, i < inherited.size() ? inherited[i] : at::Tensor());
    pass.keep(v, kept, handed);
    if (v == output_) break;
    pass.release_inputs(v);
  }
  pass.hand_gradients(kept, handed);
  return pass.output();
}

}  // namespace tessel::core
