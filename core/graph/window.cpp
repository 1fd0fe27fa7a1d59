#include "core/graph/window.h"

namespace tessel::core {

Window input_window(const AxisOp& op, Window out) {
  if (out.empty()) return {0, 0};
  return {out.begin * op.stride - op.padding,
          (out.end - 1) * op.stride - op.padding + op.dilation * (op.kernel - 1) + 1};
}

namespace {

int64_t div_floor(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

}  // namespace

Window reaching(const AxisOp& op, Window in) {
  if (in.empty()) return {0, 0};
  // Position q reads [q·s − p, q·s − p + span): it meets `in` when q·s − p + span > in.begin
  // and q·s − p < in.end.
  const int64_t span = op.dilation * (op.kernel - 1) + 1;
  const int64_t first = div_floor(in.begin + op.padding - span, op.stride) + 1;
  const int64_t end = div_floor(in.end + op.padding - 1, op.stride) + 1;
  return first < end ? Window{first, end} : Window{0, 0};
}

int64_t output_size(const AxisOp& op, int64_t in) {
  // ATen's pooling_output_shape (conv is the same without ceil mode), with floor division: in
  // ceil mode the last window may reach past the padded input.
  const int64_t span = in + op.padding + op.end_padding() - op.dilation * (op.kernel - 1) - 1 +
                       (op.ceil_mode ? op.stride - 1 : 0);
  const int64_t floor_div = span >= 0 ? span / op.stride : -((-span + op.stride - 1) / op.stride);
  int64_t out = floor_div + 1;
  // The last window must start inside the input or left padding.
  if (op.ceil_mode && (out - 1) * op.stride >= in + op.padding) --out;
  return std::max<int64_t>(out, 0);
}

Window intersect(Window a, Window b) {
  Window w{std::max(a.begin, b.begin), std::min(a.end, b.end)};
  return w.empty() ? Window{0, 0} : w;
}

Window hull(Window a, Window b) {
  if (a.empty()) return b.empty() ? Window{0, 0} : b;
  if (b.empty()) return a;
  return {std::min(a.begin, b.begin), std::max(a.end, b.end)};
}

Region intersect(const Region& a, const Region& b) {
  Region r{intersect(a.y, b.y), intersect(a.x, b.x)};
  return r.empty() ? Region{} : r;
}

Region hull(const Region& a, const Region& b) {
  if (a.empty()) return b.empty() ? Region{} : b;
  if (b.empty()) return a;
  return {hull(a.y, b.y), hull(a.x, b.x)};
}

std::string to_string(const Window& w) {
  return "[" + std::to_string(w.begin) + ", " + std::to_string(w.end) + ")";
}

std::string to_string(const Region& r) { return "y" + to_string(r.y) + " x" + to_string(r.x); }

std::ostream& operator<<(std::ostream& os, const Window& w) { return os << to_string(w); }
std::ostream& operator<<(std::ostream& os, const Region& r) { return os << to_string(r); }

}  // namespace tessel::core
