// Slide-reading throughput (`tessel bench read`): 512² region reads at level 0 of a JPEG tiled
// TIFF, through raw openslide_read_region and through the tile source on each pixel reader, each
// run cache cold (a fresh source or handle) with the file equally warm in the OS page cache.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tessel::pipelines {

struct ReadBenchOptions {
  std::filesystem::path slide;  // read this; empty: generate a sample slide of `size` (kept)
  int64_t size = 20000;         // level-0 edge of the generated slide
  int64_t region = 512;         // region edge; regions tile the level in a grid
  std::string order = "row";    // "row" (row-major) or "random" (seeded shuffle)
  int64_t limit = 0;            // read at most this many regions (0: the whole grid)
  std::vector<int> threads = {1, 2};
  // "raw" (openslide_read_region), "openslide" and "libvips" (the tile source, forced reader).
  std::vector<std::string> readers = {"raw", "openslide", "libvips"};
  uint64_t seed = 1;
};

struct ReadBenchResult {
  std::string reader;
  int threads = 0;  // threads decoding: raw: workers; tile source: the reader + threads − 1
  int64_t regions = 0;
  int64_t slide_width = 0, slide_height = 0;  // level 0
  double seconds = 0;
  double regions_per_s = 0;
  double mb_per_s = 0;  // RGB megabytes (10^6) of regions per second
  double wait_s = 0;    // tile source: time read() waited for pixels
};

// The slide the benchmark reads: options.slide, or a generated one in the temporary folder.
std::filesystem::path read_bench_slide(const ReadBenchOptions& options);

// One result per reader × thread count, in that order; `print` gets each as soon as it is done.
std::vector<ReadBenchResult> bench_read(const ReadBenchOptions& options,
                                        void (*print)(const std::string& json_line) = nullptr);

std::string to_json(const ReadBenchOptions& options, const std::filesystem::path& slide,
                    const ReadBenchResult& result);

}  // namespace tessel::pipelines
