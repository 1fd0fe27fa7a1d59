// `tessel heatmap --checkpoint ck.h5 --slide S.svs --out DIR [--class tumour]`: class activation
// maps (and an attention head's attention maps) over a slide as a pyramidal TIFF, a PNG overlay
// and QuPath GeoJSON tiles.
#include <unistd.h>

#include <iostream>
#include <memory>

#include "app/command.h"
#include "app/parse.h"
#include "app/progress.h"
#include "pipelines/evaluate.h"

namespace tessel::app {

void register_heatmap(CLI::App& app, const GlobalOptions& /*global*/, CommandRegistry& registry) {
  auto* cmd = app.add_subcommand(
      "heatmap",
      "Draw where a trained network finds each class on a slide (TIFF, PNG overlay, GeoJSON)");
  auto request = std::make_shared<pipelines::HeatmapRequest>();
  auto checkpoint = std::make_shared<std::string>();
  auto slide = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>("heatmaps");
  cmd->add_option("--checkpoint", *checkpoint, "A checkpoint written by tessel train")->required();
  cmd->add_option("--slide", *slide, "The slide")->required();
  cmd->add_option("--out", *out, "Output folder")->capture_default_str();
  cmd->add_option("--class", request->class_name,
                  "Class drawn, or whose attention branch is drawn for an attention head "
                  "(default: the last class)");
  cmd->add_option("--budget", request->budget, "Memory budget (default: the training run's)")
      ->check(positive_bytes());
  cmd->add_option("--device", request->device,
                  "cpu, cuda, cuda:N, or auto (the first GPU when there is one)")
      ->capture_default_str();
  auto scratch = std::make_shared<std::string>();
  cmd->add_option("--scratch", *scratch,
                  "Directory for the scratch file of checkpoints offloaded to disk when they do "
                  "not fit the budget (default: the temporary directory)");
  auto base_mpp = std::make_shared<double>(0);
  cmd->add_option("--base-mpp", *base_mpp, "µm per level-0 pixel, for a slide whose file lacks it")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--roi", request->roi,
                  "GeoJSON region (QuPath export): map its polygons (outside: glass)");
  cmd->callback([&registry, request, checkpoint, slide, out, base_mpp, scratch] {
    registry.selected = [request, checkpoint, slide, out, base_mpp, scratch] {
      request->scratch_dir = *scratch;
      if (*base_mpp > 0) request->base_mpp = *base_mpp;
      request->checkpoint = *checkpoint;
      request->slide = *slide;
      request->out_dir = *out;
      ProgressPrinter progress(isatty(STDERR_FILENO) == 1);
      request->observer = &progress;
      const pipelines::HeatmapResult r = pipelines::make_heatmap(*request);
      std::cout << *slide << ": " << r.heatmap.rows << "×" << r.heatmap.cols << " cells of "
                << r.heatmap.cell_width << " px; slide prediction";
      // The maps are the classes' first, then any attention maps.
      for (size_t k = 0; k < r.slide_probabilities.size(); ++k) {
        std::cout << " " << r.heatmap.classes[k] << "=" << r.slide_probabilities[k];
      }
      std::cout << "\n  drawn: " << r.drawn << "\n  " << r.tiff.string() << "\n  " << r.png.string()
                << "\n  " << r.geojson.string() << "\n";
      return 0;
    };
  });
}

}  // namespace tessel::app
