// OME-TIFF (as QuPath, bfconvert and tifffile write it) keeps its physical pixel size in OME-XML
// in the first page's ImageDescription, which OpenSlide passes on as tiff.ImageDescription without
// reading it. This reads the first image's Pixels element: its size and its physical pixel size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessel::io {

struct OmePixels {
  int64_t size_x = 0;  // pixels, as the XML says
  int64_t size_y = 0;
  std::optional<double> mpp_x;  // microns per pixel (PhysicalSizeX in its unit, converted)
  std::optional<double> mpp_y;
};

// nullopt when `description` is not OME-XML. Throws tessel::Error saying what is wrong when it
// is OME-XML without a readable Pixels element (no SizeX/SizeY), or with a physical size that is
// not a positive number or whose unit is not a length.
std::optional<OmePixels> read_ome_pixels(std::string_view description);

}  // namespace tessel::io
