// Where the first segment's input comes from: a tensor, or a slide (implemented in io/).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "core/graph/cells.h"
#include "core/graph/window.h"

namespace tessel::core {

// The part of an image that holds one constant colour (glass a tissue mask fills, the outside
// of a training ROI), which the engine computes once per node rather than tile by tile
// (core/plan/glass.h): its cells, and the colour as read() returns it, per channel.
struct Background {
  CellMask cells;
  std::vector<double> value;
};

class TileSource {
 public:
  virtual ~TileSource() = default;
  virtual int64_t channels() const = 0;
  virtual int64_t height() const = 0;
  virtual int64_t width() const = 0;
  // Pixels of `r`, which lies inside the image, as float 1×C×h×w (contiguous). Never reads
  // outside the image: the engine clips windows and pads at the border itself.
  virtual at::Tensor read(const Region& r) = 0;
  // The engine's schedule of upcoming reads, in order, so a source can prefetch (optional).
  virtual void will_read(const std::vector<Region>& upcoming) {}
  // The image's constant region, where it has one (nullptr: none declared). A source that
  // declares one guarantees every pixel in its cells reads exactly `value`.
  virtual const Background* background() const { return nullptr; }
};

// Throws tessel::Error where `background` does not fit `source` (its size, its channels) or a
// pixel in its cells does not read its colour (every cell read: tests and small images).
void check_background(TileSource& source, const Background& background);

// A whole image already in memory (1×C×H×W): tests, small images, the plain reference.
class TensorTileSource : public TileSource {
 public:
  explicit TensorTileSource(at::Tensor image);
  int64_t channels() const override;
  int64_t height() const override;
  int64_t width() const override;
  at::Tensor read(const Region& r) override;
  const at::Tensor& image() const { return image_; }
  // Declares the image's constant region; throws tessel::Error where a pixel in its cells does
  // not hold the value, or the cells do not cover the image.
  void set_background(Background background);
  const Background* background() const override;

 private:
  at::Tensor image_;
  std::optional<Background> background_;
};

}  // namespace tessel::core
