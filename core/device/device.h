// The devices the engine can run on, as LibTorch and the NVIDIA driver report them, and the one
// place a device name from the user ("cpu", "cuda", "cuda:N") becomes a device. Needs no CUDA
// headers: LibTorch's CUDA hooks say what it was built with, and the driver (libcuda, loaded
// at run time where it exists) names the GPUs. Everything else in the engine is device-agnostic:
// tensors carry their device.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/MemoryFormat.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/device/precision.h"

namespace tessel::core {

struct GpuInfo {
  int index = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int compute_major = 0, compute_minor = 0;
  int64_t total_bytes = 0;
};

struct DeviceReport {
  std::string torch_version;              // "2.11.0"
  bool torch_cuda = false;                // this LibTorch has its CUDA library loaded
  int cuda_built = 0;                     // CUDA runtime LibTorch was built with (13000); 0: none
  int cudnn_built = 0, cudnn_loaded = 0;  // cuDNN LibTorch was built with / loaded now (91900)
  int driver_cuda = 0;                    // the newest CUDA the driver supports; 0: no driver
  std::vector<GpuInfo> gpus;              // the GPUs LibTorch can use
  std::string problem;                    // why no GPU can be used, when none can, and what to do
};

// Asks LibTorch and the driver once per call; cheap (no CUDA context is made).
DeviceReport device_report();

// 13000 -> "13.0"; 91900 -> "9.19.0" (cuDNN's encoding).
std::string cuda_version_string(int version);
std::string cudnn_version_string(int version);

// "cpu", "cuda" (the first GPU), "cuda:N", or "auto" (the first GPU when one is usable, else the
// CPU). Throws tessel::Error naming what was found and what to install when a GPU was asked for
// and cannot be used, or the index does not exist.
c10::Device resolve_device(const std::string& name);
// Whether `name` is one resolve_device reads ("cpu", "auto", "cuda", "cuda:N" with up to 3
// digits), without asking whether that device is there: for validating configs.
bool is_device_name(const std::string& name);

// "cpu", or "cuda:0 (NVIDIA H100 80GB HBM3)": for logs and messages.
std::string describe(c10::Device device);

// How tiled and plain steps are compared on a GPU: deterministic algorithms where LibTorch has
// them (a warning where it has none), cuDNN without autotuning, and no TF32, so a float32
// comparison measures the tiling, not the matrix units' rounding. Process-wide; a no-op on CPU.
void use_exact_algorithms();

// What a device's memory meter reads. On the CPU: the tracking allocator (core/device/memory.h),
// every tensor LibTorch allocates on the CPU; -1 when it is not installed. On a GPU: LibTorch's
// caching allocator (allocated bytes as live, what it holds from the driver as reserved: allocated
// plus its cache and the rounding of its blocks); the CUDA context and cuDNN's handles are not
// counted.
struct MemoryReading {
  int64_t live = -1;
  int64_t peak = -1;           // the most live since the last reset_memory_peak
  int64_t reserved = -1;       // GPU: reserved now; CPU: live plus the tracker's cache
  int64_t peak_reserved = -1;  // GPU: the most reserved since the last reset; CPU: -1
};
MemoryReading memory_reading(c10::Device device);
// Starts a new peak measurement on the device (from what is live now).
void reset_memory_peak(c10::Device device);

// A GPU's free and total memory as the driver reports them now (other processes' use shows as
// less free); -1 for the CPU.
struct DeviceMemory {
  int64_t free_bytes = -1, total_bytes = -1;
};
DeviceMemory device_memory(c10::Device device);

// The memory formats a tile's convolutions run in. A convolution in the format its kernels do
// not use copies its input and output into the other (in + out bytes more, and the time):
// - CPU: oneDNN's convolutions are faster channels-last in the no-grad forward; autograd's
//   recompute takes its input as it comes (channels-last slowed the backward; DESIGN.md).
// - CUDA, bf16: cuDNN's bf16 kernels are NHWC: channels-last in both passes.
// - CUDA, float32 and tf32 (and float64): its float32 kernels are NCHW: contiguous in both.
// Measured by bench/conv_workspace.py on an H200 (bench/NOTES.md, session 33).
struct TileFormats {
  c10::MemoryFormat forward = c10::MemoryFormat::ChannelsLast;  // the no-grad forward
  std::optional<c10::MemoryFormat> recompute;  // the backward's recompute; none: as read
};
TileFormats tile_formats(c10::Device device, Precision precision);
// "auto" (tile_formats), "cpu" (the CPU's choice on any device), "contiguous" or
// "channels-last" (both passes); throws tessel::Error naming the choices otherwise. None: auto.
std::optional<TileFormats> parse_tile_formats(const std::string& name);

// Whether the tile store's disk tier writes and reads with direct I/O (core/store/tile_store.h)
// when the step computes on `compute`. On the CPU, yes: the page cache's copies run on the cores
// the step computes on (resnet50 with batch norm at 4096² in 2 GiB, 2 cores: 136–143 s a step
// direct against 150–152 s through the page cache; bench/NOTES.md, session 35). On an accelerator,
// no: the host's cores are free, and the page cache serves a block read again from memory.
bool direct_disk_io(c10::Device compute);

// Waits for the device's queued work (a GPU runs asynchronously: a step's wall time is known only
// after this); nothing on the CPU.
void synchronize(c10::Device device);

// The device the tests run on: TESSEL_TEST_DEVICE from the environment (scripts/gpu-check sets
// it to cuda), else the CPU.
c10::Device test_device();

}  // namespace tessel::core
