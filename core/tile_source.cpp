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

void check_background(TileSource& source, const Background& background) {
  const CellMask& cells = background.cells;
  if (cells.height() != source.height() || cells.width() != source.width()) {
    throw Error("background cells over " + std::to_string(cells.height()) + "×" +
                std::to_string(cells.width()) + " for a " + std::to_string(source.height()) + "×" +
                std::to_string(source.width()) + " image");
  }
  if (static_cast<int64_t>(background.value.size()) != source.channels()) {
    throw Error("background colour of " + std::to_string(background.value.size()) +
                " channels for an image of " + std::to_string(source.channels()));
  }
  const at::Tensor colour =
      at::tensor(background.value, at::TensorOptions().dtype(at::kDouble)).view({1, -1, 1, 1});
  for (int64_t r = 0; r < cells.rows(); ++r) {
    for (int64_t c = 0; c < cells.cols(); ++c) {
      if (!cells.cell_in(r, c)) continue;
      // In the image's dtype: what a pixel holds is the colour as that dtype rounds it.
      const at::Tensor pixels = source.read(cells.cell(r, c));
      if (!at::equal(pixels, colour.to(pixels.options()).expand_as(pixels))) {
        throw Error("background cell " + to_string(cells.cell(r, c)) +
                    " does not hold the background colour");
      }
    }
  }
}

void TensorTileSource::set_background(Background background) {
  check_background(*this, background);
  background_ = std::move(background);
}

const Background* TensorTileSource::background() const {
  return background_ ? &*background_ : nullptr;
}

}  // namespace tessel::core
