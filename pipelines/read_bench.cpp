#include "pipelines/read_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/error.h"
#include "io/openslide_api.h"
#include "io/sample_slides.h"
#include "io/slide.h"
#include "io/slide_tile_source.h"

namespace tessel::pipelines {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<core::Region> regions_of(const ReadBenchOptions& o, int64_t height, int64_t width) {
  std::vector<core::Region> regions;
  for (int64_t y = 0; y + o.region <= height; y += o.region) {
    for (int64_t x = 0; x + o.region <= width; x += o.region) {
      regions.push_back({{y, y + o.region}, {x, x + o.region}});
    }
  }
  if (o.order == "random") {
    std::mt19937_64 rng(o.seed);
    std::shuffle(regions.begin(), regions.end(), rng);
  } else if (o.order != "row") {
    throw Error("bench read: order must be row or random, not " + o.order);
  }
  if (o.limit > 0 && static_cast<int64_t>(regions.size()) > o.limit) {
    regions.resize(static_cast<size_t>(o.limit));
  }
  return regions;
}

// Every run starts with the file in the OS page cache, so no reader pays the disk for another.
void warm_page_cache(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buffer(size_t{8} << 20);
  while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) || in.gcount() > 0) {
  }
}

struct CloseOpenSlide {
  void operator()(openslide_t* osr) const noexcept { io::openslide().close(osr); }
};

// openslide_read_region into ARGB, as a program without Tessel would call it.
double run_raw(const std::filesystem::path& path, const std::vector<core::Region>& regions,
               int threads) {
  const auto t0 = Clock::now();  // opening included, as for the tile source
  const io::OpenSlideApi& api = io::openslide();
  std::unique_ptr<openslide_t, CloseOpenSlide> osr(api.open(path.c_str()));
  if (!osr || api.get_error(osr.get()) != nullptr) {
    throw Error("bench read: OpenSlide cannot open " + path.string());
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      std::vector<uint32_t> argb;
      for (size_t i = next++; i < regions.size(); i = next++) {
        const core::Region& r = regions[i];
        argb.resize(static_cast<size_t>(r.area()));
        api.read_region(osr.get(), argb.data(), r.x.begin, r.y.begin, 0, r.x.size(), r.y.size());
      }
      if (api.get_error(osr.get()) != nullptr) failed = true;
    });
  }
  for (std::thread& worker : workers) worker.join();
  if (failed) throw Error("bench read: OpenSlide failed reading " + path.string());
  return seconds_since(t0);
}

// The engine's pattern: one thread reads the regions in order after announcing them
// (will_read); threads − 1 pool threads prefetch. A fresh source: the cache is cold.
double run_tile_source(const std::filesystem::path& path, const std::vector<core::Region>& regions,
                       int threads, io::PixelReader reader, double* wait_s) {
  io::SlideTileSourceOptions options;
  options.reader = reader;
  options.threads = threads - 1;
  options.tile_size = 512;
  const auto t0 = Clock::now();
  io::SlideTileSource source(std::make_shared<const io::Slide>(path), 0, options);
  source.will_read(regions);
  for (const core::Region& r : regions) source.read(r);
  const double seconds = seconds_since(t0);
  *wait_s = static_cast<double>(source.cache_stats().wait_ns) * 1e-9;
  return seconds;
}

}  // namespace

std::filesystem::path read_bench_slide(const ReadBenchOptions& options) {
  if (!options.slide.empty()) return options.slide;
  const auto path = std::filesystem::temp_directory_path() /
                    ("tessel-read-bench-" + std::to_string(options.size) + ".tif");
  if (std::filesystem::exists(path)) return path;
  io::SampleSlide slide = io::plan_sample_slides(1).front();
  const auto partial = path.string() + ".partial";
  io::write_sample_slide(partial, slide, options.size, 0.5, options.seed);
  std::filesystem::rename(partial, path);
  return path;
}

std::vector<ReadBenchResult> bench_read(const ReadBenchOptions& options,
                                        void (*print)(const std::string&)) {
  const std::filesystem::path path = read_bench_slide(options);
  const io::Slide slide(path);
  const std::vector<core::Region> regions =
      regions_of(options, slide.level(0).height, slide.level(0).width);
  if (regions.empty()) throw Error("bench read: the slide is smaller than one region");
  std::vector<ReadBenchResult> results;
  for (const std::string& reader : options.readers) {
    for (const int threads : options.threads) {
      if (threads < 1) throw Error("bench read: threads must be at least 1");
      warm_page_cache(path);
      ReadBenchResult r;
      r.reader = reader;
      r.threads = threads;
      r.regions = static_cast<int64_t>(regions.size());
      r.slide_width = slide.level(0).width;
      r.slide_height = slide.level(0).height;
      if (reader == "raw") {
        r.seconds = run_raw(path, regions, threads);
      } else {
        r.seconds =
            run_tile_source(path, regions, threads, io::parse_pixel_reader(reader), &r.wait_s);
      }
      r.regions_per_s = static_cast<double>(r.regions) / r.seconds;
      r.mb_per_s =
          r.regions_per_s * 3.0 * static_cast<double>(options.region * options.region) / 1e6;
      results.push_back(r);
      if (print != nullptr) print(to_json(options, path, r));
    }
  }
  return results;
}

std::string to_json(const ReadBenchOptions& o, const std::filesystem::path& slide,
                    const ReadBenchResult& r) {
  nlohmann::json j;
  j["bench"] = "read";
  j["slide"] = slide.string();
  j["width"] = r.slide_width;
  j["height"] = r.slide_height;
  j["region"] = o.region;
  j["order"] = o.order;
  j["reader"] = r.reader;
  j["threads"] = r.threads;
  j["regions"] = r.regions;
  j["seconds"] = r.seconds;
  j["regions_per_s"] = r.regions_per_s;
  j["mb_per_s"] = r.mb_per_s;
  j["wait_s"] = r.wait_s;
  return j.dump();
}

}  // namespace tessel::pipelines
