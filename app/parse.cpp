#include "app/parse.h"

#include <stdexcept>

#include "core/error.h"
#include "core/plan/plan.h"

namespace tessel::app {

std::pair<int64_t, int64_t> parse_size(const std::string& text) {
  const auto x = text.find_first_of("xX×");
  try {
    if (x != std::string::npos) {
      const int64_t w = std::stoll(text.substr(0, x));
      const int64_t h = std::stoll(text.substr(text.find_first_not_of("xX×", x)));
      if (w > 0 && h > 0) return {h, w};
    }
  } catch (const std::exception&) {
  }
  throw Error("'" + text + "' is not an image size: write WIDTHxHEIGHT, e.g. 20000x20000");
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
