#include "io/ome_xml.h"

#include <charconv>
#include <cmath>
#include <utility>

#include "core/error.h"

namespace tessel::io {
namespace {

// The opening tag of the first element named `name`, with or without a namespace prefix
// (<Pixels ...> or <ome:Pixels ...>): the text between its name and its '>'.
std::optional<std::string_view> first_tag(std::string_view xml, std::string_view name) {
  for (size_t at = xml.find('<'); at != std::string_view::npos; at = xml.find('<', at + 1)) {
    size_t start = at + 1;
    const size_t end_of_name = xml.find_first_of(" \t\r\n/>", start);
    if (end_of_name == std::string_view::npos) return std::nullopt;
    std::string_view tag = xml.substr(start, end_of_name - start);
    if (const size_t colon = tag.find(':'); colon != std::string_view::npos) {
      tag = tag.substr(colon + 1);
    }
    if (tag == name) {
      const size_t close = xml.find('>', end_of_name);
      if (close == std::string_view::npos) return std::nullopt;
      return xml.substr(end_of_name, close - end_of_name);
    }
  }
  return std::nullopt;
}

// The value of attribute `name` in a tag's text (name="value" or name='value').
std::optional<std::string_view> attribute(std::string_view tag, std::string_view name) {
  for (size_t at = tag.find(name); at != std::string_view::npos; at = tag.find(name, at + 1)) {
    const bool starts_word = at > 0 && (tag[at - 1] == ' ' || tag[at - 1] == '\t' ||
                                        tag[at - 1] == '\n' || tag[at - 1] == '\r');
    size_t i = at + name.size();
    while (i < tag.size() && tag[i] == ' ') ++i;
    if (!starts_word || i >= tag.size() || tag[i] != '=') continue;
    ++i;
    while (i < tag.size() && tag[i] == ' ') ++i;
    if (i >= tag.size() || (tag[i] != '"' && tag[i] != '\'')) return std::nullopt;
    const size_t close = tag.find(tag[i], i + 1);
    if (close == std::string_view::npos) return std::nullopt;
    return tag.substr(i + 1, close - i - 1);
  }
  return std::nullopt;
}

std::optional<double> number(std::string_view text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

// Microns per unit of OME's UnitsLength; nullopt for units that are not lengths (pixel, ...).
std::optional<double> microns_per(std::string_view unit) {
  static const std::pair<std::string_view, double> kUnits[] = {
      {"\xC2\xB5m", 1.0},  // µm, MICRO SIGN
      {"\xCE\xBCm", 1.0},  // μm, GREEK SMALL LETTER MU
      {"um", 1.0},        {"nm", 1e-3}, {"\xC3\x85", 1e-4} /* Å */,
      {"pm", 1e-6},       {"mm", 1e3},  {"cm", 1e4},
      {"dm", 1e5},        {"m", 1e6}};
  for (const auto& [name, microns] : kUnits) {
    if (unit == name) return microns;
  }
  return std::nullopt;
}

std::optional<double> physical_size(std::string_view pixels, const std::string& axis) {
  const auto size = attribute(pixels, "PhysicalSize" + axis);
  if (!size) return std::nullopt;
  const auto value = number(*size);
  if (!value || *value <= 0) {
    throw Error("its OME-XML gives PhysicalSize" + axis + "=\"" + std::string(*size) +
                "\", not a positive number");
  }
  const std::string_view unit =
      attribute(pixels, "PhysicalSize" + axis + "Unit").value_or("\xC2\xB5m");
  const auto microns = microns_per(unit);
  if (!microns) {
    throw Error("its OME-XML gives PhysicalSize" + axis + " in \"" + std::string(unit) +
                "\", not a length");
  }
  return *value * *microns;
}

}  // namespace

std::optional<OmePixels> read_ome_pixels(std::string_view description) {
  if (!first_tag(description, "OME")) return std::nullopt;
  const auto pixels = first_tag(description, "Pixels");
  if (!pixels) throw Error("its OME-XML has no Pixels element");
  OmePixels out;
  for (auto [axis, size] : {std::pair{"SizeX", &out.size_x}, std::pair{"SizeY", &out.size_y}}) {
    const auto text = attribute(*pixels, axis);
    const auto value = text ? number(*text) : std::nullopt;
    if (!value || *value < 1 || *value > 1e12 || *value != std::floor(*value)) {
      throw Error(std::string("its OME-XML gives no whole number of pixels for ") + axis);
    }
    *size = static_cast<int64_t>(*value);
  }
  out.mpp_x = physical_size(*pixels, "X");
  out.mpp_y = physical_size(*pixels, "Y");
  return out;
}

}  // namespace tessel::io
