#include "app/parse.h"

#include "core/error.h"

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

}  // namespace tessel::app
