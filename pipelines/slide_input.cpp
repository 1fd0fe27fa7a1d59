#include "pipelines/slide_input.h"

#include <spdlog/spdlog.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/plan/geometry.h"
#include "core/plan/glass.h"
#include "core/plan/planner.h"
#include "core/plan/split.h"
#include "core/store/offload_prices.h"
#include "io/manifest.h"
#include "io/roi.h"
#include "io/tissue.h"
#include "pipelines/network.h"

namespace tessel::pipelines {
namespace {

// A level-0 rectangle in the pixels of a resolution: outward to whole pixels, inside the image.
core::Region to_pixels(const core::Region& level0, double level0_per_pixel, int64_t height,
                       int64_t width) {
  const auto lo = [&](int64_t v) {
    return static_cast<int64_t>(std::floor(static_cast<double>(v) / level0_per_pixel));
  };
  const auto hi = [&](int64_t v) {
    return static_cast<int64_t>(std::ceil(static_cast<double>(v) / level0_per_pixel));
  };
  return {{std::max<int64_t>(0, lo(level0.y.begin)), std::min(height, hi(level0.y.end))},
          {std::max<int64_t>(0, lo(level0.x.begin)), std::min(width, hi(level0.x.end))}};
}

}  // namespace

SlideOptions slide_options(const std::map<std::string, std::string>& metadata,
                           const std::filesystem::path& manifest, int line) {
  SlideOptions options;
  try {
    options.base_mpp = io::manifest_mpp(metadata);
  } catch (const Error& e) {
    throw Error(manifest.string() + " line " + std::to_string(line) + ": " + e.what());
  }
  if (const auto roi = io::manifest_roi(metadata, manifest)) options.roi = *roi;
  return options;
}

io::Resolution resolution_of(const TrainConfig& c) {
  io::Resolution r = c.mpp             ? io::Resolution::at_mpp(*c.mpp)
                     : c.magnification ? io::Resolution::at_magnification(*c.magnification)
                                       : io::Resolution::at_level(c.level.value_or(0));
  if (c.base_mpp) r.with_base_mpp(*c.base_mpp);
  return r;
}

namespace {

// Tissue masks are made once per slide and run (TissueMaskCache); null: no tissue found.
std::shared_ptr<const io::TissueMask> tissue_of(const std::filesystem::path& path,
                                                const io::Slide& slide, TissueMaskCache* masks) {
  TissueMaskCache local;
  TissueMaskCache& cache = masks != nullptr ? *masks : local;
  auto it = cache.find(path.string());
  if (it == cache.end()) {
    it =
        cache.emplace(path.string(), std::make_shared<const io::TissueMask>(io::tissue_mask(slide)))
            .first;
    if (it->second->ink_fraction > 0) {
      spdlog::info(
          "{}: blue or green pen ink (or dye) over {:.1f}% of the slide, not taken as tissue",
          path.string(), 100.0 * it->second->ink_fraction);
    }
  }
  if (!it->second->empty()) return it->second;
  spdlog::warn("{}: no tissue found; using the whole slide as it is", path.string());
  return nullptr;
}

// The cells of the image the engine keeps (non-zero), each per_x × per_y of its pixels.
struct KeepMask {
  at::Tensor keep;  // uint8, cells high × cells wide
  double per_x = 1, per_y = 1;
};

KeepMask tissue_keep(const io::TissueMask& mask, double level0_per_pixel) {
  KeepMask k;
  k.keep =
      at::from_blob(const_cast<uint8_t*>(mask.pixels.data()), {mask.height, mask.width}, at::kByte)
          .clone();
  k.per_x =
      static_cast<double>(mask.slide_width) / static_cast<double>(mask.width) / level0_per_pixel;
  k.per_y =
      static_cast<double>(mask.slide_height) / static_cast<double>(mask.height) / level0_per_pixel;
  return k;
}

// A region of interest's polygons over the image, in cells of k × k pixels (k: the fewest that
// keep the mask within kRoiMaskSide a side), and within the tissue when it is given: outside
// them the image is background, as glass is under tissue_fill.
constexpr int64_t kRoiMaskSide = 4096;

KeepMask roi_keep(const io::RegionOfInterest& roi, const SlideInput& in,
                  const io::TissueMask* tissue) {
  const int64_t height = in.pixels->height(), width = in.pixels->width();
  const int64_t k =
      std::max<int64_t>(1, (std::max(height, width) + kRoiMaskSide - 1) / kRoiMaskSide);
  const int64_t rows = (height + k - 1) / k, cols = (width + k - 1) / k;
  const double cell = static_cast<double>(k) * in.level0_per_pixel;  // in level-0 pixels
  std::vector<uint8_t> keep = io::rasterise(roi, cols, rows, cell, cell);
  if (tissue != nullptr) {
    // A cell keeps when its centre is on tissue too.
    const double tx = static_cast<double>(tissue->slide_width) / static_cast<double>(tissue->width);
    const double ty =
        static_cast<double>(tissue->slide_height) / static_cast<double>(tissue->height);
    const auto at = [](double centre, double per, int64_t size) {
      return std::clamp<int64_t>(static_cast<int64_t>(centre / per), 0, size - 1);
    };
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t y = at((static_cast<double>(r) + 0.5) * cell, ty, tissue->height);
      for (int64_t c = 0; c < cols; ++c) {
        uint8_t& cell_keep = keep[static_cast<size_t>(r * cols + c)];
        const int64_t x = at((static_cast<double>(c) + 0.5) * cell, tx, tissue->width);
        cell_keep = static_cast<uint8_t>(cell_keep != 0 && tissue->at(x, y));
      }
    }
  }
  KeepMask m;
  m.keep = at::from_blob(keep.data(), {rows, cols}, at::kByte).clone();
  m.per_x = m.per_y = static_cast<double>(k);
  return m;
}

}  // namespace

SlideInput open_slide_input(const TrainConfig& config, const std::filesystem::path& path,
                            const SlideOptions& slide_options, View view,
                            TissueMaskCache* tissue_masks) {
  SlideInput in;
  in.slide = std::make_shared<const io::Slide>(path);
  io::Resolution resolution = resolution_of(config);
  if (slide_options.base_mpp) resolution.with_base_mpp(*slide_options.base_mpp);
  in.choice = io::choose_resolution(io::pyramid_of(*in.slide), resolution);
  in.level0_per_pixel = in.slide->level(in.choice.level).downsample * in.choice.scale;
  io::SlideTileSourceOptions options;
  options.mean = io::kImageNetMean;
  options.std = io::kImageNetStd;
  in.pixels = std::make_shared<io::SlideTileSource>(in.slide, in.choice, options);
  const std::shared_ptr<const io::TissueMask> tissue =
      config.tissue_fill || config.tissue_bbox ? tissue_of(path, *in.slide, tissue_masks) : nullptr;
  std::optional<io::RegionOfInterest> roi;
  if (!slide_options.roi.empty()) {
    roi = io::read_roi(slide_options.roi, in.slide->level(0).width, in.slide->level(0).height);
  }
  // Glass (tissue_fill) and what lies outside the region's polygons become the background: the
  // colour of empty glass, which the engine computes once (docs/glass.md).
  const io::TissueMask* fill = config.tissue_fill ? tissue.get() : nullptr;
  std::optional<KeepMask> keep;
  if (roi) {
    keep = roi_keep(*roi, in, fill);
  } else if (fill != nullptr) {
    keep = tissue_keep(*fill, in.level0_per_pixel);
  }
  std::shared_ptr<core::TileSource> pixels = in.pixels;
  if (keep) {
    std::vector<float> white;
    for (size_t c = 0; c < 3; ++c) white.push_back((1.0F - options.mean[c]) / options.std[c]);
    pixels = std::make_shared<MaskedTileSource>(pixels, keep->keep, keep->per_x, keep->per_y,
                                                std::move(white));
  }
  const std::optional<core::Region> tissue_box =
      config.tissue_bbox && tissue ? std::optional(tissue->bbox) : std::nullopt;
  const std::optional<core::Region> roi_box = roi ? std::optional(roi->bbox) : std::nullopt;
  if (tissue_box || roi_box) {
    const core::Region level0 = io::training_region(path.string(), in.slide->level(0).width,
                                                    in.slide->level(0).height, tissue_box, roi_box);
    view.crop = to_pixels(level0, in.level0_per_pixel, in.choice.height, in.choice.width);
  }
  auto source = std::make_shared<ViewTileSource>(pixels, view);
  in.crop = view.crop.empty() ? core::Region{{0, in.pixels->height()}, {0, in.pixels->width()}}
                              : view.crop;
  in.view = source;
  return in;
}

std::vector<core::Region> first_reads(const core::Graph& graph, const core::Plan& plan,
                                      const core::TileSource& source, bool glass, int rank,
                                      int ranks) {
  std::vector<core::Region> reads;
  if (plan.segments.empty()) return reads;
  const core::Segment& first = plan.segments.front();
  const core::Background* background = glass ? source.background() : nullptr;
  const core::SegmentGlass g = core::segment_glass(
      graph, plan.shapes, first, background != nullptr ? background->cells : core::CellMask(),
      /*training=*/true, /*image_gradient=*/false);
  // The executor's Step::runs: the first segment's tiles of this rank.
  const core::TileRange mine = core::rank_range(first, core::Pass::kForward, 0, rank, ranks);
  for (int64_t t = mine.begin; t < mine.end; ++t) {
    if (!g.forward.empty() && g.forward[static_cast<size_t>(t)] != 0) continue;
    const core::Region tile = first.forward.tile(t);
    reads.push_back(core::segment_needs(graph, plan.shapes, first.input, first.output,
                                        tile)[static_cast<size_t>(first.input)]);
  }
  return reads;
}

void check_input_size(const core::Graph& graph, const TrainConfig& config, int64_t height,
                      int64_t width) {
  const auto fits = [&graph](int64_t h, int64_t w) {
    try {
      graph.shapes({3, h, w});
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  if (fits(height, width)) return;
  // The smallest side the network takes along each axis, the other axis ample.
  const int64_t ample = std::max<int64_t>({height, width, 4096});
  const auto smallest = [&](bool rows) {
    for (int64_t s = 1; s <= ample; ++s) {
      if (rows ? fits(s, ample) : fits(ample, s)) return s;
    }
    return ample;
  };
  const int64_t min_h = smallest(true), min_w = smallest(false);
  std::string resolution = "level 0";
  if (config.mpp) resolution = fmt::format("{} µm/px", *config.mpp);
  if (config.magnification) resolution = fmt::format("{}x", *config.magnification);
  if (config.level) resolution = fmt::format("level {}", *config.level);
  if (height >= min_h && width >= min_w) {
    throw Error(
        fmt::format("{}×{} px at {} does not fit the network {}'s downsampling (take a "
                    "slightly larger or smaller region)",
                    width, height, resolution, config.model));
  }
  throw Error(fmt::format(
      "too small at {}: {}×{} px, and the network {} needs at least {}×{} px (use a finer "
      "resolution or a larger region)",
      resolution, width, height, config.model, min_w, min_h));
}

namespace {

// What a slide input is: the slide, its level and scale, the image's size, its background.
std::string describe(const SlideInput& in, const std::filesystem::path& slide,
                     const TrainConfig& config, const SlideOptions& options,
                     const core::Background* background) {
  const bool options_roi = !options.roi.empty();
  const core::TileSource& source = *in.view;
  return fmt::format(
      "slide {}: level {} × {:.3g} (level-0 pixels per pixel {:.3g}), {}×{} px seen{}; {}\n",
      slide.string(), in.choice.level, in.choice.scale, in.level0_per_pixel, source.width(),
      source.height(),
      in.crop == core::Region{{0, in.pixels->height()}, {0, in.pixels->width()}}
          ? ""
          : " (cropped to " + core::to_string(in.crop) + ")",
      background != nullptr
          ? fmt::format("background ({}) {:.1f}% of it",
                        !options_roi         ? "tissue_fill"
                        : config.tissue_fill ? "tissue_fill and outside the region's polygons"
                                             : "outside the region's polygons",
                        100.0 * background->cells.fraction())
      : config.tissue_fill || options_roi
          ? "no background (the tissue mask or the region covers it all, or glass: false)"
          : "no background (tissue_fill: false)");
}

}  // namespace

core::PlanOptions training_plan_options(const TrainConfig& config) {
  core::PlanOptions o;
  o.strategy = core::parse_strategy(config.strategy);
  o.optimizer_state_per_param = config.optimizer == "sgd" ? 1 : 2;
  return o;
}

SlidePlan plan_slide(const TrainConfig& config, const std::filesystem::path& slide,
                     const SlideOptions& options, int ranks, double link_bytes_per_second) {
  const SlideInput in = open_slide_input(config, slide, options);
  const core::TileSource& source = *in.view;
  const int64_t classes = config.classes.empty() ? 2 : static_cast<int64_t>(config.classes.size());
  const Network network = build_network(config.model, model_options(config, classes));
  check_input_size(network.graph, config, source.height(), source.width());
  core::PlanOptions o = training_plan_options(config);
  o.ranks = ranks;
  o.prices.measure = [&] { return core::measure_offload_prices(o.auto_tier); };
  const core::Background* background = config.glass ? source.background() : nullptr;
  if (background != nullptr) {
    o.background = std::make_shared<core::CellMask>(background->cells);
  }
  SlidePlan out;
  out.plan = core::make_plan(network.graph, {3, source.height(), source.width()},
                             core::parse_bytes(config.budget), o);
  out.table = core::to_string(out.plan, network.graph);
  out.description = describe(in, slide, config, options, background);
  if (ranks > 1) {
    const std::string why = core::glass_split_refusal(network.graph, out.plan, true);
    if (background != nullptr && !why.empty()) {
      out.description += "split over " + std::to_string(ranks) +
                         " ranks: its glass is computed as tissue (" + why + ")\n";
    }
    out.table += core::split_summary(network.graph, out.plan, ranks, link_bytes_per_second);
  }
  return out;
}

SlideImage read_slide_image(const TrainConfig& config, const std::filesystem::path& slide,
                            int64_t max_pixels, const SlideOptions& options) {
  const SlideInput in = open_slide_input(config, slide, options);
  core::TileSource& source = *in.view;
  if (source.height() * source.width() > max_pixels) {
    throw Error(fmt::format(
        "{}: {}×{} px at this resolution is more than this check holds in memory ({} Mpx); "
        "take a coarser resolution (mpp=...) or a region (--roi)",
        slide.string(), source.width(), source.height(), max_pixels / 1000000));
  }
  const core::Background* background = config.glass ? source.background() : nullptr;
  SlideImage out;
  out.pixels = source.read({{0, source.height()}, {0, source.width()}});
  if (background != nullptr) out.background = *background;
  out.description = describe(in, slide, config, options, background);
  return out;
}

}  // namespace tessel::pipelines
