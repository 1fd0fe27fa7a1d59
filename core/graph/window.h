// Window propagation, as pure functions: which input positions an output range of an op needs,
// per spatial axis (DESIGN.md "Graph"; SFT §4.3, Table 4, with stride and dilation).
#pragma once

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>

namespace tessel::core {

// Half-open range [begin, end) along one axis of one activation. May be empty (end <= begin) and
// may extend outside the activation (the part outside is padding).
struct Window {
  int64_t begin = 0;
  int64_t end = 0;

  int64_t size() const { return std::max<int64_t>(0, end - begin); }
  bool empty() const { return end <= begin; }
  bool operator==(const Window&) const = default;
};

struct Region {
  Window y, x;  // rows, columns
  bool empty() const { return y.empty() || x.empty(); }
  int64_t area() const { return y.size() * x.size(); }
  bool operator==(const Region&) const = default;
};

// One sliding-window op along one axis (conv, pool). Pointwise ops are {1, 1, 0, 1}.
// `padding` is the leading side's (top, left); `padding_end` the trailing side's when it differs
// (ONNX "pads" [top, left, bottom, right], TensorFlow's SAME), -1 for the same as `padding`.
struct AxisOp {
  int64_t kernel = 1;
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  bool ceil_mode = false;
  int64_t padding_end = -1;

  int64_t end_padding() const { return padding_end < 0 ? padding : padding_end; }
};

// The input range that output range `out` reads: [a*s - p, (b-1)*s - p + d*(k-1) + 1), where p
// is the leading padding (the trailing one only bounds the output size).
// Unclipped: the part outside [0, input size) is padding. Empty in, empty out.
Window input_window(const AxisOp& op, Window out);

// Output size LibTorch gives for an input of `in` positions (conv and pool formula, including
// ceil_mode's rule that the last window must start inside the input or left padding), with both
// sides' padding.
int64_t output_size(const AxisOp& op, int64_t in);

// The output positions whose input window (input_window of the position) meets input range
// `in`: every position that reads some of it. A dilated window counts as the range it spans.
// Empty in, empty out; `in` may lie partly or wholly outside the input (its padding).
Window reaching(const AxisOp& op, Window in);

Window intersect(Window a, Window b);
// Interval hull ("union" of windows, DESIGN.md rule 2). An empty operand is ignored.
Window hull(Window a, Window b);
Region intersect(const Region& a, const Region& b);
Region hull(const Region& a, const Region& b);

std::string to_string(const Window& w);
std::string to_string(const Region& r);
std::ostream& operator<<(std::ostream& os, const Window& w);
std::ostream& operator<<(std::ostream& os, const Region& r);

}  // namespace tessel::core
