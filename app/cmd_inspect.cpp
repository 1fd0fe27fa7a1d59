// `tessel inspect SLIDE`: what OpenSlide sees in a slide file: vendor, levels, microns per pixel,
// objective power, associated images and every property.
#include <iostream>
#include <memory>
#include <sstream>

#include "app/command.h"
#include "io/slide.h"

namespace tessel::app {
namespace {

// One property per line: multi-line values (Aperio's ImageDescription) keep their breaks as \n.
std::string escaped(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\n') {
      out += "\\n";
    } else if (c != '\r') {
      out += c;
    }
  }
  return out;
}

std::string describe(const io::Slide& slide) {
  std::ostringstream out;
  out << "slide       " << slide.path().string() << "\n";
  out << "vendor      " << slide.vendor() << "\n";
  out << "levels      " << slide.level_count() << " (width × height px, downsample from level 0)\n";
  for (int i = 0; i < slide.level_count(); ++i) {
    const io::Level& level = slide.level(i);
    out << "  level " << i << "   " << level.width << " × " << level.height << ", downsample "
        << level.downsample << "\n";
  }
  out << "mpp         ";
  if (slide.mpp_x() && slide.mpp_y()) {
    out << *slide.mpp_x() << " × " << *slide.mpp_y() << " µm per level-0 pixel (x × y)\n";
  } else {
    out << "none in the file\n";
  }
  out << "objective   ";
  if (slide.objective_power()) {
    out << *slide.objective_power() << "×\n";
  } else {
    out << "none\n";
  }
  out << "associated  ";
  if (slide.associated_image_names().empty()) out << "none";
  for (const std::string& name : slide.associated_image_names()) {
    const auto [width, height] = slide.associated_image_size(name);
    out << (&name == &slide.associated_image_names().front() ? "" : ", ") << name << " (" << width
        << " × " << height << ")";
  }
  out << "\n";
  out << "properties  " << slide.properties().size() << "\n";
  for (const auto& [key, value] : slide.properties()) {
    out << "  " << key << " = " << escaped(value) << "\n";
  }
  return out.str();
}

}  // namespace

void register_inspect(CLI::App& app, const GlobalOptions& /*global*/, CommandRegistry& registry) {
  auto* cmd = app.add_subcommand(
      "inspect",
      "Print a slide's vendor, levels, microns per pixel, objective power, associated images and "
      "properties");
  auto path = std::make_shared<std::string>();
  cmd->add_option("slide", *path, "The slide file (any format OpenSlide reads)")->required();
  cmd->callback([&registry, path] {
    registry.selected = [path] {
      std::cout << describe(io::Slide(*path));
      return 0;
    };
  });
}

}  // namespace tessel::app
