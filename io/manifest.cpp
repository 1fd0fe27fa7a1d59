#include "io/manifest.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "io/resolution.h"
#include "io/roi.h"
#include "io/slide.h"
#include "io/user_file.h"

namespace tessel::io {
namespace {

namespace fs = std::filesystem;
using Severity = ManifestProblem::Severity;

struct Record {
  int line = 0;  // where the record starts: a quoted field may span lines
  std::vector<std::string> fields;
};

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  const auto last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) {
    return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  });
  return text;
}

// RFC 4180 with the leniency spreadsheets need: LF or CRLF line ends, a UTF-8 byte order mark,
// spaces around unquoted fields and after a closing quote ignored, a stray quote inside an
// unquoted field kept as a character. Records whose fields are all empty (blank lines, or the
// ",,," rows spreadsheets leave) are dropped.
std::vector<Record> parse_csv(std::string text, std::vector<ManifestProblem>& problems) {
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
  std::vector<Record> records;
  Record record{1, {}};
  std::string field;
  bool quoted = false;     // the current field started with a quote
  bool in_quotes = false;  // inside the quotes of a quoted field
  bool field_started = false;
  bool text_after_quote = false;  // reported once per field
  int line = 1;
  auto end_field = [&] {
    record.fields.push_back(quoted ? field : trimmed(field));
    field.clear();
    quoted = false;
    field_started = false;
    text_after_quote = false;
  };
  auto end_record = [&] {
    end_field();
    const bool blank = std::all_of(record.fields.begin(), record.fields.end(),
                                   [](const std::string& f) { return trimmed(f).empty(); });
    if (!blank) records.push_back(std::move(record));
    record = Record{line + 1, {}};
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_quotes) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        in_quotes = false;
      } else {
        if (c == '\n') ++line;
        field += c;
      }
    } else if (c == '"' && !field_started) {
      quoted = in_quotes = field_started = true;
      field.clear();  // spaces before the opening quote
    } else if (c == ',') {
      end_field();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      end_record();
      ++line;
    } else if (quoted) {
      if (c != ' ' && c != '\t' && !text_after_quote) {
        text_after_quote = true;
        problems.push_back({record.line, "",
                            "text after the closing quote of a quoted field (write a quote inside "
                            "a quoted field as two quotes: \"\")",
                            Severity::kError});
      }
    } else {
      if (c != ' ' && c != '\t') field_started = true;
      field += c;
    }
  }
  if (in_quotes) {
    problems.push_back({record.line, "",
                        "a quoted field is never closed (the file ends inside quotes)",
                        Severity::kError});
    return records;  // the unclosed record's fields are not what the user meant
  }
  if (field_started || !field.empty() || !record.fields.empty()) end_record();
  return records;
}

std::string read_file(const fs::path& csv) {
  return read_user_file(csv, "cannot read manifest " + csv.string() + ": ", kMaxTextFileBytes);
}

// Labels that are all ASCII digits name a class by its index.
std::optional<int> integer_label(const std::string& label) {
  if (label.empty() || label.size() > 9) return std::nullopt;
  if (!std::all_of(label.begin(), label.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return std::stoi(label);
}

std::optional<Split> parse_split(const std::string& text) {
  const std::string name = lowercase(text);
  if (name == "train") return Split::kTrain;
  if (name == "val") return Split::kVal;
  if (name == "test") return Split::kTest;
  return std::nullopt;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// The key two rows name the same slide by: symlinks and "a/../b" resolved where the file exists.
std::string same_file_key(const fs::path& slide) {
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(slide, ec);
  return (ec ? slide.lexically_normal() : canonical).string();
}

// Why a row's `mpp` or `roi` cannot be used, or "" (the file itself is read with the slide).
std::string metadata_problem(const std::map<std::string, std::string>& metadata,
                             const fs::path& csv) {
  try {
    (void)manifest_mpp(metadata);
  } catch (const Error& e) {
    return e.what();
  }
  if (const std::optional<fs::path> roi = manifest_roi(metadata, csv)) {
    if (const std::string why = not_a_regular_file(*roi); !why.empty()) {
      return "region of interest " + roi->string() + ": " + why;
    }
  }
  return {};
}

struct Columns {
  int slide = -1, label = -1, split = -1, patient = -1;
  std::vector<std::pair<int, std::string>> metadata;  // index, header name
};

// Finds the columns by name (case-insensitive, trimmed); problems go on the header's line.
Columns read_header(const Record& header, std::vector<ManifestProblem>& problems) {
  Columns columns;
  std::map<std::string, int> seen;
  for (int i = 0; i < static_cast<int>(header.fields.size()); ++i) {
    const std::string name = trimmed(header.fields[i]);
    const std::string key = lowercase(name);
    if (key.empty()) continue;  // spreadsheets leave unnamed trailing columns: nothing to keep
    if (auto [it, fresh] = seen.emplace(key, i); !fresh) {
      problems.push_back(
          {header.line, "", "the header names column \"" + name + "\" twice", Severity::kError});
      continue;
    }
    if (key == "slide") {
      columns.slide = i;
    } else if (key == "label") {
      columns.label = i;
    } else if (key == "split") {
      columns.split = i;
    } else if (key == "patient") {
      columns.patient = i;
    } else {
      // The columns Tessel reads (`mpp`, `roi`) under their own names, whatever their case.
      columns.metadata.emplace_back(i, key == "mpp" || key == "roi" ? key : name);
    }
  }
  for (auto [index, name] : {std::pair{columns.slide, "slide"}, {columns.label, "label"}}) {
    if (index < 0) {
      problems.push_back({header.line, "",
                          std::string("the header has no \"") + name +
                              "\" column (the first row must name the columns; slide and label "
                              "are required)",
                          Severity::kError});
    }
  }
  return columns;
}

// Class names in index order, from the labels of every row (skipped slides included, so that a
// missing file never shifts the indices of the others).
std::vector<std::string> classes_from_labels(const std::vector<std::string>& labels,
                                             std::vector<ManifestProblem>& problems) {
  if (labels.empty()) return {};
  const bool all_integers = std::all_of(labels.begin(), labels.end(), [](const std::string& l) {
    return integer_label(l).has_value();
  });
  if (!all_integers) {
    const std::set<std::string> names(labels.begin(), labels.end());
    return {names.begin(), names.end()};
  }
  std::set<int> indices;
  for (const std::string& label : labels) indices.insert(*integer_label(label));
  const int count = *indices.rbegin() + 1;
  std::vector<std::string> classes;
  for (int i : indices) classes.push_back(std::to_string(i));
  if (count == static_cast<int>(indices.size())) return classes;
  // A gap rejects the manifest; the classes present stay listed, and a label like 999999999 must
  // not make a billion classes.
  std::vector<std::string> missing;
  for (int i = 0; i < count && missing.size() < 6; ++i) {
    if (!indices.contains(i)) missing.push_back(std::to_string(i));
  }
  if (missing.size() == 6) missing.back() = "...";
  problems.push_back({0, "",
                      "integer labels are class indices and must cover 0.." +
                          std::to_string(count - 1) + ", but no slide has label " +
                          joined(missing) +
                          " (renumber the labels, or give the class list explicitly)",
                      Severity::kError});
  return classes;
}

std::optional<int> class_of(const std::string& label, const std::vector<std::string>& classes) {
  const auto it = std::find(classes.begin(), classes.end(), label);
  if (it != classes.end()) return static_cast<int>(it - classes.begin());
  const auto index = integer_label(label);
  if (index && *index < static_cast<int>(classes.size())) return *index;
  return std::nullopt;
}

// Deterministic on every platform, unlike std::shuffle and std::uniform_int_distribution, whose
// algorithms the standard leaves to the library.
template <typename T>
void seeded_shuffle(std::vector<T>& items, std::mt19937_64& rng) {
  for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[rng() % i]);
}

}  // namespace

const char* to_string(Split split) {
  switch (split) {
    case Split::kTrain:
      return "train";
    case Split::kVal:
      return "val";
    case Split::kTest:
      return "test";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& out, Split split) { return out << to_string(split); }

std::ostream& operator<<(std::ostream& out, const ManifestProblem& problem) {
  if (problem.line > 0) out << "line " << problem.line << ": ";
  out << (problem.severity == Severity::kError ? "error: " : "skipped: ") << problem.reason;
  return out;
}

std::string Manifest::unusable_reason() const {
  const auto errors = std::count_if(problems.begin(), problems.end(),
                                    [](const auto& p) { return p.severity == Severity::kError; });
  if (errors > 0) {
    return std::to_string(errors) + (errors == 1 ? " error" : " errors") +
           " in the manifest (each is listed with its line)";
  }
  if (entries.empty()) {
    return skipped.empty() ? "it lists no slides" : "every slide was skipped";
  }
  std::array<int, kSplitCount> usable{}, listed{};
  for (const ManifestEntry& entry : entries) ++usable[static_cast<int>(entry.split)];
  for (const ManifestEntry& entry : skipped) ++listed[static_cast<int>(entry.split)];
  for (int s = 0; s < kSplitCount; ++s) {
    if (listed[s] > 0 && usable[s] == 0) {
      return std::string("every slide of the ") + to_string(static_cast<Split>(s)) +
             " split was skipped";
    }
  }
  return "";
}

Manifest load_manifest(const fs::path& csv, const ManifestOptions& options) {
  const std::set<std::string> explicit_names(options.classes.begin(), options.classes.end());
  if (explicit_names.size() != options.classes.size() || explicit_names.contains("")) {
    throw Error("the class list for manifest " + csv.string() +
                " names a class twice or has an empty name: " + joined(options.classes));
  }
  Manifest manifest;
  manifest.path = csv;
  std::vector<ManifestProblem>& problems = manifest.problems;
  const std::vector<Record> records = parse_csv(read_file(csv), problems);
  if (records.empty()) {
    problems.push_back({0, "",
                        "the file is empty (the first row must be a header naming the slide and "
                        "label columns)",
                        Severity::kError});
    return manifest;
  }
  for (const std::string& name : records.front().fields) {
    if (const std::string bad = utf8_problem(name); !bad.empty()) {
      problems.push_back({records.front().line, "",
                          "the header is not UTF-8 text (" + bad + "); save the manifest as UTF-8",
                          Severity::kError});
      return manifest;
    }
  }
  const Columns columns = read_header(records.front(), problems);
  if (columns.slide < 0 || columns.label < 0) return manifest;
  manifest.has_split_column = columns.split >= 0;
  for (const auto& [index, name] : columns.metadata) manifest.metadata_columns.push_back(name);

  const fs::path folder = fs::absolute(csv).parent_path();
  const size_t field_count = records.front().fields.size();
  struct Row {
    ManifestEntry entry;
    std::string slide_as_written;
    bool ok = true;
  };
  std::vector<Row> rows;
  std::vector<std::string> labels;
  for (size_t r = 1; r < records.size(); ++r) {
    const Record& record = records[r];
    Row row;
    row.entry.line = record.line;
    auto error = [&](const std::string& reason) {
      problems.push_back({record.line, row.entry.slide.string(), reason, Severity::kError});
      row.ok = false;
    };
    if (record.fields.size() != field_count) {
      error("the row has " + std::to_string(record.fields.size()) +
            (record.fields.size() == 1 ? " field" : " fields") + ", the header has " +
            std::to_string(field_count) + " (a comma inside a value needs quotes around it)");
      continue;
    }
    // Names, labels and paths go into JSON records and HDF5 attributes: UTF-8 only, refused here
    // with the line rather than mid-run (a cp1252 "é" once ended training naming nothing).
    for (size_t f = 0; f < record.fields.size() && row.ok; ++f) {
      if (const std::string bad = utf8_problem(record.fields[f]); !bad.empty()) {
        error("the " + trimmed(records.front().fields[f]) + " column is not UTF-8 text (" + bad +
              "); save the manifest as UTF-8, and rename files whose names are not");
      }
    }
    if (!row.ok) continue;
    auto cell = [&](int column) { return trimmed(record.fields[column]); };
    row.slide_as_written = cell(columns.slide);
    row.entry.label = cell(columns.label);
    if (columns.patient >= 0) row.entry.patient = cell(columns.patient);
    for (const auto& [index, name] : columns.metadata) {
      row.entry.metadata[name] = record.fields[index];
    }
    if (row.slide_as_written.empty()) {
      error("the slide path is empty");
    } else {
      const fs::path slide(row.slide_as_written);
      row.entry.slide = (slide.is_absolute() ? slide : folder / slide).lexically_normal();
    }
    if (row.entry.label.empty()) {
      error("the label is empty");
    } else {
      labels.push_back(row.entry.label);
    }
    if (columns.split >= 0) {
      const std::string split = cell(columns.split);
      if (const auto parsed = parse_split(split)) {
        row.entry.split = *parsed;
      } else {
        error(split.empty() ? "the split is empty (use train, val or test)"
                            : "unknown split \"" + split + "\" (use train, val or test)");
      }
    }
    rows.push_back(std::move(row));
  }

  // Classes.
  if (options.classes.empty()) {
    manifest.classes = classes_from_labels(labels, problems);
  } else {
    manifest.classes = options.classes;
  }
  for (Row& row : rows) {
    if (row.entry.label.empty()) continue;
    if (const auto index = class_of(row.entry.label, manifest.classes)) {
      row.entry.class_index = *index;
    } else if (!options.classes.empty()) {
      problems.push_back({row.entry.line, row.entry.slide.string(),
                          "label \"" + row.entry.label + "\" is not one of the classes (" +
                              joined(manifest.classes) + ")",
                          Severity::kError});
      row.ok = false;
    }
  }

  // Duplicates and patients across splits: both make a split leak into another.
  std::map<std::string, int> line_of_slide;
  std::map<std::string, std::pair<Split, int>> split_of_patient;
  for (Row& row : rows) {
    if (!row.slide_as_written.empty()) {
      const auto [it, fresh] =
          line_of_slide.emplace(same_file_key(row.entry.slide), row.entry.line);
      if (!fresh) {
        problems.push_back({row.entry.line, row.entry.slide.string(),
                            "duplicate slide: " + row.entry.slide.string() +
                                " is already listed on line " + std::to_string(it->second),
                            Severity::kError});
        row.ok = false;
      }
    }
    if (columns.split >= 0 && !row.entry.patient.empty() && row.ok) {
      const auto [it, fresh] =
          split_of_patient.emplace(row.entry.patient, std::pair{row.entry.split, row.entry.line});
      if (!fresh && it->second.first != row.entry.split) {
        problems.push_back({row.entry.line, row.entry.slide.string(),
                            "patient \"" + row.entry.patient + "\" is in " +
                                to_string(row.entry.split) + " here but in " +
                                to_string(it->second.first) + " on line " +
                                std::to_string(it->second.second) +
                                " (a patient's slides must all be in one split)",
                            Severity::kError});
        row.ok = false;
      }
    }
  }

  // Slide files last: a missing file skips the slide, it does not reject the manifest; so do an
  // `mpp` or `roi` that training could not use (found here, not mid-run).
  for (Row& row : rows) {
    if (!row.ok) continue;
    std::error_code ec;
    std::string skip;
    if (!fs::exists(row.entry.slide, ec)) {
      skip = "slide file not found: " + row.entry.slide.string();
    } else {
      skip = metadata_problem(row.entry.metadata, csv);
    }
    if (!skip.empty()) {
      problems.push_back({row.entry.line, row.entry.slide.string(), skip, Severity::kSkip});
      manifest.skipped.push_back(std::move(row.entry));
    } else {
      manifest.entries.push_back(std::move(row.entry));
    }
  }
  std::stable_sort(problems.begin(), problems.end(),
                   [](const auto& a, const auto& b) { return a.line < b.line; });
  return manifest;
}

std::optional<double> manifest_mpp(const std::map<std::string, std::string>& metadata) {
  const auto cell = metadata.find("mpp");
  if (cell == metadata.end() || trimmed(cell->second).empty()) return std::nullopt;
  const std::string text = trimmed(cell->second);
  try {
    return parse_mpp(text);  // --mpp's rule: positive and finite, "0.5mpp" too
  } catch (const Error&) {
    throw Error("mpp '" + text + "' is not a positive number of microns per pixel");
  }
}

std::optional<fs::path> manifest_roi(const std::map<std::string, std::string>& metadata,
                                     const fs::path& csv) {
  const auto cell = metadata.find("roi");
  if (cell == metadata.end() || trimmed(cell->second).empty()) return std::nullopt;
  const fs::path roi(trimmed(cell->second));
  return roi.is_absolute() ? roi : fs::absolute(csv).parent_path() / roi;
}

void check_slides(Manifest& manifest) {
  std::vector<ManifestEntry> usable;
  for (ManifestEntry& entry : manifest.entries) {
    try {
      const Slide slide(entry.slide);
      // The smallest level is the cheapest read that still goes through the tile decoder.
      const int level = slide.level_count() - 1;
      const Level& size = slide.level(level);
      const int64_t width = std::min<int64_t>(size.width, 64);
      const int64_t height = std::min<int64_t>(size.height, 64);
      slide.read_region(level, (size.width - width) / 2, (size.height - height) / 2, width, height);
      if (const std::optional<fs::path> roi = manifest_roi(entry.metadata, manifest.path)) {
        // Its polygons on this slide: training would skip the slide for a broken or foreign ROI.
        (void)read_roi(*roi, slide.level(0).width, slide.level(0).height);
      }
      if (!(slide.mpp_x() && slide.mpp_y()) && !manifest_mpp(entry.metadata)) {
        manifest.without_mpp.push_back(entry);
      }
      usable.push_back(std::move(entry));
    } catch (const Error& e) {
      manifest.problems.push_back({entry.line, entry.slide.string(), e.what(), Severity::kSkip});
      manifest.skipped.push_back(std::move(entry));
    }
  }
  manifest.entries = std::move(usable);
  std::stable_sort(manifest.problems.begin(), manifest.problems.end(),
                   [](const auto& a, const auto& b) { return a.line < b.line; });
  std::stable_sort(manifest.skipped.begin(), manifest.skipped.end(),
                   [](const auto& a, const auto& b) { return a.line < b.line; });
}

void assign_splits(Manifest& manifest, double val_fraction, double test_fraction, uint64_t seed) {
  if (!(val_fraction >= 0 && test_fraction >= 0 && val_fraction + test_fraction < 1)) {
    throw Error("split fractions must be at least 0 and leave some slides for training: val " +
                std::to_string(val_fraction) + ", test " + std::to_string(test_fraction));
  }
  // Patients, keyed so that the order (and so the shuffle) does not depend on the CSV's order.
  struct Patient {
    std::string key;
    std::vector<size_t> entries;
    int class_index = 0;
  };
  std::map<std::string, Patient> patients;
  for (size_t i = 0; i < manifest.entries.size(); ++i) {
    const ManifestEntry& entry = manifest.entries[i];
    const std::string key =
        entry.patient.empty() ? "slide\x1f" + entry.slide.string() : "patient\x1f" + entry.patient;
    patients[key].key = key;
    patients[key].entries.push_back(i);
  }
  std::map<int, std::vector<Patient>> by_class;
  for (auto& [key, patient] : patients) {
    std::map<int, int> votes;
    for (size_t i : patient.entries) ++votes[manifest.entries[i].class_index];
    patient.class_index = std::max_element(votes.begin(), votes.end(), [](auto& a, auto& b) {
                            return a.second < b.second;  // first maximum: lowest index on ties
                          })->first;
    by_class[patient.class_index].push_back(std::move(patient));
  }
  std::mt19937_64 rng(seed);
  for (auto& [class_index, group] : by_class) {
    seeded_shuffle(group, rng);
    size_t slides = 0;
    for (const Patient& p : group) slides += p.entries.size();
    const double want_test = test_fraction * static_cast<double>(slides);
    const double want_val = val_fraction * static_cast<double>(slides);
    size_t in_test = 0, in_val = 0;
    for (size_t g = 0; g < group.size(); ++g) {
      const size_t size = group[g].entries.size();
      const bool last = g + 1 == group.size();  // keeps one patient of the class in train
      // A patient joins a split while that gets the split nearer its target than leaving it.
      Split split = Split::kTrain;
      if (!last && std::abs(in_test + size - want_test) < std::abs(in_test - want_test)) {
        split = Split::kTest;
        in_test += size;
      } else if (!last && std::abs(in_val + size - want_val) < std::abs(in_val - want_val)) {
        split = Split::kVal;
        in_val += size;
      }
      for (size_t i : group[g].entries) manifest.entries[i].split = split;
    }
  }
}

}  // namespace tessel::io
