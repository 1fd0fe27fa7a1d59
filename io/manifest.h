// A slide manifest: the CSV of slide-level labels a user brings (format: docs/manifest.md).
// Loading never stops at the first problem: every problem is collected with its CSV line, so a
// user fixes the file in one pass. Problems either reject the manifest (the file itself is wrong)
// or skip one slide (its file is missing or unreadable); see Manifest::unusable_reason().
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace tessel::io {

enum class Split { kTrain, kVal, kTest };
constexpr int kSplitCount = 3;

struct ManifestEntry {
  std::filesystem::path slide;  // absolute (relative paths are resolved against the CSV's folder)
  std::string label;            // as written in the CSV (trimmed)
  int class_index = 0;          // into Manifest::classes
  Split split = Split::kTrain;  // kTrain when the CSV has no split column
  std::string patient;          // empty: no patient column, or an empty cell
  std::map<std::string, std::string> metadata;  // other columns: header name → value
  int line = 0;                                 // where the row starts in the CSV (header: 1)
};

struct ManifestProblem {
  enum class Severity {
    kError,  // the manifest itself is wrong: it is rejected
    kSkip,   // one slide cannot be used: it is skipped, the rest go on
  };
  int line = 0;       // CSV line; 0 for the file as a whole
  std::string slide;  // the slide (resolved path) when the problem is about one slide
  std::string reason;
  Severity severity = Severity::kError;
};

struct Manifest {
  std::filesystem::path path;             // the CSV
  std::vector<std::string> classes;       // class index → name
  std::vector<ManifestEntry> entries;     // the usable slides, in CSV order
  std::vector<ManifestEntry> skipped;     // slides skipped for a kSkip problem
  std::vector<ManifestProblem> problems;  // in line order
  bool has_split_column = false;
  std::vector<std::string> metadata_columns;  // header names of the kept extra columns
  // Usable slides whose file has no mpp and whose row gives none (found by check_slides): a run
  // at an mpp or a magnification needs the row's `mpp` or the config's base_mpp for them.
  std::vector<ManifestEntry> without_mpp;

  // Empty when the manifest can be used: no kError problem, at least one slide remains, and no
  // split that has rows in the CSV lost all of them to skipping. Otherwise the reason.
  std::string unusable_reason() const;
  bool usable() const { return unusable_reason().empty(); }
};

struct ManifestOptions {
  // An explicit class order (the training config's `classes`): labels must be one of these names
  // (or an integer index into them), anything else is an error on its row. Empty: classes come
  // from the labels (integers 0..K-1 map to themselves, names are sorted byte-wise).
  std::vector<std::string> classes;
};

// Reads and validates `csv`. Checks that each slide file exists, but does not open it (see
// check_slides). Throws tessel::Error only when the file cannot be read at all or `options` is
// itself wrong; everything wrong inside the file becomes a ManifestProblem.
Manifest load_manifest(const std::filesystem::path& csv, const ManifestOptions& options = {});

// Opens every entry with OpenSlide and reads one small region of its smallest level, and reads its
// `roi` file against the slide's size; a slide that fails moves from `entries` to `skipped` with
// a kSkip problem giving the reason.
void check_slides(Manifest& manifest);

// A row's `mpp` cell: none (absent or empty) or a positive, finite number; throws tessel::Error
// "mpp '…' is not a positive number of microns per pixel" otherwise. load_manifest skips rows
// whose mpp this refuses, and whose `roi` names no regular file.
std::optional<double> manifest_mpp(const std::map<std::string, std::string>& metadata);
// A row's `roi` file, relative paths from the CSV's folder; none when the cell is absent or empty.
std::optional<std::filesystem::path> manifest_roi(
    const std::map<std::string, std::string>& metadata, const std::filesystem::path& csv);

// Replaces every entry's split with a seeded one, for manifests without a split column. Patients
// are never separated (a slide without a patient is its own patient); patients are stratified
// by class (a patient's class is its most frequent label, lowest index on ties) and each class's
// patients shuffled with `seed` and dealt to test, then val, until each holds about its fraction
// of that class's slides; at least one patient of each class stays in train. Same manifest and
// seed, same splits, on every platform.
void assign_splits(Manifest& manifest, double val_fraction, double test_fraction, uint64_t seed);

const char* to_string(Split split);  // "train", "val", "test"
std::ostream& operator<<(std::ostream& out, Split split);
std::ostream& operator<<(std::ostream& out, const ManifestProblem& problem);  // "line 4: ..."

}  // namespace tessel::io
