// The synthetic demo dataset: H&E-like whole-slide images that OpenSlide opens as Aperio slides
// (pyramidal, JPEG-compressed, tiled TIFF with an mpp), a manifest and the lesions' positions.
// Tumour slides carry 1–4 lesions inside the tissue (SampleTask: dense dark-purple nuclei, or
// foci that differ only in their nuclei); normal slides none.
// The same seed and size give the same bytes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace tessel::io {

// What sets a tumour slide apart (`tessel sample-data --task`):
// - kDense: lesions of dense, dark purple nuclei, visible at any resolution (the first demo's).
// - kCells: foci 100–200 µm in radius whose nuclei are a carcinoma's: enlarged (two to three
//   times across, a quarter as many), vesicular (a dark rim around pale, coarse chromatin) and
//   nucleolated, so a focus has the colour and density of the tissue around it once a pixel is
//   larger than a nucleus; and on every slide, of either class, benign clusters of small crowded
//   nuclei, darker than the tissue at any resolution. The label lives in the nuclei: a model must
//   see them.
enum class SampleTask { kDense, kCells };
std::string to_string(SampleTask task);
// "dense" or "cells"; throws tessel::Error otherwise.
SampleTask parse_sample_task(const std::string& name);

struct SampleDataOptions {
  SampleTask task = SampleTask::kDense;
  int slides = 24;
  int64_t size = 8192;  // level-0 width and height in pixels
  uint64_t seed = 1;
  double mpp = 0.5;  // microns per level-0 pixel, written into the slides
  int workers = 1;   // slides generated at once (each with one libvips thread)
  // Write into a folder that holds files this generator did not make (they are kept).
  bool force = false;
};

// A disc in level-0 pixels.
struct Lesion {
  int64_t x = 0, y = 0, radius = 0;
  bool operator==(const Lesion&) const = default;
};

// A pen stroke (kCells): an arc of the circle of `radius` about (x, y), from `from` to `to`
// degrees, `width` thick, in level-0 pixels, in blue (or `green`) marker ink.
struct PenStroke {
  int64_t x = 0, y = 0, radius = 0, width = 0;
  double from = 0, to = 0;
  bool green = false;
  bool operator==(const PenStroke&) const = default;
};

struct SampleSlide {
  std::string file;              // relative to the output folder, e.g. "slide_001.tif"
  std::string label;             // "tumour" or "normal"
  std::string split;             // "train", "val" or "test"
  std::string patient;           // e.g. "patient_001"
  std::vector<Lesion> lesions;   // empty on normal slides
  std::vector<Lesion> clusters;  // kCells: benign clusters of small nuclei, on either class
  std::vector<PenStroke> pen;    // kCells: a ring drawn round a cluster, on either class
  double tissue_fraction = 0;    // of the slide's area, as designed
};

std::ostream& operator<<(std::ostream& out, const Lesion& lesion);

// Labels and splits for `count` slides: half tumour (the extra one when odd), and in each split
// as many tumour as normal slides, about 2/3 train, 1/6 val, 1/6 test. Pure.
std::vector<SampleSlide> plan_sample_slides(int count);

// Called after each slide is written: the slide, its index, the slide count and the seconds
// since the run started. Called from the worker threads, one call at a time.
using SampleProgress =
    std::function<void(const SampleSlide& slide, int index, int count, double elapsed_s)>;

// Writes the slides, manifest.csv (slide,label,split,patient) and lesions.json into `folder`
// (created if missing). Each file is written to a temporary name and renamed. Files this
// generator made before (slide_*.tif, manifest.csv, lesions.json) are replaced, README.md is kept;
// any other file makes it throw tessel::Error unless options.force. Returns the slides written.
std::vector<SampleSlide> write_sample_data(const std::filesystem::path& folder,
                                           const SampleDataOptions& options,
                                           const SampleProgress& progress = {});

// One slide: `slide.lesions` are placed here (inside the tissue, on tumour slides) and
// slide.tissue_fraction set. `slide_seed` fixes every random choice.
void write_sample_slide(const std::filesystem::path& path, SampleSlide& slide, int64_t size,
                        double mpp, uint64_t slide_seed, SampleTask task = SampleTask::kDense);

}  // namespace tessel::io
