#include "app/parse.h"

#include <stdexcept>

#include "core/error.h"
#include "core/plan/plan.h"

namespace tessel::app {

namespace {

// A whole decimal number, nothing before or after it; -1 otherwise.
int64_t whole_number(const std::string& text) {
  if (text.empty() || text.size() > 18 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return -1;
  }
  return std::stoll(text);
}

}  // namespace

std::pair<int64_t, int64_t> parse_size(const std::string& text) {
  const auto x = text.find_first_of("xX×");
  if (x != std::string::npos) {
    const size_t after = text.find_first_not_of("xX×", x);
    const int64_t w = whole_number(text.substr(0, x));
    const int64_t h = after == std::string::npos ? -1 : whole_number(text.substr(after));
    if (w > kMaxImageSide || h > kMaxImageSide) {
      throw Error("'" + text + "' is larger than any slide: each side is at most " +
                  std::to_string(kMaxImageSide) + " px");
    }
    if (w > 0 && h > 0) return {h, w};
  }
  throw Error("'" + text + "' is not an image size: write WIDTHxHEIGHT, e.g. 20000x20000");
}

CLI::Validator positive_bytes() {
  return {[](std::string& text) -> std::string {
            try {
              if (core::parse_bytes(text) > 0) return {};
            } catch (const Error& e) {
              return e.what();
            }
            return "'" + text + "' is no memory at all: give a positive size, e.g. 2GiB";
          },
          "SIZE"};
}

core::OffloadPrices parse_prices(const std::string& text) {
  const auto comma = text.find(',');
  double ns = 0, gflops = 0;
  try {
    if (comma == std::string::npos) throw std::invalid_argument("no comma");
    size_t used = 0;
    ns = std::stod(text.substr(0, comma), &used);
    if (used != comma) throw std::invalid_argument("trailing characters");
    const std::string rest = text.substr(comma + 1);
    gflops = std::stod(rest, &used);
    if (used != rest.size()) throw std::invalid_argument("trailing characters");
  } catch (const std::exception&) {
    throw Error("--prices '" + text +
                "': expected NS_PER_BYTE,GFLOPS, two numbers such as 1.1,270");
  }
  if (!(ns > 0) || !(gflops > 0)) {
    throw Error("--prices '" + text + "': both prices must be positive");
  }
  core::OffloadPrices p;
  p.seconds_per_byte_moved = ns * 1e-9;
  p.seconds_per_flop = 1.0 / (gflops * 1e9);
  p.measured = true;
  p.given = true;
  return p;
}

}  // namespace tessel::app
