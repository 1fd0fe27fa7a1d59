// `tessel bench read` (slide reading) and `tessel bench allreduce` (the distributed exchange):
// the benches that need io/ or the process group, so not in the engine-only build.
#include <iostream>

#include "app/command.h"
#include "pipelines/distributed_bench.h"
#include "pipelines/read_bench.h"

namespace tessel::app {

void add_bench_read_and_allreduce(CLI::App* bench, CommandRegistry& registry) {
  auto read = std::make_shared<pipelines::ReadBenchOptions>();
  auto* read_cmd = bench->add_subcommand(
      "read", "Time 512² region reads at level 0: raw OpenSlide vs the tile source; JSON lines");
  read_cmd->add_option("--slide", read->slide, "Slide to read (default: generate one)");
  read_cmd->add_option("--size", read->size, "Edge of the generated slide")->capture_default_str();
  read_cmd->add_option("--region", read->region, "Region edge")->capture_default_str();
  read_cmd->add_option("--order", read->order, "row or random")
      ->check(CLI::IsMember({"row", "random"}))
      ->capture_default_str();
  read_cmd->add_option("--limit", read->limit, "At most this many regions (0: all)")
      ->capture_default_str();
  read_cmd->add_option("--threads", read->threads, "Thread counts")->delimiter(',');
  read_cmd->add_option("--readers", read->readers, "raw, openslide, libvips")
      ->delimiter(',')
      ->check(CLI::IsMember({"raw", "openslide", "libvips"}));
  read_cmd->callback([read, &registry] {
    registry.selected = [read] {
      pipelines::bench_read(*read, [](const std::string& line) { std::cout << line << std::endl; });
      return 0;
    };
  });

  // Under a launcher (docs/distributed.md): every rank runs it, rank 0 prints.
  struct AllreduceArgs {
    std::string model = "vgg-mini";
    int repeat = 10, warmup = 2;
    double bucket_mib = 25;
    pipelines::DistributedOptions dist;
  };
  auto ar = std::make_shared<AllreduceArgs>();
  auto* ar_cmd = bench->add_subcommand(
      "allreduce",
      "Time one step's gradient allreduce over the ranks a launcher started; one JSON line");
  ar_cmd->add_option("--model", ar->model, "Network whose gradients are summed")
      ->capture_default_str();
  ar_cmd->add_option("--repeat", ar->repeat, "Timed exchanges")->capture_default_str();
  ar_cmd->add_option("--warmup", ar->warmup, "Untimed exchanges first")->capture_default_str();
  ar_cmd->add_option("--bucket-mib", ar->bucket_mib, "Flat bucket size")
      ->check(CLI::Range(0.001, 65536.0))
      ->capture_default_str();
  ar_cmd->add_option("--rendezvous", ar->dist.rendezvous, "env:// or file:///shared/path")
      ->capture_default_str();
  ar_cmd->add_option("--dist-timeout", ar->dist.timeout_seconds, "Seconds")->capture_default_str();
  ar_cmd->add_option("--dist-backend", ar->dist.backend, "gloo or nccl (ranks on GPUs)")
      ->check(CLI::IsMember({"gloo", "nccl"}))
      ->capture_default_str();
  ar_cmd->callback([ar, &registry] {
    registry.selected = [ar] {
      const bool file = ar->dist.rendezvous.starts_with("file://");
      pipelines::Communicator communicator(
          pipelines::distributed_env(pipelines::process_environment(), !file), ar->dist);
      const pipelines::AllreduceBenchResult r =
          pipelines::bench_allreduce(communicator, ar->model, ar->repeat, ar->warmup,
                                     static_cast<int64_t>(ar->bucket_mib * (1 << 20)));
      if (communicator.rank() == 0) std::cout << pipelines::to_json(r) << std::endl;
      return 0;
    };
  });
}

}  // namespace tessel::app
