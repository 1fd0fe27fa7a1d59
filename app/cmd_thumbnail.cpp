// `tessel thumbnail SLIDE --out x.png [--size 1024] [--mask]`: a quick look at a slide, and with
// --mask its tissue mask, an overlay of the mask's outline, the tissue fraction and bounding box.
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "app/command.h"
#include "io/slide.h"
#include "io/thumbnail.h"
#include "io/tissue.h"

namespace tessel::app {
namespace {

struct ThumbnailArgs {
  std::string slide;
  std::string out;
  int64_t size = 1024;
  bool mask = false;
  std::string mask_out;
  std::string overlay_out;
  std::optional<int> threshold;
};

// x.png → x.<suffix>.png (x.<suffix>.png also when the name does not end in .png).
std::string beside(const std::string& out, const std::string& suffix) {
  const std::string stem =
      out.size() > 4 && out.substr(out.size() - 4) == ".png" ? out.substr(0, out.size() - 4) : out;
  return stem + "." + suffix + ".png";
}

int run(const ThumbnailArgs& args) {
  const io::Slide slide(args.slide);
  const int level = io::thumbnail_level(slide, args.size);
  const io::RgbImage image = io::thumbnail(slide, args.size);
  io::save_png(image, args.out);
  std::cout << "thumbnail  " << args.out << " (" << image.width << " × " << image.height
            << ", from level " << level << ")\n";
  if (!args.mask) return 0;

  io::TissueMaskOptions options;
  options.threshold = args.threshold;
  std::optional<double> mpp;
  if (slide.mpp_x() && slide.mpp_y()) mpp = std::sqrt(*slide.mpp_x() * *slide.mpp_y());
  // The mask is computed on the thumbnail itself, so the overlay lines up pixel for pixel.
  const io::TissueMask mask =
      io::tissue_mask(image, slide.level(0).width, slide.level(0).height, mpp, options);
  const std::string mask_out = args.mask_out.empty() ? beside(args.out, "mask") : args.mask_out;
  const std::string overlay_out =
      args.overlay_out.empty() ? beside(args.out, "overlay") : args.overlay_out;
  mask.save_png(mask_out);
  io::save_png(io::tissue_overlay(image, mask), overlay_out);
  std::cout << "mask       " << mask_out << "\n";
  std::cout << "overlay    " << overlay_out << "\n";
  std::cout << "tissue     " << mask.tissue_fraction * 100.0
            << "% of the slide (saturation threshold " << mask.threshold << ")\n";
  if (mask.ink_fraction > 0) {
    std::cout << "pen ink    " << mask.ink_fraction * 100.0
              << "% of the slide, not taken as tissue (blue or green marker, or dye)\n";
  }
  std::cout << "bbox       ";
  if (mask.empty()) {
    std::cout << "none: no tissue found\n";
  } else {
    std::cout << "x " << mask.bbox.x.begin << "–" << mask.bbox.x.end << ", y " << mask.bbox.y.begin
              << "–" << mask.bbox.y.end << " (level-0 pixels)\n";
  }
  return 0;
}

}  // namespace

void register_thumbnail(CLI::App& app, const GlobalOptions& /*global*/, CommandRegistry& registry) {
  auto* cmd = app.add_subcommand(
      "thumbnail",
      "Write a slide's thumbnail as PNG; with --mask also its tissue mask and overlay");
  auto args = std::make_shared<ThumbnailArgs>();
  cmd->add_option("slide", args->slide, "The slide file (any format OpenSlide reads)")->required();
  cmd->add_option("--out", args->out, "The thumbnail PNG to write")->required();
  cmd->add_option("--size", args->size, "Longest side of the thumbnail in pixels")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--mask", args->mask,
                "Also write the tissue mask and an overlay, print the "
                "tissue fraction and bounding box");
  cmd->add_option("--mask-out", args->mask_out, "The mask PNG (default: OUT with .mask.png)");
  cmd->add_option("--overlay-out", args->overlay_out,
                  "The overlay PNG (default: OUT with .overlay.png)");
  cmd->add_option("--threshold", args->threshold,
                  "A fixed saturation threshold 0-255 instead of Otsu's")
      ->check(CLI::Range(0, 255));
  cmd->callback([&registry, args] { registry.selected = [args] { return run(*args); }; });
}

}  // namespace tessel::app
