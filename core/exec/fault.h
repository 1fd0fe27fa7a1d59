// A deliberate fault in a tiled step (`tessel gradcheck --inject`), to show that the first law's
// check refuses what it must; never set in training.
#pragma once

#include <string>

namespace tessel::core {

// Declared only: pipelines/train.h includes this header, and the GUI includes that, where Qt's
// `slots` macro breaks LibTorch's headers.
class Graph;
struct Plan;

// kNanGrad: one element of the first parameter's gradient becomes NaN. kNanStat: one element of
// the first running statistic becomes NaN (a step of a network without one refuses it). kHalo:
// one tile (halo_fault_segment's) reads its input window one row (or column) short on a side
// where the window ends inside the activation, and the rows that remain stand where the
// window's should (a zero row fills the other end), in the forward and in every recompute alike.
enum class Fault { kNone, kNanGrad, kNanStat, kHalo };

Fault parse_fault(const std::string& name);  // none, nan-grad, nan-stat, halo; throws otherwise
std::string to_string(Fault fault);

// The segment whose tile Fault::kHalo shortens: the first of more than one tile in which some
// forward or backward tile's window at the segment's input is not the whole input (it has a
// halo there to shorten; a tile of the backward alone is shortened in its recompute). -1 when none
// has: every tile reads its whole input (a receptive field larger than the image), and a halo fault
// at the inputs cannot be made.
int halo_fault_segment(const Graph& graph, const Plan& plan);

}  // namespace tessel::core
