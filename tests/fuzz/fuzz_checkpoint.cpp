// libFuzzer harness of the checkpoint reader (io/checkpoint.h): any bytes as an .h5 file.
// read_checkpoint documents tessel::Error for a file that is missing, damaged, truncated, fails a
// checksum or is not a Tessel checkpoint; anything else escaping (c10::Error, std::bad_alloc), a
// crash (in Tessel or in HDF5) or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/checkpoint.h"
#include "tests/fuzz/input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tessel::fuzz::InputFile file("checkpoint.h5");
  const auto& path = file.write(data, size);
  try {
    const tessel::io::CheckpointState state = tessel::io::read_checkpoint(path);
    for (const tessel::io::NamedTensor& t : state.weights) {
      tessel::fuzz::expect(t.tensor.defined() && !t.name.empty(), "weights are named tensors");
    }
  } catch (const tessel::Error&) {
    // The documented rejection.
  }
  return 0;
}
