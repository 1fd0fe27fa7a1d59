// `tessel import NET.onnx --out NET.h5`: a network from PyTorch (torchvision, timm) or any other
// framework, through ONNX, as a checkpoint a run trains (`model: NET.h5`). docs/models.md.
#include <iostream>
#include <memory>

#include "app/command.h"
#include "app/parse.h"
#include "core/error.h"
#include "pipelines/import_network.h"

namespace tessel::app {

void register_import(CLI::App& app, const GlobalOptions& /*global*/, CommandRegistry& registry) {
  struct Args {
    std::string onnx, out, size, batch_norm = "frozen";
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "import", "Import a network from an ONNX file as a checkpoint a run can train");
  cmd->add_option("onnx", args->onnx,
                  "The .onnx file (torch.onnx.export of a torchvision or "
                  "timm network, weights inside)")
      ->required();
  cmd->add_option("--out", args->out, "The checkpoint to write (NET.h5)")->required();
  cmd->add_option("--input-size", args->size,
                  "Image size WIDTHxHEIGHT the network is checked at (default: the file's input, "
                  "else 224x224)");
  cmd->add_option("--batch-norm", args->batch_norm,
                  "BatchNormalization as 'frozen' (a per-channel affine of the file's running "
                  "statistics) or 'train' (batch statistics while training, updating the running "
                  "ones)")
      ->check(CLI::IsMember({"frozen", "train"}));
  cmd->callback([args, &registry] {
    registry.selected = [args] {
      pipelines::ImportOptions options;
      if (!args->size.empty()) std::tie(options.height, options.width) = parse_size(args->size);
      if (args->batch_norm == "train") options.batch_norm = pipelines::BatchNormImport::kTrain;
      if (!args->out.ends_with(".h5")) {
        throw Error("--out " + args->out + ": a checkpoint's name ends in .h5");
      }
      const auto report = pipelines::import_onnx_file(args->onnx, args->out, options);
      std::cout << report.summary;
      return 0;
    };
  });
}

}  // namespace tessel::app
