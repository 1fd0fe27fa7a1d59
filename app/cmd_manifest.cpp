// `tessel manifest check MANIFEST.csv [--open] [--classes a,b]`: what Tessel would train on from a
// manifest (classes, slides per class and split), every problem with its CSV line, and whether
// the manifest can be used (exit 0) or not (exit 1).
#include <array>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "app/command.h"
#include "io/manifest.h"

namespace tessel::app {
namespace {

struct CheckArgs {
  std::string csv;
  bool open = false;
  std::vector<std::string> classes;
};

std::string describe(const io::Manifest& manifest) {
  std::ostringstream out;
  out << "manifest  " << manifest.path.string() << "\n";
  out << "slides    " << manifest.entries.size() << " ok, " << manifest.skipped.size()
      << " skipped\n";
  std::vector<std::array<int, io::kSplitCount>> counts(manifest.classes.size());
  std::array<int, io::kSplitCount> totals{};
  for (const io::ManifestEntry& entry : manifest.entries) {
    ++counts[entry.class_index][static_cast<int>(entry.split)];
    ++totals[static_cast<int>(entry.split)];
  }
  size_t width = 0;
  for (const std::string& name : manifest.classes) width = std::max(width, name.size());
  out << "classes   " << manifest.classes.size() << " (index, name, usable slides in train / val "
      << "/ test)\n";
  for (size_t i = 0; i < manifest.classes.size(); ++i) {
    const std::string& name = manifest.classes[i];
    out << "  " << i << "  " << name << std::string(width - name.size(), ' ') << "  "
        << counts[i][0] << " / " << counts[i][1] << " / " << counts[i][2] << "\n";
  }
  out << "splits    train " << totals[0] << ", val " << totals[1] << ", test " << totals[2];
  if (!manifest.has_split_column) out << " (no split column: every slide is in train)";
  out << "\n";
  if (!manifest.metadata_columns.empty()) {
    out << "metadata  ";
    for (const std::string& name : manifest.metadata_columns) {
      out << (&name == &manifest.metadata_columns.front() ? "" : ", ") << name;
    }
    out << "\n";
  }
  out << "problems  " << manifest.problems.size() << "\n";
  for (const io::ManifestProblem& problem : manifest.problems) out << "  " << problem << "\n";
  if (!manifest.without_mpp.empty()) {
    // Not a problem for a run at a level; a run at an mpp or magnification fails on these.
    const size_t count = manifest.without_mpp.size();
    out << "no mpp    " << count << (count == 1 ? " slide says" : " slides say")
        << " nothing of its scale (microns per pixel):\n";
    for (const io::ManifestEntry& entry : manifest.without_mpp) {
      out << "  line " << entry.line << ": " << entry.slide.string() << "\n";
    }
    out << "  to train at an mpp or magnification, give each its scale: an `mpp` column in the "
           "manifest (0.25 for a 40x scan, 0.5 for 20x), or `base_mpp: 0.25` in the training "
           "config for all of them (--base-mpp 0.25 for tessel heatmap)\n";
  }
  return out.str();
}

int check(const CheckArgs& args) {
  io::Manifest manifest = io::load_manifest(args.csv, io::ManifestOptions{args.classes});
  // Opening slides only makes sense for a manifest that is not already rejected.
  const bool open = args.open && manifest.unusable_reason().empty();
  if (open) io::check_slides(manifest);
  std::cout << describe(manifest);
  const std::string reason = manifest.unusable_reason();
  if (!reason.empty()) {
    std::cout << "usable    no\n" << std::flush;
    std::cerr << "tessel: error: manifest " << args.csv << " cannot be used: " << reason << "\n";
    return 1;
  }
  std::cout << "usable    yes" << (open ? " (every usable slide opened and read)" : "") << "\n";
  return 0;
}

}  // namespace

void register_manifest(CLI::App& app, const GlobalOptions& /*global*/, CommandRegistry& registry) {
  auto* manifest = app.add_subcommand("manifest", "Work with slide manifests (CSV of labels)");
  manifest->require_subcommand(1);
  auto* cmd = manifest->add_subcommand(
      "check",
      "Validate a manifest: classes, slides per class and split, every problem with its line");
  auto args = std::make_shared<CheckArgs>();
  cmd->add_option("manifest", args->csv,
                  "The manifest CSV (columns slide, label[, split, "
                  "patient, ...])")
      ->required();
  cmd->add_flag("--open", args->open,
                "Also open every slide with OpenSlide and read a small region (slow on many "
                "slides); slides that fail are skipped");
  cmd->add_option("--classes", args->classes,
                  "The class names in index order, comma-separated (as the training config's "
                  "classes); labels outside it are errors")
      ->delimiter(',');
  cmd->callback([&registry, args] { registry.selected = [args] { return check(*args); }; });
}

}  // namespace tessel::app
