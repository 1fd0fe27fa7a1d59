// Runs `tessel bench read` as bench/run does, on a tiny real slide: one JSON line per reader and
// thread count (no timing claims).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "tests/io/shared_slides.h"
#include "tests/run_cli.h"

namespace {

using tessel::testing::run_cli;

int64_t count_of(const std::string& text, const std::string& part) {
  int64_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(BenchReadCli, PrintsOneJsonLinePerReaderAndThreadCount) {
  const auto run = run_cli("bench read --slide " + tessel::test::shared_slide("boxes.tiff") +
                           " --region 64 --limit 4 --threads 1,2 --log-level warn");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(count_of(run.output, "{\"bench\":\"read\""), 6) << run.output;
  for (const std::string reader : {"raw", "openslide", "libvips"}) {
    EXPECT_EQ(count_of(run.output, "\"reader\":\"" + reader + "\""), 2) << run.output;
  }
  EXPECT_EQ(count_of(run.output, "\"regions\":4,"), 6) << run.output;
}

TEST(BenchReadCli, RefusesAReaderItDoesNotKnow) {
  const auto run =
      run_cli("bench read --slide " + tessel::test::shared_slide("boxes.tiff") + " --readers vips");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("vips"), std::string::npos) << run.output;
}

}  // namespace
