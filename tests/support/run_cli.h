// Runs the built `unillm` binary and captures stdout, stderr and the exit code.
#pragma once

#include <string>

namespace unillm::testing {

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

// args is appended to the binary path as a shell command line (quote as needed).
// stdin_path: the file the command reads as stdin.
CliResult run_unillm(const std::string& args, const std::string& stdin_path = "/dev/null");
// The same, run from the directory cwd.
CliResult run_unillm_in(const std::string& cwd, const std::string& args);
// Runs a shell command line (whose own redirections are kept) and captures it the same way.
CliResult run_shell(const std::string& command);
// A fresh empty temp dir under the build tree, unique per call.
std::string temp_dir(const std::string& tag);
// Shell-quotes s with single quotes.
std::string shell_quote(const std::string& s);

}  // namespace unillm::testing
