#include "io/checkpoint.h"

#include <ATen/ATen.h>
#include <hdf5.h>
#include <torch/nn/module.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "io/durable.h"
#include "io/user_file.h"

namespace tessel::io {
namespace {

// 2: /state carries state_crc32, a checksum of every attribute that changes what the checkpoint
// does (the stored config, classes, run state, tensor names); 1: without it (still read).
constexpr int kFormatVersion = 2;

// The file's first 512 bytes are an HDF5 user block (HDF5 and h5py skip it) holding a header:
// "TESSEL-CHECKPOINT\n", then the byte count and CRC-32 of the rest of the file as decimal text.
// read_checkpoint checks them before HDF5 opens the file: HDF5 1.10 crashes, loops forever or
// frees wild pointers on some damaged files (tests/fuzz/regressions/open), so damage must be
// found before it parses anything. Files without the header (older Tessel, h5py) go to HDF5 as
// they are.
constexpr size_t kUserBlock = 512;
constexpr std::string_view kMagic = "TESSEL-CHECKPOINT\n";

// HDF5 ids with the right close function; HDF5 calls fail with a negative id, checked by `must`.
template <herr_t (*Close)(hid_t)>
class Id {
 public:
  Id() = default;
  explicit Id(hid_t id) : id_(id) {}
  Id(Id&& other) noexcept : id_(std::exchange(other.id_, -1)) {}
  Id& operator=(Id&& other) noexcept {
    std::swap(id_, other.id_);
    return *this;
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() {
    if (id_ >= 0) Close(id_);
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_ = -1;
};
using File = Id<H5Fclose>;
using Group = Id<H5Gclose>;
using Dataset = Id<H5Dclose>;
using Space = Id<H5Sclose>;
using Attribute = Id<H5Aclose>;
using Type = Id<H5Tclose>;

// HDF5 prints its error stack to stderr by default; ours are exceptions with a message instead.
void silence_hdf5() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

// Where a named tensor lives under its root group: "a.b.weight" → {"a.b", "weight"}; optimizer
// state "a.b.weight.momentum_buffer" → {"a.b", "weight/momentum_buffer"}.
std::pair<std::string, std::string> split_name(const std::string& name, bool optimizer_state) {
  if (name.empty() || name.find('/') != std::string::npos) {
    throw Error("cannot store tensor '" + name + "' in a checkpoint: names must be non-empty and " +
                "hold no '/'");
  }
  std::string rest = name;
  std::string state;
  if (optimizer_state) {
    const size_t dot = rest.rfind('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == rest.size()) {
      throw Error("optimizer state '" + name + "' is not named <parameter>.<state>");
    }
    state = rest.substr(dot + 1);
    rest = rest.substr(0, dot);
  }
  const size_t dot = rest.rfind('.');
  std::string layer = dot == std::string::npos ? rest : rest.substr(0, dot);
  std::string param = dot == std::string::npos ? rest : rest.substr(dot + 1);
  if (layer.empty() || param.empty()) throw Error("cannot store tensor '" + name + "'");
  if (optimizer_state) param += "/" + state;
  return {layer, param};
}

Type string_type() {
  Type type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  return type;
}

class Writer {
 public:
  explicit Writer(std::filesystem::path file) : file_(std::move(file)) {}

  void must(bool ok, const std::string& what) const {
    if (!ok) throw Error("cannot write checkpoint " + file_.string() + ": " + what);
  }

  Group group(hid_t parent, const std::string& name) const {
    Group g(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    must(g.ok(), "cannot create group " + name);
    return g;
  }

  void strings(hid_t object, const std::string& name, const std::vector<std::string>& values,
               bool scalar = false) const {
    const Type type = string_type();
    const hsize_t count = values.size();
    Space space(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &count, nullptr));
    Attribute attr(
        H5Acreate2(object, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
    std::vector<const char*> pointers;
    for (const std::string& v : values) pointers.push_back(v.c_str());
    const char* none = "";
    must(attr.ok() &&
             H5Awrite(attr.get(), type.get(), pointers.empty() ? &none : pointers.data()) >= 0,
         "cannot write attribute " + name);
  }

  template <typename T>
  void number(hid_t object, const std::string& name, T value, hid_t file_type,
              hid_t memory_type) const {
    Space space(H5Screate(H5S_SCALAR));
    Attribute attr(
        H5Acreate2(object, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
    must(attr.ok() && H5Awrite(attr.get(), memory_type, &value) >= 0,
         "cannot write attribute " + name);
  }

  // A dataset with the tensor's shape and bytes, its LibTorch name and a CRC-32.
  void tensor(hid_t parent, const std::string& path, const std::string& torch_name,
              const at::Tensor& value) const {
    const at::Tensor t = value.detach().to(at::kCPU).contiguous();
    hid_t file_type = -1, memory_type = -1;
    switch (t.scalar_type()) {
      case at::kFloat:
        file_type = H5T_IEEE_F32LE, memory_type = H5T_NATIVE_FLOAT;
        break;
      case at::kDouble:
        file_type = H5T_IEEE_F64LE, memory_type = H5T_NATIVE_DOUBLE;
        break;
      case at::kLong:
        file_type = H5T_STD_I64LE, memory_type = H5T_NATIVE_INT64;
        break;
      case at::kByte:
        file_type = H5T_STD_U8LE, memory_type = H5T_NATIVE_UINT8;
        break;
      default:
        throw Error("cannot store tensor '" + torch_name + "' of type " +
                    std::string(c10::toString(t.scalar_type())) + " in a checkpoint");
    }
    std::vector<hsize_t> dims(t.sizes().begin(), t.sizes().end());
    Space space(dims.empty()
                    ? H5Screate(H5S_SCALAR)
                    : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
    Dataset data(H5Dcreate2(parent, path.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                            H5P_DEFAULT));
    must(data.ok(), "cannot create dataset " + path);
    must(t.numel() == 0 ||
             H5Dwrite(data.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) >= 0,
         "cannot write dataset " + path + " (is the disk full?)");
    strings(data.get(), "torch_name", {torch_name}, true);
    number<uint32_t>(data.get(), "crc32", crc32(t.data_ptr(), t.nbytes()), H5T_STD_U32LE,
                     H5T_NATIVE_UINT32);
  }

  // /<root>/<layer>/<param> for each tensor; attrs layer_names on the root, weight_names on each
  // layer (Keras' layout).
  void tensors(hid_t file, const std::string& root, const std::vector<NamedTensor>& named,
               bool optimizer_state) const {
    Group top = group(file, root);
    std::vector<std::string> layers;
    std::map<std::string, std::vector<std::string>> params;
    std::map<std::string, Group> groups;
    std::vector<std::string> names;
    for (const NamedTensor& t : named) {
      const auto [layer, param] = split_name(t.name, optimizer_state);
      if (!groups.contains(layer)) {
        layers.push_back(layer);
        groups.emplace(layer, group(top.get(), layer));
      }
      if (optimizer_state) {
        const std::string parameter = param.substr(0, param.find('/'));
        if (std::find(params[layer].begin(), params[layer].end(), parameter) ==
            params[layer].end()) {
          Group(H5Gcreate2(groups[layer].get(), parameter.c_str(), H5P_DEFAULT, H5P_DEFAULT,
                           H5P_DEFAULT));
          params[layer].push_back(parameter);
        }
      } else {
        params[layer].push_back(param);
      }
      tensor(groups[layer].get(), param, t.name, t.tensor);
      names.push_back(t.name);
    }
    strings(top.get(), "layer_names", layers);
    for (const std::string& layer : layers) {
      strings(groups[layer].get(), "weight_names", params[layer]);
    }
    // Every tensor's full LibTorch name, in order: what the reader walks.
    strings(top.get(), "torch_names", names);
  }

 private:
  std::filesystem::path file_;
};

class Reader {
 public:
  explicit Reader(std::filesystem::path file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("checkpoint " + file_.string() + " is damaged or not a Tessel checkpoint: " + what);
  }

  std::vector<std::string> strings(hid_t object, const std::string& name) const {
    Attribute attr(H5Aopen(object, name.c_str(), H5P_DEFAULT));
    if (!attr.ok()) fail("attribute '" + name + "' is missing");
    Space space(H5Aget_space(attr.get()));
    const hssize_t count = H5Sget_simple_extent_npoints(space.get());
    if (count < 0) fail("attribute '" + name + "' cannot be read");
    const Type type = string_type();
    std::vector<char*> pointers(static_cast<size_t>(std::max<hssize_t>(count, 1)), nullptr);
    if (H5Aread(attr.get(), type.get(), pointers.data()) < 0) {
      fail("attribute '" + name + "' is not text");
    }
    std::vector<std::string> values;
    for (hssize_t i = 0; i < count; ++i) {
      values.emplace_back(pointers[static_cast<size_t>(i)] ? pointers[static_cast<size_t>(i)] : "");
    }
    H5Dvlen_reclaim(type.get(), space.get(), H5P_DEFAULT, pointers.data());
    return values;
  }

  std::string text(hid_t object, const std::string& name) const {
    std::vector<std::string> values = strings(object, name);
    if (values.size() != 1) fail("attribute '" + name + "' is not one text");
    return values.front();
  }

  template <typename T>
  T number(hid_t object, const std::string& name, hid_t memory_type) const {
    Attribute attr(H5Aopen(object, name.c_str(), H5P_DEFAULT));
    T value{};
    if (!attr.ok() || H5Aread(attr.get(), memory_type, &value) < 0) {
      fail("attribute '" + name + "' is missing or unreadable");
    }
    return value;
  }

  at::Tensor tensor(hid_t parent, const std::string& path, const std::string& where) const {
    Dataset data(H5Dopen2(parent, path.c_str(), H5P_DEFAULT));
    if (!data.ok()) fail("dataset " + where + " is missing");
    Space space(H5Dget_space(data.get()));
    const int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank < 0) fail("dataset " + where + " has no readable shape");
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    Type file_type(H5Dget_type(data.get()));
    at::ScalarType scalar = at::kFloat;
    hid_t memory_type = H5T_NATIVE_FLOAT;
    const H5T_class_t type_class = H5Tget_class(file_type.get());
    const size_t size = H5Tget_size(file_type.get());
    if (type_class == H5T_FLOAT && size == 8) {
      scalar = at::kDouble, memory_type = H5T_NATIVE_DOUBLE;
    } else if (type_class == H5T_INTEGER && size == 8) {
      scalar = at::kLong, memory_type = H5T_NATIVE_INT64;
    } else if (type_class == H5T_INTEGER && size == 1) {
      scalar = at::kByte, memory_type = H5T_NATIVE_UINT8;
    } else if (type_class != H5T_FLOAT || size != 4) {
      fail("dataset " + where + " is not float32, float64, int64 or uint8");
    }
    // A damaged shape would have LibTorch allocate petabytes (or a negative size): the element
    // count must be what the file stores.
    uint64_t count = 1;
    for (const hsize_t d : dims) {
      if (d > static_cast<hsize_t>(INT64_MAX) ||
          (d != 0 && count > static_cast<uint64_t>(INT64_MAX) / d)) {
        fail("dataset " + where + " has an impossible shape");
      }
      count *= d;
    }
    const hsize_t stored_bytes = H5Dget_storage_size(data.get());
    if (count != 0 && (count > UINT64_MAX / size || count * size != stored_bytes)) {
      fail("dataset " + where + "'s shape does not match the bytes it stores");
    }
    std::vector<int64_t> shape(dims.begin(), dims.end());
    at::Tensor t;
    try {
      t = at::empty(shape, at::TensorOptions().dtype(scalar));
    } catch (const c10::Error&) {
      fail("dataset " + where + " is too large to read");
    }
    if (t.numel() > 0 &&
        H5Dread(data.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) < 0) {
      fail("dataset " + where + " cannot be read (truncated file?)");
    }
    const auto stored = number<uint32_t>(data.get(), "crc32", H5T_NATIVE_UINT32);
    if (stored != crc32(t.data_ptr(), t.nbytes())) {
      fail("dataset " + where + " does not match its checksum");
    }
    return t;
  }

  std::vector<NamedTensor> tensors(hid_t file, const std::string& root,
                                   bool optimizer_state) const {
    Group top(H5Gopen2(file, root.c_str(), H5P_DEFAULT));
    if (!top.ok()) fail("group /" + root + " is missing");
    std::vector<NamedTensor> named;
    for (const std::string& name : strings(top.get(), "torch_names")) {
      const auto [layer, param] = split_name(name, optimizer_state);
      const std::string path = layer + "/" + param;
      named.push_back({name, tensor(top.get(), path, "/" + root + "/" + path)});
    }
    return named;
  }

 private:
  std::filesystem::path file_;
};

}  // namespace

uint32_t crc32(const void* data, size_t bytes, uint32_t crc) {
  // zlib's: several bytes per step (measured: the byte-table loop it replaces was 28% of
  // importing resnet50, 94 MB written and checked).
  return static_cast<uint32_t>(::crc32_z(crc, static_cast<const Bytef*>(data), bytes));
}

namespace {

// The checksum of what the datasets' own CRCs do not cover and changes results: the stored
// config (its mpp, model), the classes, the run's position, the tensors' names.
uint32_t state_checksum(const CheckpointState& state) {
  uint32_t crc = 0;
  const auto add = [&crc](const std::string& field, const std::string& value) {
    const std::string record = field + '=' + std::to_string(value.size()) + ':' + value + '\n';
    crc = crc32(record.data(), record.size(), crc);
  };
  add("epoch", std::to_string(state.epoch));
  add("step", std::to_string(state.step));
  add("seed", std::to_string(state.seed));
  for (const std::string& name : state.class_names) add("class", name);
  add("tessel_version", state.tessel_version);
  add("config", state.config);
  add("run_state", state.run_state);
  if (!state.network.empty()) add("network", state.network);
  for (const NamedTensor& t : state.weights) add("weight", t.name);
  for (const NamedTensor& t : state.optimizer) add("optimizer", t.name);
  return crc;
}

}  // namespace

void write_checkpoint(const std::filesystem::path& path, const CheckpointState& state) {
  silence_hdf5();
  const Writer w(path);
  std::vector<char> image;
  {
    // Built in memory (HDF5's core driver, no backing store), then written atomically: HDF5
    // never meets the disk, so no failure leaves one of its files open (a full disk crashed
    // HDF5's atexit handler on a file id left open).
    const Id<H5Pclose> access(H5Pcreate(H5P_FILE_ACCESS));
    w.must(access.ok() && H5Pset_fapl_core(access.get(), size_t{1} << 20, 0) >= 0,
           "cannot set up HDF5's in-memory file");
    const Id<H5Pclose> create(H5Pcreate(H5P_FILE_CREATE));
    w.must(create.ok() && H5Pset_userblock(create.get(), kUserBlock) >= 0,
           "cannot reserve the header block");
    File file(H5Fcreate((path.string() + ".in-memory").c_str(), H5F_ACC_TRUNC, create.get(),
                        access.get()));
    w.must(file.ok(), "cannot make the in-memory HDF5 file");
    w.tensors(file.get(), "model_weights", state.weights, false);
    w.tensors(file.get(), "optimizer_weights", state.optimizer, true);
    Group s = w.group(file.get(), "state");
    w.number<int64_t>(s.get(), "format_version", kFormatVersion, H5T_STD_I64LE, H5T_NATIVE_INT64);
    w.number<int64_t>(s.get(), "epoch", state.epoch, H5T_STD_I64LE, H5T_NATIVE_INT64);
    w.number<int64_t>(s.get(), "step", state.step, H5T_STD_I64LE, H5T_NATIVE_INT64);
    w.number<uint64_t>(s.get(), "seed", state.seed, H5T_STD_U64LE, H5T_NATIVE_UINT64);
    w.strings(s.get(), "class_names", state.class_names);
    w.strings(s.get(), "tessel_version", {state.tessel_version}, true);
    w.strings(s.get(), "config", {state.config}, true);
    w.strings(s.get(), "run_state", {state.run_state}, true);
    if (!state.network.empty()) w.strings(s.get(), "network", {state.network}, true);
    w.number<uint32_t>(s.get(), "state_crc32", state_checksum(state), H5T_STD_U32LE,
                       H5T_NATIVE_UINT32);
    const at::Tensor rng = at::empty({static_cast<int64_t>(state.rng_state.size())}, at::kByte);
    std::copy(state.rng_state.begin(), state.rng_state.end(), rng.data_ptr<uint8_t>());
    w.tensor(s.get(), "rng_state", "rng_state", rng);
    w.must(H5Fflush(file.get(), H5F_SCOPE_GLOBAL) >= 0, "cannot flush the in-memory file");
    const ssize_t size = H5Fget_file_image(file.get(), nullptr, 0);
    w.must(size > 0, "cannot take the in-memory file's image");
    // The in-memory image starts at the superblock: the user block it reserved goes in front.
    image.resize(kUserBlock + static_cast<size_t>(size), '\0');
    w.must(
        H5Fget_file_image(file.get(), image.data() + kUserBlock, static_cast<size_t>(size)) == size,
        "cannot take the in-memory file's image");
  }
  const std::string header =
      std::string(kMagic) + "bytes " + std::to_string(image.size() - kUserBlock) + "\ncrc32 " +
      std::to_string(crc32(image.data() + kUserBlock, image.size() - kUserBlock)) + "\n";
  std::copy(header.begin(), header.end(), image.begin());
  write_file_atomically(path, std::string_view(image.data(), image.size()), "checkpoint");
}

namespace {

// The header's byte count and CRC-32 against the file, read in blocks (no second copy of a large
// checkpoint in memory). A file without the header is left to HDF5.
void check_header(const std::filesystem::path& path, const Reader& r) {
  constexpr std::string_view kHdf5 = "\x89HDF\r\n\x1a\n";  // HDF5's superblock signature
  std::ifstream in(path, std::ios::binary);
  std::string block(kUserBlock + kHdf5.size(), '\0');
  in.read(block.data(), static_cast<std::streamsize>(block.size()));
  const auto got = static_cast<size_t>(in.gcount());
  block.resize(got);
  if (!block.starts_with(kMagic)) {
    // An HDF5 file from before the header (signature at 0) is HDF5's to read; one with a user
    // block but no header is a Tessel checkpoint whose header was damaged.
    if (got == kUserBlock + kHdf5.size() && std::string_view(block).substr(kUserBlock) == kHdf5) {
      r.fail("its header is damaged");
    }
    return;
  }
  if (got < kUserBlock) r.fail("truncated in its header");
  in.clear();
  in.seekg(static_cast<std::streamoff>(kUserBlock));
  unsigned long long bytes = 0, stored = 0;
  if (std::sscanf(block.c_str() + kMagic.size(), "bytes %llu\ncrc32 %llu", &bytes, &stored) != 2) {
    r.fail("its header is damaged");
  }
  uint32_t crc = 0;
  unsigned long long seen = 0;
  std::vector<char> buffer(size_t{1} << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto n = static_cast<size_t>(in.gcount());
    crc = crc32(buffer.data(), n, crc);
    seen += n;
  }
  if (seen != bytes) {
    r.fail("it holds " + std::to_string(seen + kUserBlock) + " bytes, its header says " +
           std::to_string(bytes + kUserBlock) + " (truncated or appended to)");
  }
  if (crc != stored) r.fail("its bytes do not match the header's checksum (the file is damaged)");
}

}  // namespace

std::string checkpoint_header(const std::filesystem::path& path) {
  if (!not_a_regular_file(path).empty()) return {};
  std::ifstream in(path, std::ios::binary);
  std::string block(kUserBlock, '\0');
  in.read(block.data(), static_cast<std::streamsize>(block.size()));
  if (in.gcount() < static_cast<std::streamsize>(kUserBlock) || !block.starts_with(kMagic)) {
    return {};
  }
  return block.substr(0, block.find('\0'));
}

CheckpointState read_checkpoint(const std::filesystem::path& path) {
  silence_hdf5();
  if (const std::string why = not_a_regular_file(path); !why.empty()) {
    throw Error("checkpoint " + path.string() +
                (why == kNoSuchFile ? std::string(" does not exist") : ": " + why));
  }
  const Reader r(path);
  check_header(path, r);
  File file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.ok()) r.fail("not an HDF5 file, or truncated");
  CheckpointState state;
  state.weights = r.tensors(file.get(), "model_weights", false);
  state.optimizer = r.tensors(file.get(), "optimizer_weights", true);
  Group s(H5Gopen2(file.get(), "state", H5P_DEFAULT));
  if (!s.ok()) r.fail("group /state is missing");
  const auto version = r.number<int64_t>(s.get(), "format_version", H5T_NATIVE_INT64);
  if (version > kFormatVersion) {
    throw Error("checkpoint " + path.string() + " was written by a newer Tessel (format " +
                std::to_string(version) + "); update Tessel to read it");
  }
  state.epoch = r.number<int64_t>(s.get(), "epoch", H5T_NATIVE_INT64);
  state.step = r.number<int64_t>(s.get(), "step", H5T_NATIVE_INT64);
  state.seed = r.number<uint64_t>(s.get(), "seed", H5T_NATIVE_UINT64);
  state.class_names = r.strings(s.get(), "class_names");
  state.tessel_version = r.text(s.get(), "tessel_version");
  state.config = r.text(s.get(), "config");
  state.run_state = r.text(s.get(), "run_state");
  if (H5Aexists(s.get(), "network") > 0) state.network = r.text(s.get(), "network");
  if (version >= 2 &&
      r.number<uint32_t>(s.get(), "state_crc32", H5T_NATIVE_UINT32) != state_checksum(state)) {
    r.fail("its stored config, classes, run state or tensor names do not match their checksum");
  }
  const at::Tensor rng = r.tensor(s.get(), "rng_state", "/state/rng_state");
  if (rng.scalar_type() != at::kByte) r.fail("dataset /state/rng_state is not bytes");
  const auto* bytes = rng.data_ptr<uint8_t>();
  state.rng_state.assign(bytes, bytes + rng.numel());
  return state;
}

std::string WeightLoadReport::to_string() const {
  std::ostringstream out;
  out << loaded.size() << " loaded";
  const auto list = [&out](const char* what, const std::vector<std::string>& names) {
    if (names.empty()) return;
    out << "; " << names.size() << " " << what << ":";
    for (const std::string& n : names) out << " " << n;
  };
  list("missing from the weights", missing);
  list("not in the model", unexpected);
  list("with another shape", mismatched);
  return out.str();
}

std::vector<NamedTensor> named_weights(const torch::nn::Module& module) {
  std::vector<NamedTensor> named;
  for (const auto& item : module.named_parameters()) named.push_back({item.key(), item.value()});
  for (const auto& item : module.named_buffers()) named.push_back({item.key(), item.value()});
  return named;
}

WeightLoadReport load_weights(torch::nn::Module& module, const std::vector<NamedTensor>& weights,
                              bool strict) {
  std::map<std::string, const at::Tensor*> given;
  for (const NamedTensor& w : weights) given[w.name] = &w.tensor;
  WeightLoadReport report;
  std::map<std::string, bool> used;
  at::NoGradGuard no_grad;
  for (NamedTensor& target : named_weights(module)) {
    const auto it = given.find(target.name);
    if (it == given.end()) {
      report.missing.push_back(target.name);
      continue;
    }
    used[target.name] = true;
    if (it->second->sizes() != target.tensor.sizes()) {
      std::ostringstream m;
      m << target.name << ": " << it->second->sizes() << " in the weights, "
        << target.tensor.sizes() << " in the model";
      report.mismatched.push_back(m.str());
      continue;
    }
    // NaN weights with valid checksums (a diverged run's, or a hand-made file) would train and
    // predict NaN silently.
    if (it->second->is_floating_point() && !at::isfinite(*it->second).all().item<bool>()) {
      throw Error("the weights hold NaN or infinite values in " + target.name +
                  "; they cannot be used");
    }
    target.tensor.copy_(*it->second);
    report.loaded.push_back(target.name);
  }
  for (const NamedTensor& w : weights) {
    if (!used.contains(w.name)) report.unexpected.push_back(w.name);
  }
  if (strict &&
      (!report.missing.empty() || !report.unexpected.empty() || !report.mismatched.empty())) {
    throw Error("the weights do not fit the model: " + report.to_string());
  }
  return report;
}

}  // namespace tessel::io
