// Runs the built `tessel` (TESSEL_CLI, set by CMake) as a user would: exit code and output.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>

namespace tessel::testing {

struct CliRun {
  int exit_code;
  std::string output;  // stdout and stderr together
};

// Any command line, through the shell: its exit code and output (stdout and stderr together).
inline CliRun run_command(const std::string& command_line) {
  const std::string command = command_line + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string output;
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) output += buffer.data();
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

inline CliRun run_cli(const std::string& args) {
#ifdef TESSEL_CLI
  return run_command(std::string(TESSEL_CLI) + " " + args);
#else
  return {-1, "TESSEL_CLI is not defined for this test"};
#endif
}

#ifdef TESSEL_CLI
// `tessel args`, started and left running, its output to `log`: the pid, for kill and wait_cli.
inline pid_t spawn_cli(const std::string& args, const std::string& log) {
  const std::string command =
      std::string("exec ") + TESSEL_CLI + " " + args + " > " + log + " 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}
#endif

// The exit code of a spawned process; 128 + the signal's number when a signal ended it.
inline int wait_cli(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace tessel::testing
