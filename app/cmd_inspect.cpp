// `tessel inspect SLIDE`: what OpenSlide sees in a slide file: vendor, levels, microns per pixel,
// objective power, associated images and every property; with --mpp / --magnification / --level
// / --base-mpp, also the level Tessel would read, its scale, the effective mpp and the size.
#include <iostream>
#include <memory>
#include <sstream>

#include "app/command.h"
#include "app/resolution_options.h"
#include "io/resolution.h"
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

std::string describe(const io::Slide& slide, const io::Resolution& resolution) {
  const io::ResolutionChoice choice = io::choose_resolution(io::pyramid_of(slide), resolution);
  std::ostringstream out;
  out << "resolution  " << resolution << "\n";
  out << "  read      level " << choice.level;
  if (choice.scale == 1.0) {
    out << " as it is\n";
  } else {
    out << ", shrunk by " << choice.scale << " (level pixels per output pixel, box filter)\n";
  }
  out << "  mpp       ";
  if (choice.mpp) {
    out << *choice.mpp << " µm per output pixel\n";
  } else {
    out << "unknown (none in the file; give --base-mpp)\n";
  }
  out << "  size      " << choice.width << " × " << choice.height << " px (width × height)\n";
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
  auto resolution = std::make_shared<ResolutionOptions>();
  add_resolution_options(*cmd, *resolution);
  cmd->callback([&registry, path, resolution] {
    registry.selected = [path, resolution] {
      const io::Slide slide(*path);
      std::string text = describe(slide);
      // Chosen before printing anything, so a refusal is a one-line error.
      if (const auto asked = resolution_of(*resolution)) text += describe(slide, *asked);
      std::cout << text;
      return 0;
    };
  });
}

}  // namespace tessel::app
