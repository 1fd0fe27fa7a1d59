// Where the first segment's input comes from: a tensor, or a slide (implemented in io/).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "core/graph/window.h"

namespace tessel::core {

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
};

// A whole image already in memory (1×C×H×W): tests, small images, the plain reference.
class TensorTileSource : public TileSource {
 public:
  explicit TensorTileSource(at::Tensor image);
  int64_t channels() const override;
  int64_t height() const override;
  int64_t width() const override;
  at::Tensor read(const Region& r) override;
  const at::Tensor& image() const { return image_; }

 private:
  at::Tensor image_;
};

}  // namespace tessel::core
