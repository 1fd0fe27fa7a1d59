// Copies of tensors: between layouts (a channels-first tile into a channels-last block and
// back) and between an accelerator and host memory on a stream of their own (the tile store's
// staging). The one place the store's paths differ between a CPU and an accelerator build.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <memory>
#include <mutex>
#include <optional>

namespace tessel::core {

// dst.copy_(src) for tensors of the same sizes, also where one is channels-first and the other
// channels-last (views of either included): ATen's strided copy takes 0.8-1.6 s per GiB
// between the two on 2 cores, against 0.09 s for a plain copy; this one transposes each row in
// cache-sized blocks (0.33-0.36 s per GiB). Not for autograd (a plain copy there).
void copy_tile(const at::Tensor& dst, const at::Tensor& src);

// Copies between an accelerator and host memory on a stream of the staging's own, so they
// overlap the compute stream's work; events order the two (DESIGN.md "Memory"). On a CPU build
// host memory is the compute device's: nothing is copied. Thread-safe.
class Staging {
 public:
  // Host memory for a tensor with `options`: pinned when it lives on an accelerator.
  static at::TensorOptions host_options(const at::TensorOptions& options);
  // Whether a tensor on `device` needs a copy in host memory to leave it (an accelerator's).
  static bool needs_host_copy(c10::Device device) { return !device.is_cpu(); }

  // `src` copied to a new tensor with `to`'s device (one of them an accelerator) on the
  // staging stream, after the work the compute stream has queued so far (it may still be
  // writing `src`); `done` records the copy's end. Where both are on one device: `src` itself,
  // and `done` reset.
  at::Tensor copy(const at::Tensor& src, const at::TensorOptions& to,
                  std::shared_ptr<c10::Event>& done);
  // Makes `t`, copied by copy() (`done`), safe on the compute stream: the compute stream waits
  // for the copy, and the caching allocator keeps `t`'s memory from the staging stream while
  // the compute stream uses it. Nothing to do for a host tensor or a null `done`.
  static void use_on_compute_stream(const at::Tensor& t, const std::shared_ptr<c10::Event>& done);
  // Waits on the calling (host) thread until `done`'s copy has landed; null: nothing to wait for.
  static void wait(const std::shared_ptr<c10::Event>& done);

 private:
  c10::Stream stream(c10::Device device);

  std::mutex mutex_;                   // guards stream_ (the caller and the I/O thread copy)
  std::optional<c10::Stream> stream_;  // an accelerator's copies
};

}  // namespace tessel::core
