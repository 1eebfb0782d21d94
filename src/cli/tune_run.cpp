// Child runs of `unillm tune`: the mpirun line, output captured with arrival times, the plan's
// JSON line and the step times read from rank 0's progress lines.
#include "cli/tune_run.h"

#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <regex>

namespace unillm::cli::tune {

namespace {

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

std::string command_line(const Launcher& l, const std::vector<std::string>& args) {
  // -k: a child that ignores the TERM is killed 5 s later.
  std::string cmd = "timeout -k 5 " + std::to_string(l.timeout_s) + " ";
  if (l.nproc > 1)  // as `unillm launch` on one host: shared memory, loopback, no binding
    cmd += quote(l.mpirun) + " -np " + std::to_string(l.nproc) +
           " --oversubscribe --bind-to none --mca btl self,vader --mca oob_tcp_if_include lo ";
  cmd += quote(l.self);
  for (const auto& a : args) cmd += " " + quote(a);
  return cmd + " 2>&1";
}

Captured run_captured(const std::string& command) {
  Captured c;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* f = popen(command.c_str(), "r");
  if (!f) {
    c.lines.emplace_back(0.0, "could not start: " + command);
    return c;
  }
  std::string line;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, f)) {
    line += buf;
    if (line.empty() || line.back() != '\n') continue;  // a longer line: read on
    line.pop_back();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    c.lines.emplace_back(t, line);
    line.clear();
  }
  if (!line.empty()) c.lines.emplace_back(0.0, line);
  const int status = pclose(f);
  c.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return c;
}

std::string first_error(const Captured& c, int timeout_s) {
  if (c.exit_code == 124)
    return "timed out after " + std::to_string(timeout_s) + " s (--run-timeout)";
  for (const auto& [t, s] : c.lines)
    if (s.find("unillm: error: ") != std::string::npos)
      return s.substr(s.find("unillm: error: ") + 15);
  // A rank that died (a signal, the OOM killer): Open MPI's banner names it.
  for (const auto& [t, s] : c.lines)
    if (s.find("noticed that process rank") != std::string::npos) return s;
  for (auto it = c.lines.rbegin(); it != c.lines.rend(); ++it)  // skip banner rules ("-----")
    if (std::any_of(it->second.begin(), it->second.end(),
                    [](char ch) { return std::isalpha(static_cast<unsigned char>(ch)); }))
      return "exit status " + std::to_string(c.exit_code) + ": " + it->second;
  return "exit status " + std::to_string(c.exit_code) + " with no output";
}

PlanResult plan_layout(const Launcher& l, const std::string& yaml_path) {
  std::vector<std::string> args = {"train", yaml_path, "--plan-only", "--quiet"};
  args.insert(args.end(), l.train_flags.begin(), l.train_flags.end());
  const Captured c = run_captured(command_line(l, args));
  PlanResult r;
  if (c.exit_code == 0)
    for (const auto& [t, s] : c.lines) {
      if (s.rfind("{\"", 0) != 0) continue;
      const nlohmann::json j = nlohmann::json::parse(s, nullptr, false);
      if (j.is_discarded() || !j.contains("peak")) continue;
      r.ok = true;
      r.peak = j["peak"].get<int64_t>();
      r.limit = j.value("limit", int64_t{0});
      r.limit_source = j.value("limit_source", std::string());
      r.fits = j.value("fits", false);
      return r;
    }
  r.error = c.exit_code == 0 ? "no plan line in the output of `train --plan-only`"
                             : first_error(c, l.timeout_s);
  return r;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Timing time_layout(const Launcher& l, const std::string& yaml_path, int steps,
                   const std::string& out_dir) {
  // Nothing but the steps: no evaluation, checkpoint, plot or prediction.
  std::vector<std::string> args = {"train",
                                   yaml_path,
                                   "max_steps=" + std::to_string(steps + 1),
                                   "logging_steps=1",
                                   "save_strategy=no",
                                   "eval_strategy=no",
                                   "do_eval=false",
                                   "eval_on_start=false",
                                   "load_best_model_at_end=false",
                                   "do_predict=false",
                                   "plot_loss=false",
                                   "overwrite_output_dir=true",
                                   "output_dir=" + out_dir};
  args.insert(args.end(), l.train_flags.begin(), l.train_flags.end());
  const Captured c = run_captured(command_line(l, args));
  Timing r;
  if (c.exit_code != 0) {
    r.error = first_error(c, l.timeout_s);
    return r;
  }
  // "[train] 2/5  40.0% | loss ... | 9445 tok/s | ...", printed by rank 0 after each step.
  static const std::regex progress(R"(^\[train\] (\d+)/\d+ .*\| ([0-9.]+) tok/s)");
  std::vector<double> step_s, tok_s;
  double last = -1;
  for (const auto& [t, s] : c.lines) {
    std::smatch m;
    if (!std::regex_search(s, m, progress)) continue;
    if (std::stoll(m[1].str()) >= 2 && last >= 0) {  // step 1 is warm-up
      step_s.push_back(t - last);
      tok_s.push_back(std::stod(m[2].str()));
    }
    last = t;
  }
  if (step_s.empty()) {
    r.error = "no step after the first was logged (too little data for " +
              std::to_string(steps + 1) + " steps?)";
    return r;
  }
  r.ok = true;
  r.step_s = median(step_s);
  r.tokens_per_s = median(tok_s);
  r.steps = static_cast<int>(step_s.size());
  return r;
}

}  // namespace unillm::cli::tune
