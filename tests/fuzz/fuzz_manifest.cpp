// libFuzzer harness of the manifest reader (io/manifest.h). load_manifest documents tessel::Error
// for a file it cannot read at all; everything wrong inside the CSV must come back as a
// ManifestProblem. So any exception, crash or sanitizer report here is a finding.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/manifest.h"
#include "tests/fuzz/input_file.h"

namespace {

using tessel::fuzz::expect;
using tessel::io::Manifest;
using tessel::io::ManifestOptions;
using tessel::io::ManifestProblem;

void check(const Manifest& m) {
  std::ostringstream shown;
  for (const ManifestProblem& p : m.problems) shown << p << "\n";
  for (const auto& e : m.entries) {
    expect(e.class_index >= 0 && e.class_index < static_cast<int>(m.classes.size()),
           "every usable entry has a class index into the classes");
    expect(e.slide.is_absolute(), "every entry's slide path is absolute");
  }
  const bool usable = m.usable();
  expect(usable == m.unusable_reason().empty(), "usable() agrees with unusable_reason()");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Relative slide paths resolve against the CSV's folder, where these exist: the seed corpus
  // names them, so rows get past the file check into the usable entries.
  static const tessel::fuzz::InputFile csv("manifest.csv", {"a.svs", "b.svs", "c.svs", "d.svs"});
  const auto& path = csv.write(data, size);
  try {
    Manifest m = tessel::io::load_manifest(path);
    check(m);
    if (m.usable()) tessel::io::assign_splits(m, 0.25, 0.25, size);
    // The same file against an explicit class list (the training config's `classes`), in
    // reverse so that indices and names disagree.
    if (!m.classes.empty()) {
      ManifestOptions options;
      options.classes.assign(m.classes.rbegin(), m.classes.rend());
      check(tessel::io::load_manifest(path, options));
    }
  } catch (const tessel::Error&) {
    // The documented rejection.
  }
  return 0;
}
