// Files a user names are taken only as regular files, and read whole only up to a bound.
#include "io/user_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "core/error.h"
#include "temp_folder.h"

namespace tessel::io {
namespace {

std::string refusal(const std::filesystem::path& path, int64_t max_bytes = kMaxTextFileBytes) {
  try {
    (void)read_user_file(path, "cannot read list " + path.string() + ": ", max_bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "(read)";
}

TEST(UserFile, OnlyARegularFileIsRead) {
  test::TempFolder folder;
  const auto file = folder.write("list.csv", "a,b\n1,2\n");
  EXPECT_EQ(read_user_file(file, "", 100), "a,b\n1,2\n");
  EXPECT_EQ(not_a_regular_file(file), "");

  const auto fifo = folder.path() / "pipe";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(refusal(fifo), "cannot read list " + fifo.string() +
                               ": it is a named pipe (FIFO), not a file; Tessel reads files");
  EXPECT_NE(refusal("/dev/zero").find("it is a device, not a file"), std::string::npos);
  EXPECT_NE(refusal(folder.path()).find("it is a folder, not a file"), std::string::npos);
  EXPECT_NE(refusal(folder.path() / "missing.csv").find(": no such file"), std::string::npos);
  EXPECT_NE(refusal(file / "below").find(": no such file"), std::string::npos);
}

TEST(UserFile, AFileOverItsBoundIsRefusedSayingBoth) {
  test::TempFolder folder;
  const auto file = folder.write("big.csv", std::string(2000, 'x'));
  EXPECT_EQ(read_user_file(file, "", 2000).size(), 2000U);
  const std::string message = refusal(file, 1024);
  EXPECT_NE(message.find("it holds 2.0 KiB, more than the 1.0 KiB such a file may hold"),
            std::string::npos)
      << message;
}

TEST(UserFile, Utf8IsCheckedByteForByte) {
  EXPECT_EQ(utf8_problem("plain ascii, caf\xC3\xA9, \xE2\x82\xAC, \xF0\x9F\x98\x80"), "");
  EXPECT_EQ(utf8_problem("caf\xE9"), "byte 4 (0xE9) is not UTF-8");           // cp1252's é
  EXPECT_EQ(utf8_problem("\xC0\x80"), "byte 1 (0xC0) is not UTF-8");          // overlong
  EXPECT_EQ(utf8_problem("a\xED\xA0\x80"), "byte 2 (0xED) is not UTF-8");     // a surrogate
  EXPECT_EQ(utf8_problem("ab\xE2\x82"), "byte 3 (0xE2) is not UTF-8");        // cut short
  EXPECT_EQ(utf8_problem("\xF5\x80\x80\x80"), "byte 1 (0xF5) is not UTF-8");  // past U+10FFFF
  EXPECT_EQ(utf8_problem("\xF4\x90\x80\x80"), "byte 1 (0xF4) is not UTF-8");
}

}  // namespace
}  // namespace tessel::io
