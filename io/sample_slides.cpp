#include "io/sample_slides.h"

#include <vips/vips8>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <fstream>
#include <iomanip>
#include <mutex>
#include <ostream>
#include <regex>
#include <sstream>
#include <system_error>
#include <thread>
#include <utility>

#include "core/error.h"
#include "io/vips.h"

namespace tessel::io {
namespace {

namespace fs = std::filesystem;
using vips::VImage;

const char* const kTumour = "tumour";
const char* const kNormal = "normal";
constexpr int kTileSize = 256;
constexpr int kJpegQuality = 85;
// lesions.json's "generator": raised whenever the same options write other slides, so that
// `make sample-data` knows a folder written by an older recipe (2: the cells task's foci sized in
// microns, their nuclei vesicular; 3: the cells task's pen rings).
constexpr int kGenerator = 3;
// Textures are drawn at half the level-0 resolution and upsampled: a quarter of the pixel work,
// and nuclei (a few microns across) still span several pixels.
constexpr int64_t kDetail = 2;

// Microns per texture pixel (kDetail level-0 pixels), at least 1.
int64_t texture_microns(double mpp) { return std::max<int64_t>(1, std::llround(mpp * kDetail)); }

// splitmix64 (Steele, Lea & Flood 2014): a fixed integer recipe, so the same seed gives the same
// slides with any compiler and standard library (std:: distributions may differ between them).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  double uniform(double low, double high) {
    return low + (high - low) * static_cast<double>(splitmix64(state_) >> 11) * 0x1.0p-53;
  }
  int64_t integer(int64_t low, int64_t high) {  // [low, high]
    return std::min(
        high, low + static_cast<int64_t>(uniform(0, 1) * static_cast<double>(high - low + 1)));
  }
  int vips_seed() { return static_cast<int>(splitmix64(state_) & 0x7fffffff); }

 private:
  uint64_t state_;
};

uint64_t slide_seed(uint64_t seed, int index) {
  uint64_t state = seed;
  const uint64_t a = splitmix64(state);
  state = a ^ (static_cast<uint64_t>(index) + 1) * 0xd1b54a32d192ed03ULL;
  return splitmix64(state);
}

std::string numbered(const char* stem, int index, const char* suffix = "") {
  std::ostringstream name;
  name << stem << std::setw(3) << std::setfill('0') << index + 1 << suffix;
  return name.str();
}

// [low, high] in a uchar image, mapped to 0..255 (the cast clips outside), as float 0..1.
VImage ramp(const VImage& image, double low, double high) {
  return ((image - low) * (255.0 / (high - low))).cast(VIPS_FORMAT_UCHAR).cast(VIPS_FORMAT_FLOAT) /
         255.0;
}

VImage upsample(const VImage& image, int64_t width, int64_t height) {
  const double h = static_cast<double>(width) / image.width();
  const double v = static_cast<double>(height) / image.height();
  VImage out =
      image.resize(h, VImage::option()->set("vscale", v)->set("kernel", VIPS_KERNEL_LINEAR));
  // resize rounds the output size; pin it to exactly width × height.
  if (out.width() != width || out.height() != height) {
    out = out.embed(0, 0, static_cast<int>(width), static_cast<int>(height),
                    VImage::option()->set("extend", VIPS_EXTEND_COPY));
  }
  return out;
}

VImage noise(int64_t width, int64_t height, Random& random) {
  return VImage::gaussnoise(
      static_cast<int>(width), static_cast<int>(height),
      VImage::option()->set("sigma", 1.0)->set("mean", 0.0)->set("seed", random.vips_seed()));
}

VImage perlin(int64_t size, int64_t cell, Random& random) {
  return VImage::perlin(static_cast<int>(size), static_cast<int>(size),
                        VImage::option()
                            ->set("cell_size", static_cast<int>(std::max<int64_t>(2, cell)))
                            ->set("seed", random.vips_seed()));
}

// The tissue layout: a few smooth blobs, kept away from the slide's edges, at `n` × `n`.
VImage tissue_field(int64_t n, Random& random) {
  VImage field = perlin(n, n / 4, random) + perlin(n, n / 9, random) * 0.6;
  const VImage xy = VImage::xyz(static_cast<int>(n), static_cast<int>(n));
  const double half = static_cast<double>(n) / 2.0;
  const VImage dx = (xy[0] - half) / half;
  const VImage dy = (xy[1] - half) / half;
  const VImage r2 = dx * dx + dy * dy;
  field = field - r2 * r2 * 0.7;
  return field.scale();  // uchar, min..max → 0..255
}

std::vector<uint8_t> pixels(const VImage& image) {
  size_t bytes = 0;
  void* data = image.write_to_memory(&bytes);
  std::vector<uint8_t> out(static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + bytes);
  g_free(data);
  return out;
}

// Lesions' radii in level-0 pixels, drawn uniformly in [low, high].
struct Radii {
  double low = 0, high = 0;
};

// The dense task's lesions: 200–400 px at 8192² (100–200 µm at 0.5 mpp), in proportion on smaller
// slides (its demo reads 8192² slides at 8 µm per pixel, where a lesion is 25–50 px across).
Radii dense_radii(int64_t size) {
  const double shrink = std::min(1.0, static_cast<double>(size) / 8192.0);
  return {200 * shrink, 400 * shrink};
}

// The cells task's foci and clusters: 100–200 µm in radius (a few hundred microns across, as a
// small tumour focus is) on any slide of at least 2 mm, in proportion on smaller ones. At 2 µm per
// pixel a focus is then 100–200 px across and holds some hundred enlarged nuclei.
Radii cell_radii(int64_t size, double mpp) {
  const double shrink = std::min(1.0, static_cast<double>(size) * mpp / 2048.0);
  return {100 / mpp * shrink, 200 / mpp * shrink};
}

// Lesion discs inside the tissue (field above `threshold`), apart from each other. Positions in
// level-0 pixels; the field is n × n over a size × size slide.
std::vector<Lesion> place_lesions(const VImage& field, int threshold, int64_t size, Radii radii,
                                  Random& random, const std::vector<Lesion>& avoid = {}) {
  const int64_t n = field.width();
  const std::vector<uint8_t> values = pixels(field);
  const double scale = static_cast<double>(size) / static_cast<double>(n);
  auto inside = [&](double x, double y, int margin) {  // level-0 point → tissue with a margin
    const auto u = static_cast<int64_t>(x / scale);
    const auto v = static_cast<int64_t>(y / scale);
    if (u < 0 || v < 0 || u >= n || v >= n) return false;
    return values[v * n + u] > threshold + margin;
  };
  const int count = static_cast<int>(random.integer(1, 4));
  std::vector<Lesion> lesions;
  for (int attempt = 0; attempt < 4000 && static_cast<int>(lesions.size()) < count; ++attempt) {
    const double radius = std::max(24.0, random.uniform(radii.low, radii.high));
    const double x = random.uniform(radius, static_cast<double>(size) - radius);
    const double y = random.uniform(radius, static_cast<double>(size) - radius);
    // Late attempts accept a centre just inside the tissue; the disc is made tissue anyway.
    const int margin = attempt < 3000 ? 12 : 0;
    bool fits = inside(x, y, margin);
    for (int k = 0; fits && attempt < 3000 && k < 12; ++k) {
      const double angle = 2 * M_PI * k / 12;
      fits = inside(x + radius * std::cos(angle), y + radius * std::sin(angle), 0);
    }
    for (const std::vector<Lesion>* others : {&std::as_const(lesions), &avoid}) {
      for (const Lesion& other : *others) {
        fits =
            fits && std::hypot(x - static_cast<double>(other.x), y - static_cast<double>(other.y)) >
                        1.3 * (radius + static_cast<double>(other.radius));
      }
    }
    if (fits) {
      lesions.push_back({std::llround(x), std::llround(y), std::llround(radius)});
    }
  }
  if (lesions.empty() && avoid.empty()) {  // no tissue big enough anywhere: one in the middle
    lesions.push_back({size / 2, size / 2, std::max<int64_t>(24, std::llround(radii.low))});
  }
  return lesions;
}

// 0..1 discs (x, y and radius in level-0 pixels) at c × c (c = size / kDetail) with a soft rim,
// drawn at a quarter of that.
VImage disc_mask(const std::vector<std::array<double, 3>>& discs, int64_t c) {
  const int64_t n = std::max<int64_t>(16, c / 4);
  const double scale = static_cast<double>(n) / static_cast<double>(c * kDetail);
  VImage mask = VImage::black(static_cast<int>(n), static_cast<int>(n)).copy_memory();
  for (const auto& [x, y, radius] : discs) {
    mask.draw_circle({255.0}, static_cast<int>(std::lround(x * scale)),
                     static_cast<int>(std::lround(y * scale)),
                     std::max(1, static_cast<int>(std::lround(radius * scale))),
                     VImage::option()->set("fill", true));
  }
  return upsample(mask.gaussblur(0.6), c, c).cast(VIPS_FORMAT_FLOAT) / 255.0;
}

VImage lesion_mask(const std::vector<Lesion>& lesions, int64_t c) {
  std::vector<std::array<double, 3>> discs;
  for (const Lesion& l : lesions) {
    discs.push_back(
        {static_cast<double>(l.x), static_cast<double>(l.y), static_cast<double>(l.radius)});
  }
  return disc_mask(discs, c);
}

// A pen stroke's centre line: points at most a quarter of its width apart, in level-0 pixels.
std::vector<std::array<double, 2>> stroke_points(const PenStroke& stroke) {
  const double span = (stroke.to - stroke.from) * M_PI / 180.0;
  const double length = span * static_cast<double>(stroke.radius);
  const int n = std::max(
      2, static_cast<int>(std::ceil(length / (0.25 * static_cast<double>(stroke.width)))) + 1);
  std::vector<std::array<double, 2>> points;
  for (int i = 0; i < n; ++i) {
    const double angle = stroke.from * M_PI / 180.0 + span * i / (n - 1);
    points.push_back(
        {static_cast<double>(stroke.x) + static_cast<double>(stroke.radius) * std::cos(angle),
         static_cast<double>(stroke.y) + static_cast<double>(stroke.radius) * std::sin(angle)});
  }
  return points;
}

// kCells: on about half the slides of either class, a pen ring round one benign cluster, as a
// pathologist circles at low power what looks suspicious. The ring keeps its width off every
// focus, and 64 pixels and its width off the slide's edge.
std::vector<PenStroke> place_pen(const SampleSlide& slide, int64_t size, double mpp,
                                 Random& random) {
  std::vector<PenStroke> pen;
  if (slide.clusters.empty() || random.uniform(0, 1) >= 0.5) return pen;
  const double shrink = std::min(1.0, static_cast<double>(size) * mpp / 2048.0);
  const auto high = static_cast<int64_t>(slide.clusters.size()) - 1;
  for (int attempt = 0; attempt < 64 && pen.empty(); ++attempt) {
    const Lesion& cluster = slide.clusters[static_cast<size_t>(random.integer(0, high))];
    const auto r = static_cast<double>(cluster.radius);
    PenStroke stroke;
    stroke.radius = std::llround(r * random.uniform(1.5, 2.2));
    stroke.width = std::max<int64_t>(4, std::llround(random.uniform(30, 50) / mpp * shrink));
    stroke.x = cluster.x + std::llround(random.uniform(-0.2, 0.2) * r);
    stroke.y = cluster.y + std::llround(random.uniform(-0.2, 0.2) * r);
    stroke.from = std::round(random.uniform(0, 360));
    stroke.to = stroke.from + std::round(random.uniform(220, 320));
    stroke.green = random.uniform(0, 1) < 0.3;
    const auto w = static_cast<double>(stroke.width);
    const double edge = 64 + w, far = static_cast<double>(size) - edge;
    bool clear = true;
    for (const auto& [x, y] : stroke_points(stroke)) {
      clear = clear && x > edge && y > edge && x < far && y < far;
      for (const Lesion& focus : slide.lesions) {
        clear = clear &&
                std::hypot(x - static_cast<double>(focus.x), y - static_cast<double>(focus.y)) >
                    static_cast<double>(focus.radius) + w;
      }
    }
    if (clear) pen.push_back(stroke);
  }
  return pen;
}

// 0..1 at c × c: the strokes, a disc of their width at each point.
VImage pen_mask(const std::vector<PenStroke>& pen, int64_t c) {
  std::vector<std::array<double, 3>> discs;
  for (const PenStroke& stroke : pen) {
    for (const auto& [x, y] : stroke_points(stroke)) {
      discs.push_back({x, y, 0.5 * static_cast<double>(stroke.width)});
    }
  }
  return disc_mask(discs, c);
}

// RGB colours of H&E: eosin-pink stroma, paler purple cellular areas, darker fibres,
// haematoxylin-blue nuclei; lesions are dense, dark purple.
const std::vector<double> kGlass = {242, 240, 244};
const std::vector<double> kStroma = {236, 164, 198};
const std::vector<double> kCellular = {206, 152, 204};
const std::vector<double> kFibre = {-26, -60, -40};  // added to the stroma colour
const std::vector<double> kNucleus = {92, 58, 148};
const std::vector<double> kLesion = {150, 92, 176};
const std::vector<double> kLesionNucleus = {58, 28, 104};
const std::vector<double> kNucleolus = {60, 10, 80};
// Marker inks, blue and green: hues of 217° and 156°, which H&E never takes (io/tissue.h).
const std::vector<double> kBlueInk = {30, 80, 160};
const std::vector<double> kGreenInk = {30, 130, 90};

std::vector<double> minus(const std::vector<double>& a, const std::vector<double>& b) {
  return {a[0] - b[0], a[1] - b[1], a[2] - b[2]};
}

// base + alpha · (over − base), alpha 1-band 0..1.
VImage blend(const VImage& base, const VImage& over, const VImage& alpha) {
  return base + alpha * (over - base);
}
VImage blend(const VImage& base, const std::vector<double>& over, const VImage& alpha) {
  return base + alpha * base.linear({-1, -1, -1}, over);
}

// Nuclei to cut from: blurred noise on a grid of `grid` texture pixels, upsampled to c × c (the
// blur is the same in the grid's own pixels, so a coarser grid gives larger nuclei, fewer of
// them). The upsampling smooths a coarser grid's field more, so a cut at the same levels takes a
// smaller share: the enlarged nuclei are cut lower (200–225 against 215–240) to hold about the
// normal share.
VImage nuclei_noise(int64_t c, int64_t grid, int64_t microns, Random& random) {
  return upsample(noise(c / grid, c / grid, random).gaussblur(1.6 / static_cast<double>(microns)),
                  c, c) *
             400 +
         128;
}

// kCells: the foci's nuclei (enlarged, vesicular, nucleolated) and the clusters' (small, crowded)
// over `base` (the tissue before its nuclei), blended into `colour` inside their discs; the discs
// are tissue. Tumour slides get 1–4 foci, every slide 1–4 clusters elsewhere.
VImage cellular_lesions(VImage colour, const VImage& base, VImage& tissue, SampleSlide& slide,
                        const VImage& field, int threshold, int64_t size, double mpp,
                        Random& random) {
  const int64_t c = colour.width();
  const int64_t microns = texture_microns(mpp);
  const Radii radii = cell_radii(size, mpp);
  if (slide.label == kTumour) {
    slide.lesions = place_lesions(field, threshold, size, radii, random);
  }
  slide.clusters = place_lesions(field, threshold, size, radii, random, slide.lesions);
  // A carcinoma's nuclei: enlarged (a grid of 4 texture pixels, against 2: ~12–20 µm across
  // against ~6 µm), vesicular (a dark rim around pale chromatin, the rim's colour varying by ±30
  // about the nuclei's: coarse) and with nucleoli (fine dark dots inside the pale chromatin). Cut
  // lower than the tissue's nuclei (190–210 against 215–240), so that with their pale centres a
  // focus holds about the tissue's share of dark nuclear material: at 8 µm per pixel its colour
  // is the tissue's (the test measures 1–2 of 255 apart).
  const VImage field4 = nuclei_noise(c, 4, microns, random);
  const VImage whole = ramp(field4, 190, 210);
  const VImage inner = ramp(field4, 226, 244);
  const VImage nucleolus = ramp(nuclei_noise(c, 1, microns, random), 215, 235) * inner;
  const VImage chromatin = noise(c, c, random).gaussblur(0.8) * 60;
  const VImage nucleus = base.linear({0, 0, 0}, kNucleus) + chromatin;
  VImage focus = blend(base, nucleus, whole - inner * 0.7);
  focus = blend(focus, kNucleolus, nucleolus);
  // Clusters: groups ~20 µm across of small nuclei packed close.
  const VImage groups = ramp(nuclei_noise(c, 6, microns, random), 120, 150);
  const VImage crowded = ramp(nuclei_noise(c, 2, microns, random), 100, 130) * groups;
  const VImage cluster = blend(base, kNucleus, crowded);
  const VImage foci = lesion_mask(slide.lesions, c);
  const VImage clusters = lesion_mask(slide.clusters, c);
  colour = blend(colour, focus, foci);
  colour = blend(colour, cluster, clusters);
  const VImage discs = (foci > clusters).ifthenelse(foci, clusters);
  tissue = (discs > tissue).ifthenelse(discs, tissue);
  return colour;
}

std::string aperio_description(int64_t size, double mpp) {
  // OpenSlide 3.4.1 reads no mpp from a generic TIFF's resolution tags, but reads an Aperio
  // ImageDescription ("Aperio Image Library ...", then "|key = value" pairs) as a proper aperio
  // slide with openslide.mpp-x/y and objective power.
  std::ostringstream text;
  text << "Aperio Image Library (Tessel sample-data, synthetic)\r\n"
       << size << "x" << size << " [0,0 " << size << "x" << size << "] (" << kTileSize << "x"
       << kTileSize << ") JPEG/RGB Q=" << kJpegQuality << "|AppMag = " << 10.0 / mpp
       << "|MPP = " << mpp;
  return text.str();
}

void write_json_string(std::ostream& out, const std::string& text) {
  out << '"';
  for (char c : text) {
    if (c == '"' || c == '\\') out << '\\';
    out << c;
  }
  out << '"';
}

void write_atomically(const fs::path& path, const std::string& text) {
  const fs::path temporary = path.string() + ".part";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) throw Error(temporary.string() + ": could not write (disk full or no permission?)");
  }
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) throw Error(path.string() + ": could not rename into place: " + error.message());
}

bool made_by_generator(const std::string& name) {
  static const std::regex ours(
      R"((slide_\d+\.tif|manifest\.csv|lesions\.json|README\.md)(\.part)?|\.slide_\d+\.tif\.part)");
  return std::regex_match(name, ours);
}

// Refuses a folder with files the generator did not make (unless `force`), then removes the
// generator's own leftovers: slides of an earlier, larger run and half-written files.
void prepare_folder(const fs::path& folder, bool force) {
  std::error_code error;
  fs::create_directories(folder, error);
  if (error) throw Error(folder.string() + ": could not create the folder: " + error.message());
  std::vector<fs::path> stale;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || !made_by_generator(name)) {
      if (force) continue;
      throw Error(folder.string() + ": holds " + name +
                  ", which sample-data did not make; choose an empty folder or pass --force "
                  "(other files are kept)");
    }
    if (name != "README.md") stale.push_back(entry.path());
  }
  for (const fs::path& path : stale) fs::remove(path);
}

std::string manifest_csv(const std::vector<SampleSlide>& slides) {
  std::ostringstream out;
  out << "slide,label,split,patient\n";
  for (const SampleSlide& slide : slides) {
    out << slide.file << "," << slide.label << "," << slide.split << "," << slide.patient << "\n";
  }
  return out.str();
}

std::string lesions_json(const std::vector<SampleSlide>& slides, const SampleDataOptions& options) {
  std::ostringstream out;
  out << "{\n  \"units\": \"level-0 pixels\",\n  \"mpp\": " << options.mpp
      << ",\n  \"size\": " << options.size << ",\n  \"seed\": " << options.seed
      << ",\n  \"task\": \"" << to_string(options.task) << "\",\n  \"generator\": " << kGenerator;
  const auto discs = [&](const char* key, std::vector<Lesion> SampleSlide::*member) {
    out << ",\n  \"" << key << "\": {";
    for (size_t i = 0; i < slides.size(); ++i) {
      out << (i == 0 ? "\n    " : ",\n    ");
      write_json_string(out, slides[i].file);
      out << ": [";
      const std::vector<Lesion>& list = slides[i].*member;
      for (size_t k = 0; k < list.size(); ++k) {
        out << (k == 0 ? "" : ", ") << "{\"x\": " << list[k].x << ", \"y\": " << list[k].y
            << ", \"radius\": " << list[k].radius << "}";
      }
      out << "]";
    }
    out << "\n  }";
  };
  discs("slides", &SampleSlide::lesions);
  if (options.task == SampleTask::kCells) {
    discs("clusters", &SampleSlide::clusters);
    out << ",\n  \"pen\": {";
    for (size_t i = 0; i < slides.size(); ++i) {
      out << (i == 0 ? "\n    " : ",\n    ");
      write_json_string(out, slides[i].file);
      out << ": [";
      for (size_t k = 0; k < slides[i].pen.size(); ++k) {
        const PenStroke& p = slides[i].pen[k];
        out << (k == 0 ? "" : ", ") << "{\"x\": " << p.x << ", \"y\": " << p.y
            << ", \"radius\": " << p.radius << ", \"width\": " << p.width
            << ", \"from\": " << p.from << ", \"to\": " << p.to << ", \"ink\": \""
            << (p.green ? "green" : "blue") << "\"}";
      }
      out << "]";
    }
    out << "\n  }";
  }
  out << "\n}\n";
  return out.str();
}

}  // namespace

std::string to_string(SampleTask task) { return task == SampleTask::kCells ? "cells" : "dense"; }

SampleTask parse_sample_task(const std::string& name) {
  if (name == "dense") return SampleTask::kDense;
  if (name == "cells") return SampleTask::kCells;
  throw Error("sample-data: the task is dense or cells, not '" + name + "'");
}

std::ostream& operator<<(std::ostream& out, const Lesion& lesion) {
  return out << "lesion at (" << lesion.x << ", " << lesion.y << ") radius " << lesion.radius;
}

std::vector<SampleSlide> plan_sample_slides(int count) {
  if (count < 1) throw Error("sample-data: the slide count must be at least 1");
  // Per class: 1/6 val and 1/6 test (at least one each from 3 slides on), the rest train;
  // 12 per class gives 8/2/2, so 24 slides split 16/4/4.
  auto splits = [](int n) {
    const int held_out = n >= 3 ? std::max(1, static_cast<int>(std::lround(n / 6.0))) : 0;
    std::vector<std::string> out(static_cast<size_t>(n), "train");
    for (int i = 0; i < held_out; ++i) {
      out[static_cast<size_t>(n - 1 - i)] = "test";
      out[static_cast<size_t>(n - 1 - held_out - i)] = "val";
    }
    if (n == 2) out[1] = "val";
    return out;
  };
  const int tumours = (count + 1) / 2;
  const std::vector<std::string> tumour_splits = splits(tumours);
  const std::vector<std::string> normal_splits = splits(count - tumours);
  // Classes alternate so a prefix of the list is balanced too.
  std::vector<SampleSlide> slides;
  int t = 0, n = 0;
  for (int i = 0; i < count; ++i) {
    SampleSlide slide;
    slide.file = numbered("slide_", i, ".tif");
    slide.patient = numbered("patient_", i);
    const bool tumour = i % 2 == 0 ? t < tumours : n >= count - tumours;
    slide.label = tumour ? kTumour : kNormal;
    slide.split =
        tumour ? tumour_splits[static_cast<size_t>(t++)] : normal_splits[static_cast<size_t>(n++)];
    slides.push_back(slide);
  }
  return slides;
}

void write_sample_slide(const fs::path& path, SampleSlide& slide, int64_t size, double mpp,
                        uint64_t seed, SampleTask task) {
  start_vips();
  if (size < 2 * kTileSize || size > 200000) {
    throw Error("sample-data: the slide size must be between " + std::to_string(2 * kTileSize) +
                " and 200000 pixels, not " + std::to_string(size));
  }
  Random random(seed);
  const int64_t c = size / kDetail;  // the texture resolution
  try {
    // Tissue: blobs from low-frequency noise, cut at the quantile that gives the fraction chosen.
    const int64_t n = std::max<int64_t>(32, size / 64);
    const VImage field = tissue_field(n, random).copy_memory();
    slide.tissue_fraction = random.uniform(0.36, 0.52);
    const int threshold = field.percent(100.0 * (1.0 - slide.tissue_fraction));
    VImage tissue = ramp(upsample(field, c, c), threshold - 2.0, threshold + 2.0);

    // Stain: pink stroma where the mid-frequency field is low, purple cellular areas where high.
    const int64_t microns = texture_microns(mpp);
    const int64_t coarse = std::max<int64_t>(8, c / 8);
    // Perlin cells of ~150–200 µm, drawn at 1/8 of the texture resolution.
    const int64_t stain_cell = 150 / microns / 8 + 4;
    const VImage stain = ramp(upsample(perlin(coarse, stain_cell, random).scale(), c, c), 80, 190);
    VImage colour = stain.linear(minus(kCellular, kStroma), kStroma);

    // Fibres: noise stretched along one axis (~2 µm thick, a few times 24 µm long), horizontal
    // in some regions and vertical in others.
    const int64_t stretch = std::max<int64_t>(2, 24 / microns);
    const VImage across = upsample(noise(c / 2, c / stretch, random).gaussblur(0.7), c, c);
    const VImage along = upsample(noise(c / stretch, c / 2, random).gaussblur(0.7), c, c);
    const VImage orientation =
        ramp(upsample(perlin(coarse, coarse / 3, random).scale(), c, c), 110, 146);
    const VImage fibres = ramp(blend(across, along, orientation) * 100 + 128, 150, 200);
    colour = colour + (fibres * (1 - stain)).linear(kFibre, {0, 0, 0});

    // Nuclei: blurred noise cut high (sparse dots, ~6 µm); lesions cut it low (dense clusters).
    const VImage nuclei_field = nuclei_noise(c, 2, microns, random);
    const VImage nuclei = ramp(nuclei_field, 215, 240);
    const VImage base = colour;
    colour = blend(colour, kNucleus, nuclei);

    if (task == SampleTask::kCells) {
      colour = cellular_lesions(colour, base, tissue, slide, field, threshold, size, mpp, random);
    } else if (slide.label == kTumour) {
      slide.lesions = place_lesions(field, threshold, size, dense_radii(size), random);
      const VImage lesion = lesion_mask(slide.lesions, c);
      const VImage dense = ramp(nuclei_field, 150, 185);
      const VImage lesion_colour = dense.linear(minus(kLesionNucleus, kLesion), kLesion);
      colour = blend(colour, lesion_colour, lesion);
      tissue = (lesion > tissue).ifthenelse(lesion, tissue);
    }
    VImage texture =
        (colour.linear({1, 1, 1}, minus({0, 0, 0}, kGlass)) * tissue).linear({1, 1, 1}, kGlass);
    if (task == SampleTask::kCells) {
      // The pen, over tissue and glass, from a random stream of its own: the rest of the slide
      // is as generator 2 drew it.
      Random marker(seed ^ 0x70656e2d696e6b00ULL);
      slide.pen = place_pen(slide, size, mpp, marker);
      for (const PenStroke& stroke : slide.pen) {
        texture = blend(texture, stroke.green ? kGreenInk : kBlueInk, pen_mask({stroke}, c) * 0.85);
      }
    }

    // Level 0: the texture upsampled, with a fine grain so the glass is not flat.
    // The grain is a 512² noise tile repeated: full-size noise would cost more than the rest of
    // the slide, and a repeat of faint noise every 256 µm is invisible.
    const int64_t period = std::min<int64_t>(512, size);
    const auto repeats = static_cast<int>((size + period - 1) / period);
    const VImage grain =
        VImage::gaussnoise(
            static_cast<int>(period), static_cast<int>(period),
            VImage::option()->set("sigma", 2.0)->set("mean", 0.0)->set("seed", random.vips_seed()))
            .copy_memory()
            .replicate(repeats, repeats)
            .crop(0, 0, static_cast<int>(size), static_cast<int>(size));
    VImage level0 =
        (upsample(texture.cast(VIPS_FORMAT_UCHAR), size, size) + grain).cast(VIPS_FORMAT_UCHAR);
    level0 = level0.copy(VImage::option()->set("interpretation", VIPS_INTERPRETATION_sRGB));
    level0.set("image-description", aperio_description(size, mpp).c_str());
    level0.tiffsave(const_cast<char*>(path.c_str()),
                    VImage::option()
                        ->set("tile", true)
                        ->set("tile_width", kTileSize)
                        ->set("tile_height", kTileSize)
                        ->set("pyramid", true)
                        ->set("compression", VIPS_FOREIGN_TIFF_COMPRESSION_JPEG)
                        ->set("Q", kJpegQuality)
                        ->set("xres", 1000.0 / mpp)  // pixels per millimetre
                        ->set("yres", 1000.0 / mpp));
  } catch (const vips::VError& e) {
    throw Error(path.string() + ": could not write the synthetic slide: " + e.what());
  }
}

std::vector<SampleSlide> write_sample_data(const fs::path& folder, const SampleDataOptions& options,
                                           const SampleProgress& progress) {
  if (!(options.mpp > 0)) throw Error("sample-data: the mpp must be positive");
  std::vector<SampleSlide> slides = plan_sample_slides(options.slides);
  start_vips();
  prepare_folder(folder, options.force);

  const auto start = std::chrono::steady_clock::now();
  std::atomic<int> next{0};
  std::mutex mutex;  // guards failure and the progress calls
  std::exception_ptr failure;
  auto work = [&] {
    for (int i = next++; i < options.slides; i = next++) {
      SampleSlide& slide = slides[static_cast<size_t>(i)];
      const fs::path path = folder / slide.file;
      const fs::path temporary = folder / ("." + slide.file + ".part");
      try {
        write_sample_slide(temporary, slide, options.size, options.mpp, slide_seed(options.seed, i),
                           options.task);
        fs::rename(temporary, path);
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!failure) failure = std::current_exception();
        next = options.slides;  // the other workers stop after their current slide
        return;
      }
      const double elapsed_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::lock_guard lock(mutex);
      if (progress) progress(slide, i, options.slides, elapsed_s);
    }
  };
  const int workers = std::clamp(options.workers, 1, options.slides);
  std::vector<std::thread> threads;
  for (int w = 1; w < workers; ++w) threads.emplace_back(work);
  work();
  for (std::thread& thread : threads) thread.join();
  if (failure) std::rethrow_exception(failure);

  write_atomically(folder / "manifest.csv", manifest_csv(slides));
  write_atomically(folder / "lesions.json", lesions_json(slides, options));
  return slides;
}

}  // namespace tessel::io
