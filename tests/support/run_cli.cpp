// Subprocess runner for CLI tests.
#include "support/run_cli.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include "support/expect.h"

#include <fstream>
#include <sstream>

namespace unillm::testing {


std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string temp_dir(const std::string& tag) {
  static std::atomic<int> counter{0};
  auto dir = std::filesystem::path(UNILLM_BINARY_DIR) / "test_tmp" /
             (tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

CliResult run_shell(const std::string& command) {
  std::string dir = temp_dir("cli");
  std::string out = dir + "/out", err = dir + "/err";
  std::string cmd = "{ " + command + "; } >" + out + " 2>" + err;
  int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  std::filesystem::remove_all(dir);
  return r;
}

CliResult run_unillm(const std::string& args, const std::string& stdin_path) {
  return run_shell(std::string(UNILLM_BINARY_DIR) + "/unillm " + args + " <" + shell_quote(stdin_path));
}

CliResult run_unillm_in(const std::string& cwd, const std::string& args) {
  return run_shell("cd " + shell_quote(cwd) + " && " + std::string(UNILLM_BINARY_DIR) + "/unillm " +
                   args + " </dev/null");
}

}  // namespace unillm::testing
