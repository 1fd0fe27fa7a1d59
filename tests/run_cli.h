// Runs the built `tessel` (TESSEL_CLI, set by CMake) as a user would: exit code and output.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace tessel::testing {

struct CliRun {
  int exit_code;
  std::string output;  // stdout and stderr together
};

inline CliRun run_cli(const std::string& args) {
  const std::string command = std::string(TESSEL_CLI) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string output;
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) output += buffer.data();
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

}  // namespace tessel::testing
