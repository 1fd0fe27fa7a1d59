#include "io/dicom_folder.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "io/openslide_api.h"

namespace tessel::io {
namespace {

namespace fs = std::filesystem;

struct Close {
  void operator()(openslide_t* osr) const noexcept { openslide().close(osr); }
};

std::vector<fs::path> dicom_files(const fs::path& folder, const std::string& prefix) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_regular_file(type_ec) && is_dicom_file(it->path())) files.push_back(it->path());
  }
  if (ec) throw Error(prefix + "cannot list the folder: " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

bool is_dicom_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::array<char, 132> head{};
  if (!in.read(head.data(), head.size())) return false;
  return std::memcmp(head.data() + 128, "DICM", 4) == 0;
}

fs::path dicom_slide_file(const fs::path& folder) {
  const std::string prefix = "cannot open slide " + folder.string() + ": ";
  const std::vector<fs::path> files = dicom_files(folder, prefix);
  if (files.empty()) {
    throw Error(prefix +
                "it is a folder without DICOM files (a slide is one file, or a folder holding the "
                "DICOM files of one whole-slide image)");
  }
  const OpenSlideApi& api = openslide();
  std::optional<fs::path> first;
  std::string first_series;
  for (const fs::path& file : files) {
    const char* vendor = api.detect_vendor(file.c_str());
    if (vendor == nullptr || std::string(vendor) != "dicom") {
      spdlog::debug("slide {}: {} is DICOM but not a whole-slide image; left out", folder.string(),
                    file.filename().string());
      continue;
    }
    const std::unique_ptr<openslide_t, Close> osr(api.open(file.c_str()));
    const char* error = osr ? api.get_error(osr.get()) : "OpenSlide cannot open it";
    if (error != nullptr) {
      throw Error(prefix + "broken DICOM file " + file.filename().string() + ": " + error);
    }
    const char* series = api.get_property_value(osr.get(), "dicom.SeriesInstanceUID");
    const std::string this_series = series != nullptr ? series : "";
    if (!first) {
      first = file;
      first_series = this_series;
    } else if (this_series != first_series) {
      throw Error(prefix + "it holds DICOM files of two slides (" + first->filename().string() +
                  " is series " + first_series + ", " + file.filename().string() + " is series " +
                  this_series + "): put each slide in its own folder, or name one slide's file");
    }
  }
  if (!first) {
    throw Error(prefix + "none of its " + std::to_string(files.size()) +
                " DICOM files is a whole-slide image (VL Whole Slide Microscopy) OpenSlide " +
                api.get_version() + " can read");
  }
  return *first;
}

}  // namespace tessel::io
