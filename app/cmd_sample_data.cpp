// `tessel sample-data`: the synthetic demo dataset (H&E-like slides, manifest.csv, lesions.json).
#include <spdlog/spdlog.h>

#include <iostream>
#include <memory>
#include <string>

#include "app/command.h"
#include "core/device/runtime.h"
#include "io/sample_slides.h"

namespace tessel::app {

void register_sample_data(CLI::App& app, const GlobalOptions& global, CommandRegistry& registry) {
  auto* cmd = app.add_subcommand(
      "sample-data",
      "Write synthetic H&E-like slides (tumour slides carry lesions), manifest.csv and "
      "lesions.json; the same seed gives the same files");
  auto folder = std::make_shared<std::string>("sample_data");
  auto options = std::make_shared<io::SampleDataOptions>();
  cmd->add_option("--out", *folder, "Output folder")->capture_default_str();
  cmd->add_option("--slides", options->slides, "Number of slides (half tumour, half normal)")
      ->check(CLI::Range(1, 9999))
      ->capture_default_str();
  cmd->add_option("--size", options->size, "Level-0 width and height in pixels")
      ->check(CLI::Range(512, 200000))
      ->capture_default_str();
  cmd->add_option("--seed", options->seed, "Random seed")->capture_default_str();
  cmd->add_option("--mpp", options->mpp, "Microns per level-0 pixel written into the slides")
      ->check(CLI::Range(0.05, 10.0))
      ->capture_default_str();
  auto task = std::make_shared<std::string>("dense");
  cmd->add_option("--task", *task,
                  "What sets tumour slides apart: dense (lesions of dense dark nuclei, seen at "
                  "any resolution) or cells (foci of enlarged nuclei with the colour and density "
                  "of the tissue around them, and benign clusters of small nuclei on every slide: "
                  "seen only at cellular resolution)")
      ->check(CLI::IsMember({"dense", "cells"}))
      ->capture_default_str();
  cmd->add_flag("--force", options->force,
                "Write into a folder that holds other files (they are kept)");
  cmd->callback([&registry, &global, folder, options, task] {
    registry.selected = [&global, folder, options, task] {
      options->task = io::parse_sample_task(*task);
      // One slide per thread: each slide's libvips pipeline runs on one thread.
      options->workers = global.threads > 0 ? global.threads : core::hardware_threads();
      spdlog::info(
          "sample-data: {} slides of {}² px at {} mpp, seed {}, task {}, into {} ({} at once)",
          options->slides, options->size, options->mpp, options->seed, *task, *folder,
          options->workers);
      // The slides finish out of order (one per worker): the time left from how many are done.
      auto done = std::make_shared<int>(0);
      const auto slides = io::write_sample_data(
          *folder, *options,
          [done](const io::SampleSlide& slide, int index, int count, double elapsed_s) {
            ++*done;
            const double left = elapsed_s / *done * (count - *done);
            spdlog::info(
                "slide {}/{} {} ({}, {}, {} lesion(s), tissue {:.0f}%) · {} of {} done in {:.1f} "
                "s{}",
                index + 1, count, slide.file, slide.label, slide.split, slide.lesions.size(),
                100 * slide.tissue_fraction, *done, count, elapsed_s,
                *done < count ? fmt::format(", about {:.0f} s left", left) : std::string());
          });
      std::cout << "wrote " << slides.size() << " slides, manifest.csv and lesions.json to "
                << *folder << "\n";
      return 0;
    };
  });
}

}  // namespace tessel::app
