// One layout of `unillm tune` run as child processes (`mpirun -np N unillm train LAYOUT.yaml`):
// its memory plan (`train --plan-only`) and the wall time of a few steps, timed as rank 0's
// progress lines arrive. Nothing here throws for a failing child: the failure is a result.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace unillm::cli::tune {

// What a child run needs to start: this binary, the process count and the flags every run gets.
struct Launcher {
  std::string self;    // this unillm binary
  std::string mpirun;  // absolute path; "" when nproc == 1
  int nproc = 1;
  int timeout_s = 600;                   // per child run (coreutils `timeout`)
  std::vector<std::string> train_flags;  // passed to every `unillm train` (--threads N, --device D)
};

// The shell command that runs `unillm ARGS` as launcher.nproc processes (mpirun when > 1, with
// the flags `unillm launch` uses on one host), bounded by launcher.timeout_s.
std::string command_line(const Launcher& l, const std::vector<std::string>& args);

// A child's merged stdout + stderr, each line with the seconds since the start when it arrived.
struct Captured {
  int exit_code = -1;  // 124: timed out
  std::vector<std::pair<double, std::string>> lines;
};
Captured run_captured(const std::string& command);
// The first line that reports an error ("unillm: error: ..."), else the last non-empty line.
std::string first_error(const Captured& c, int timeout_s);

struct PlanResult {
  bool ok = false;
  std::string error;  // why there is no plan
  int64_t peak = 0;   // planned peak of one process (bytes)
  int64_t limit = 0;  // the limit of one process the child found (0 = none)
  bool fits = false;  // peak <= limit, as the trainer checks it
  std::string limit_source;
};
// `unillm train YAML --plan-only` as the layout's processes.
PlanResult plan_layout(const Launcher& l, const std::string& yaml_path);

struct Timing {
  bool ok = false;
  std::string error;
  double step_s = 0;        // median wall time of the steady steps (after the first)
  double tokens_per_s = 0;  // median of those steps' tok/s as rank 0 reported them
  int steps = 0;            // steady steps measured
};
// `unillm train YAML max_steps=steps+1 ...` into out_dir: the first step is warm-up.
Timing time_layout(const Launcher& l, const std::string& yaml_path, int steps,
                   const std::string& out_dir);

// The median of v (empty: 0).
double median(std::vector<double> v);

}  // namespace unillm::cli::tune
