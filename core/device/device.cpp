#include "core/device/device.h"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>
#include <torch/version.h>

#include <cstdlib>
#include <string>
#include <type_traits>

#include "core/device/memory.h"
#include "core/error.h"

namespace tessel::core {
namespace {

// The few driver entry points the report needs, from libcuda.so.1 (the NVIDIA driver's own
// library; no toolkit needed). Signatures as in cuda.h: CUresult is an int, CUdevice an int.
struct Driver {
  using Init = int (*)(unsigned);
  using Version = int (*)(int*);
  using Count = int (*)(int*);
  using Get = int (*)(int*, int);
  using Name = int (*)(char*, int, int);
  using TotalMem = int (*)(size_t*, int);
  using Attribute = int (*)(int*, int, int);
  using ErrorString = int (*)(int, const char**);
  Init init = nullptr;
  Version version = nullptr;
  Count count = nullptr;
  Get get = nullptr;
  Name name = nullptr;
  TotalMem total_mem = nullptr;
  Attribute attribute = nullptr;
  ErrorString error_string = nullptr;

  static const Driver* load() {
    static const Driver driver = [] {
      Driver d;
      void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);  // never closed: LibTorch uses it
      if (!lib) return d;
      auto sym = [&](auto& fn, const char* name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      };
      sym(d.init, "cuInit");
      sym(d.version, "cuDriverGetVersion");
      sym(d.count, "cuDeviceGetCount");
      sym(d.get, "cuDeviceGet");
      sym(d.name, "cuDeviceGetName");
      sym(d.total_mem, "cuDeviceTotalMem_v2");
      sym(d.attribute, "cuDeviceGetAttribute");
      sym(d.error_string, "cuGetErrorString");
      return d;
    }();
    const bool complete = driver.init && driver.version && driver.count && driver.get &&
                          driver.name && driver.total_mem && driver.attribute;
    return complete ? &driver : nullptr;
  }

  std::string message(int status) const {
    const char* text = nullptr;
    if (error_string && error_string(status, &text) == 0 && text) return text;
    return "CUDA driver error " + std::to_string(status);
  }
};

constexpr int kNoDevice = 100;     // CUDA_ERROR_NO_DEVICE
constexpr int kComputeMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kComputeMinor = 76;
constexpr const char* kDriverForCuda13 = "580";  // the first driver branch with CUDA 13.0

// Fills the driver's view: its CUDA version and the GPUs it sees. Returns the problem, if any.
std::string ask_driver(DeviceReport& r) {
  const Driver* driver = Driver::load();
  if (!driver) {
    return "no NVIDIA driver was found (libcuda.so.1 did not load): install the NVIDIA driver";
  }
  driver->version(&r.driver_cuda);
  if (const int status = driver->init(0); status != 0) {
    if (status == kNoDevice) return "the NVIDIA driver is installed but sees no GPU";
    return "the NVIDIA driver cannot use the GPU: " + driver->message(status);
  }
  int count = 0;
  if (const int status = driver->count(&count); status != 0) {
    return "the NVIDIA driver cannot count the GPUs: " + driver->message(status);
  }
  for (int i = 0; i < count; ++i) {
    GpuInfo g;
    g.index = i;
    int device = 0;
    if (driver->get(&device, i) != 0) continue;
    char name[256] = {};
    driver->name(name, sizeof name, device);
    g.name = name;
    size_t bytes = 0;
    driver->total_mem(&bytes, device);
    g.total_bytes = static_cast<int64_t>(bytes);
    driver->attribute(&g.compute_major, kComputeMajor, device);
    driver->attribute(&g.compute_minor, kComputeMinor, device);
    r.gpus.push_back(std::move(g));
  }
  if (r.gpus.empty()) return "the NVIDIA driver is installed but sees no GPU";
  return "";
}

}  // namespace

std::string cuda_version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

std::string cudnn_version_string(int v) {
  // cuDNN 9: major * 10000 + minor * 100 + patch (8.x used major * 1000 + minor * 100 + patch).
  const int major = v >= 90000 ? v / 10000 : v / 1000;
  const int rest = v >= 90000 ? v % 10000 : v % 1000;
  return std::to_string(major) + "." + std::to_string(rest / 100) + "." +
         std::to_string(rest % 100);
}

DeviceReport device_report() {
  DeviceReport r;
  r.torch_version = TORCH_VERSION;
  const auto& hooks = at::detail::getCUDAHooks();
  r.torch_cuda = hooks.hasCUDART();
  if (!r.torch_cuda) {
    r.problem = "this LibTorch (" + r.torch_version +
                ") is CPU-only: build Tessel against a CUDA LibTorch (scripts/setup installs the "
                "torch wheel from PyPI, a CUDA 13.0 build)";
    return r;
  }
  r.cuda_built = static_cast<int>(hooks.versionCUDART());
  if (hooks.compiledWithCuDNN()) {
    r.cudnn_built = static_cast<int>(hooks.versionCuDNN());
    r.cudnn_loaded = static_cast<int>(hooks.versionRuntimeCuDNN());
  }
  r.problem = ask_driver(r);
  if (r.problem.empty() && r.driver_cuda > 0 && r.driver_cuda < r.cuda_built) {
    r.problem = "the NVIDIA driver supports CUDA " + cuda_version_string(r.driver_cuda) +
                ", and this LibTorch needs CUDA " + cuda_version_string(r.cuda_built) +
                ": update the driver (" + (r.cuda_built >= 13000 ? kDriverForCuda13 : "a newer") +
                " or newer)";
  }
  if (r.problem.empty() && !at::hasCUDA()) {
    r.problem =
        "LibTorch cannot use the GPU the driver sees (its CUDA runtime failed to start; "
        "run with TORCH_SHOW_CPP_STACKTRACES=1 for LibTorch's reason)";
  }
  if (!r.problem.empty()) r.gpus.clear();
  return r;
}

bool is_device_name(const std::string& name) {
  if (name == "cpu" || name == "auto" || name == "cuda") return true;
  if (name.rfind("cuda:", 0) != 0) return false;
  const std::string digits = name.substr(5);
  return !digits.empty() && digits.size() <= 3 &&
         digits.find_first_not_of("0123456789") == std::string::npos;
}

c10::Device resolve_device(const std::string& name) {
  if (!is_device_name(name)) {
    throw Error("unknown device '" + name + "': use cpu, cuda, cuda:N or auto");
  }
  if (name == "cpu") return c10::Device(c10::kCPU);
  const bool any = name == "auto";
  const int index = name.rfind("cuda:", 0) == 0 ? std::stoi(name.substr(5)) : 0;
  const DeviceReport r = device_report();
  if (!r.problem.empty()) {
    if (any) return c10::Device(c10::kCPU);
    throw Error("cannot run on " + name + ": " + r.problem);
  }
  if (index >= static_cast<int>(r.gpus.size())) {
    std::string seen;
    for (const GpuInfo& g : r.gpus) {
      seen += (seen.empty() ? "" : ", ") + ("cuda:" + std::to_string(g.index)) + " " + g.name;
    }
    throw Error("there is no " + name + ": this machine has " + std::to_string(r.gpus.size()) +
                " GPU(s) (" + seen + ")");
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

std::string describe(c10::Device device) {
  if (!device.is_cuda()) return device.str();
  for (const GpuInfo& g : device_report().gpus) {
    if (g.index == device.index()) return device.str() + " (" + g.name + ")";
  }
  return device.str();
}

void use_exact_algorithms() {
  // cuBLAS is deterministic only with a fixed workspace; read when its first handle is made.
  setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  auto& context = at::globalContext();
  context.setDeterministicAlgorithms(true, /*warn_only=*/true);
  context.setDeterministicCuDNN(true);
  context.setBenchmarkCuDNN(false);
  context.setAllowTF32CuDNN(false);
  context.setAllowTF32CuBLAS(false);
  // A diagnostic: TESSEL_CUDNN=0 runs convolutions on LibTorch's own CUDA kernels, to tell a
  // rounding that comes from the algorithm cuDNN picks for a tile's shape from one in the engine.
  const char* cudnn = std::getenv("TESSEL_CUDNN");
  if (cudnn != nullptr && std::string(cudnn) == "0") context.setUserEnabledCuDNN(false);
}

namespace {

// The caching allocator of a GPU; the device-generic interface needs no CUDA headers.
c10::DeviceAllocator& gpu_allocator(c10::Device device) {
  return *c10::getDeviceAllocator(device.type());
}

constexpr auto kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

}  // namespace

MemoryReading memory_reading(c10::Device device) {
  MemoryReading r;
  if (device.is_cpu()) {
    if (!MemoryTracker::installed()) return r;
    r.live = MemoryTracker::live_bytes();
    r.peak = MemoryTracker::peak_bytes();
    r.reserved = r.live + MemoryTracker::cached_bytes();
    return r;
  }
  const c10::CachingDeviceAllocator::DeviceStats stats =
      gpu_allocator(device).getDeviceStats(device.index());
  r.live = stats.allocated_bytes[kAggregate].current;
  r.peak = stats.allocated_bytes[kAggregate].peak;
  r.reserved = stats.reserved_bytes[kAggregate].current;
  r.peak_reserved = stats.reserved_bytes[kAggregate].peak;
  return r;
}

void reset_memory_peak(c10::Device device) {
  if (device.is_cpu()) {
    MemoryTracker::reset_peak();
  } else {
    gpu_allocator(device).resetPeakStats(device.index());
  }
}

DeviceMemory device_memory(c10::Device device) {
  if (device.is_cpu()) return {};
  try {
    const auto [free, total] = gpu_allocator(device).getMemoryInfo(device.index());
    return {static_cast<int64_t>(free), static_cast<int64_t>(total)};
  } catch (const c10::Error&) {
    return {};  // an allocator without the query: the caller cannot check, and says so
  }
}

TileFormats tile_formats(c10::Device device, Precision precision) {
  if (!device.is_cuda()) return {c10::MemoryFormat::ChannelsLast, std::nullopt};
  const c10::MemoryFormat f = precision == Precision::kBf16 ? c10::MemoryFormat::ChannelsLast
                                                            : c10::MemoryFormat::Contiguous;
  return {f, f};
}

std::optional<TileFormats> parse_tile_formats(const std::string& name) {
  if (name == "auto") return std::nullopt;
  if (name == "cpu") return TileFormats{c10::MemoryFormat::ChannelsLast, std::nullopt};
  if (name == "contiguous") {
    return TileFormats{c10::MemoryFormat::Contiguous, c10::MemoryFormat::Contiguous};
  }
  if (name == "channels-last") {
    return TileFormats{c10::MemoryFormat::ChannelsLast, c10::MemoryFormat::ChannelsLast};
  }
  throw Error("unknown tile format '" + name + "': use auto, cpu, contiguous or channels-last");
}

bool direct_disk_io(c10::Device compute) { return compute.is_cpu(); }

void synchronize(c10::Device device) {
  if (device.is_cpu()) return;
  c10::impl::getDeviceGuardImpl(device.type())->synchronizeDevice(device.index());
}

c10::Device test_device() {
  static const c10::Device device = [] {  // asked for by every test case: resolve once
    const char* name = std::getenv("TESSEL_TEST_DEVICE");
    return resolve_device(name && *name ? name : "cpu");
  }();
  return device;
}

}  // namespace tessel::core
