#include "core/tile_source.h"

#include <ATen/ATen.h>

#include "core/error.h"

namespace tessel::core {

TensorTileSource::TensorTileSource(at::Tensor image) : image_(std::move(image)) {
  if (image_.dim() == 3) image_ = image_.unsqueeze(0);
  if (image_.dim() != 4 || image_.size(0) != 1) {
    throw Error("a tensor tile source needs a 1×C×H×W or C×H×W image, got " +
                std::to_string(image_.dim()) + " dimensions");
  }
}

int64_t TensorTileSource::channels() const { return image_.size(1); }
int64_t TensorTileSource::height() const { return image_.size(2); }
int64_t TensorTileSource::width() const { return image_.size(3); }

at::Tensor TensorTileSource::read(const Region& r) {
  if (r.y.begin < 0 || r.x.begin < 0 || r.y.end > height() || r.x.end > width() || r.empty()) {
    throw Error("tile source read " + to_string(r) + " outside the " + std::to_string(height()) +
                "×" + std::to_string(width()) + " image");
  }
  return image_.slice(2, r.y.begin, r.y.end).slice(3, r.x.begin, r.x.end);
}

}  // namespace tessel::core
