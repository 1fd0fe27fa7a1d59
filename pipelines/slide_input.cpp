#include "pipelines/slide_input.h"

#include <spdlog/spdlog.h>

#include <cmath>

#include "io/tissue.h"

namespace tessel::pipelines {
namespace {

// The tissue's bounding box in the pixels of `choice`; empty when no tissue is found.
core::Region tissue_crop(const io::Slide& slide, const io::ResolutionChoice& choice,
                         double level0_per_pixel) {
  const io::TissueMask mask = io::tissue_mask(slide);
  if (mask.empty()) {
    spdlog::warn("{}: no tissue found; using the whole slide", slide.path().string());
    return {};
  }
  const auto lo = [&](int64_t v) {
    return static_cast<int64_t>(std::floor(static_cast<double>(v) / level0_per_pixel));
  };
  const auto hi = [&](int64_t v) {
    return static_cast<int64_t>(std::ceil(static_cast<double>(v) / level0_per_pixel));
  };
  return {{std::max<int64_t>(0, lo(mask.bbox.y.begin)),
           std::min<int64_t>(choice.height, hi(mask.bbox.y.end))},
          {std::max<int64_t>(0, lo(mask.bbox.x.begin)),
           std::min<int64_t>(choice.width, hi(mask.bbox.x.end))}};
}

}  // namespace

io::Resolution resolution_of(const TrainConfig& c) {
  io::Resolution r = c.mpp             ? io::Resolution::at_mpp(*c.mpp)
                     : c.magnification ? io::Resolution::at_magnification(*c.magnification)
                                       : io::Resolution::at_level(c.level.value_or(0));
  if (c.base_mpp) r.with_base_mpp(*c.base_mpp);
  return r;
}

SlideInput open_slide_input(const TrainConfig& config, const std::filesystem::path& path, View view,
                            TissueCropCache* tissue_crops) {
  SlideInput in;
  in.slide = std::make_shared<const io::Slide>(path);
  in.choice = io::choose_resolution(io::pyramid_of(*in.slide), resolution_of(config));
  in.level0_per_pixel = in.slide->level(in.choice.level).downsample * in.choice.scale;
  io::SlideTileSourceOptions options;
  options.mean = io::kImageNetMean;
  options.std = io::kImageNetStd;
  in.pixels = std::make_shared<io::SlideTileSource>(in.slide, in.choice, options);
  if (config.tissue_bbox) {
    const std::string key = path.string();
    TissueCropCache local;
    TissueCropCache& cache = tissue_crops != nullptr ? *tissue_crops : local;
    auto it = cache.find(key);
    if (it == cache.end()) {
      it = cache.emplace(key, tissue_crop(*in.slide, in.choice, in.level0_per_pixel)).first;
    }
    view.crop = it->second;
  }
  auto source = std::make_shared<ViewTileSource>(in.pixels, view);
  in.crop = view.crop.empty() ? core::Region{{0, in.pixels->height()}, {0, in.pixels->width()}}
                              : view.crop;
  in.view = source;
  return in;
}

}  // namespace tessel::pipelines
