// `tessel eval --checkpoint ck.h5 [--manifest data.csv] [--split test] [--out predictions.csv]`:
// per-slide predictions and the metrics of a trained checkpoint.
#include <unistd.h>

#include <iostream>
#include <memory>

#include "app/command.h"
#include "app/parse.h"
#include "app/progress.h"
#include "pipelines/evaluate.h"

namespace tessel::app {

void register_eval(CLI::App& app, const GlobalOptions& /*global*/, CommandRegistry& registry) {
  auto* cmd = app.add_subcommand(
      "eval", "Predict every slide of a split with a trained checkpoint; print the metrics");
  auto request = std::make_shared<pipelines::EvaluationRequest>();
  auto checkpoint = std::make_shared<std::string>();
  auto manifest = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  cmd->add_option("--checkpoint", *checkpoint, "A checkpoint written by tessel train")->required();
  cmd->add_option("--manifest", *manifest, "Slides and labels (default: the training manifest)");
  cmd->add_option("--split", request->split, "train, val, test or all")
      ->check(CLI::IsMember({"train", "val", "test", "all"}))
      ->capture_default_str();
  cmd->add_option("--out", *out, "Write per-slide predictions to this CSV");
  cmd->add_option("--budget", request->budget, "Memory budget (default: the training run's)")
      ->check(positive_bytes());
  cmd->add_option("--device", request->device,
                  "cpu, cuda, cuda:N, or auto (the first GPU when there is one)")
      ->capture_default_str();
  auto inputs = std::make_shared<std::string>();
  cmd->add_option("--save-inputs", *inputs,
                  "Write each slide's network input (raw float32) and logits to this folder, to "
                  "check an exported ONNX network against this evaluation (small slides)");
  auto scratch = std::make_shared<std::string>();
  cmd->add_option("--scratch", *scratch,
                  "Directory for the scratch file of checkpoints offloaded to disk when they do "
                  "not fit the budget (default: the temporary directory)");
  cmd->callback([&registry, request, checkpoint, manifest, out, scratch, inputs] {
    registry.selected = [request, checkpoint, manifest, out, scratch, inputs] {
      request->inputs_dir = *inputs;
      request->checkpoint = *checkpoint;
      request->scratch_dir = *scratch;
      request->manifest = *manifest;
      request->predictions_csv = *out;
      ProgressPrinter progress(isatty(STDERR_FILENO) == 1);
      request->observer = &progress;
      const pipelines::EvaluationResult r = pipelines::evaluate(*request);
      for (const pipelines::SlidePrediction& p : r.predictions) {
        std::cout << p.slide << "  label " << p.label << "  p";
        for (size_t k = 0; k < r.classes.size(); ++k) {
          std::cout << " " << r.classes[k] << "=" << p.probabilities[k];
        }
        std::cout << "\n";
      }
      std::cout << request->split << ": " << pipelines::to_string(r.metrics, r.classes);
      if (r.skipped > 0) std::cout << " · " << r.skipped << " skipped";
      std::cout << "\n";
      if (!out->empty()) std::cout << "predictions: " << *out << "\n";
      return 0;
    };
  });
}

}  // namespace tessel::app
