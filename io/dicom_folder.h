// DICOM whole-slide images (DICOM WSI, Supplement 145) arrive as a folder of instances: one per
// pyramid level, label and overview. OpenSlide 4 opens such a slide given any one of its files and
// finds the rest beside it by their series; Tessel also accepts the folder itself.
#pragma once

#include <filesystem>

namespace tessel::io {

// True when `path` is a DICOM file (PS3.10: "DICM" after the 128-byte preamble).
bool is_dicom_file(const std::filesystem::path& path);

// The file of `folder` to hand OpenSlide: its first DICOM whole-slide instance by name. Throws
// tessel::Error naming the folder when it holds no DICOM whole-slide instance, and naming two
// files when it holds instances of two slides (two series): OpenSlide would silently open one.
// A DICOM instance that OpenSlide cannot open is named with OpenSlide's reason.
std::filesystem::path dicom_slide_file(const std::filesystem::path& folder);

}  // namespace tessel::io
