// libFuzzer harness of the training config reader (pipelines/train_config.h): the input is YAML
// text, optionally followed by a NUL byte and NUL-separated command-line overrides (`lr=0.1`).
// tessel::Error is the documented rejection. A config that is accepted must also survive what a
// run does with it: saved as YAML (the run folder, every checkpoint) and read back on resume, to
// the same YAML. Anything else escaping, a crash or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "pipelines/train_config.h"
#include "tests/fuzz/input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tessel::pipelines::parse_train_config;
  using tessel::pipelines::TrainConfig;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string yaml = input.substr(0, nul);
  std::vector<std::string> overrides;
  for (size_t begin = nul; begin != std::string::npos && begin < input.size();) {
    const size_t end = input.find('\0', begin + 1);
    overrides.push_back(input.substr(begin + 1, end == std::string::npos ? end : end - begin - 1));
    begin = end;
  }
  std::string saved;
  try {
    saved = parse_train_config(yaml, "fuzz.yaml", overrides).to_yaml();
  } catch (const tessel::Error&) {
    return 0;  // the documented rejection
  }
  // Outside the try: a saved config that does not read back is a finding, whatever it throws.
  const std::string resaved = parse_train_config(saved, "saved").to_yaml();
  tessel::fuzz::expect(resaved == saved, "a saved config reads back to the same YAML");
  return 0;
}
