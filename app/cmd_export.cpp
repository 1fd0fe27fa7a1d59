// `tessel export CKPT --onnx NET.onnx`: a trained network as an ONNX file for deployment in other
// tools (onnxruntime and anything that reads ONNX), issue 19.
#include <iostream>
#include <memory>

#include "app/command.h"
#include "pipelines/onnx_export.h"

namespace tessel::app {

void register_export(CLI::App& app, const GlobalOptions& /*global*/, CommandRegistry& registry) {
  struct Args {
    std::string checkpoint, onnx;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "export", "Write a trained checkpoint's network as an ONNX file that onnxruntime runs");
  cmd->add_option("checkpoint", args->checkpoint,
                  "A checkpoint written by tessel train (or tessel import)")
      ->required();
  cmd->add_option("--onnx", args->onnx, "The ONNX file to write (NET.onnx)")->required();
  cmd->callback([args, &registry] {
    registry.selected = [args] {
      std::cout << pipelines::export_onnx_file(args->checkpoint, args->onnx).summary;
      return 0;
    };
  });
}

}  // namespace tessel::app
