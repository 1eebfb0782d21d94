// `unillm launch --nproc N [...] -- train CONFIG.yaml`: a thin wrapper that builds the mpirun line
// for this binary and execs it (docs/training.md, "Launching"), so users need not remember Open
// MPI's flags; and the rank side of `--dist-timeout` (dist_world_options), the watchdog setting
// every rank reads from its flag or from UNILLM_DIST_TIMEOUT, which launch exports.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/accelerate_config.h"
#include "cli/commands.h"
#include "core/error.h"

extern char** environ;

namespace unillm::cli {
namespace {

const char kLaunchHelp[] =
    "usage: unillm launch --nproc N [--hosts H1:n,H2:n | --hostfile FILE] [--dist-timeout S]\n"
    "                     [--config_file ACCELERATE.yaml]\n"
    "                     [--mca KEY VALUE]... [--mpirun-arg ARG]... -- COMMAND [ARGS...]\n"
    "Runs `unillm COMMAND ARGS` as N processes under Open MPI's mpirun (data-parallel training:\n"
    "`unillm launch --nproc 2 -- train cfg.yaml`). Prints the mpirun line to stderr and execs it;\n"
    "mpirun's exit status is this command's.\n"
    "  --nproc N            number of processes (ranks)\n"
    "  --hosts LIST         comma-separated HOST[:SLOTS] (mpirun --host); ranks talk over TCP\n"
    "  --hostfile FILE      an Open MPI hostfile (`HOST slots=N` lines); ranks talk over TCP\n"
    "  --dist-timeout S     a rank waiting longer than S seconds in one collective ends the job,\n"
    "                       naming its rank (default: UNILLM_DIST_TIMEOUT, else 1800; 0 = never);\n"
    "                       exported to every rank as UNILLM_DIST_TIMEOUT\n"
    "  --mca KEY VALUE      an Open MPI parameter (repeatable): --mca btl_tcp_if_include eth0\n"
    "  --mpirun-arg ARG     one more argument for mpirun, verbatim (repeatable)\n"
    "  --config_file FILE   an accelerate launch config (LLaMA-Factory's examples/accelerate/*.yaml):\n"
    "                       its num_processes is --nproc, and its FSDP or DeepSpeed plugin is\n"
    "                       passed to `train` as fsdp=… / deepspeed=… after the config's own keys;\n"
    "                       num_machines > 1 needs --hosts or --hostfile (one launch starts every\n"
    "                       machine's processes); its mixed_precision applies where the training\n"
    "                       config sets neither bf16 nor fp16\n"
    "One host (no --hosts/--hostfile): shared memory and loopback only (--mca btl self,vader,\n"
    "--mca oob_tcp_if_include lo) and --oversubscribe (Open MPI counts physical cores, not\n"
    "hardware threads, as slots). Always --bind-to none: each rank takes its share of the cores\n"
    "as OpenMP threads itself (unillm train: the host's cores / its ranks, unless --threads).\n"
    "Several hosts: --mca btl self,tcp; the same unillm path must exist on each host.\n"
    "Every UNILLM_* variable set here is exported to the ranks (-x). Run as root, launch sets\n"
    "OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, which mpirun requires.\n";

struct LaunchPlan {
  int64_t nproc = 0;
  std::string hosts, hostfile, timeout, config_file;
  std::vector<std::string> mca, extra, command;  // mca: KEY, VALUE pairs flattened
};

std::string value_of(const std::vector<std::string>& a, size_t& i, const std::string& flag) {
  const std::string& arg = a[i];
  if (arg.size() > flag.size() && arg.compare(0, flag.size() + 1, flag + "=") == 0)
    return arg.substr(flag.size() + 1);
  if (i + 1 >= a.size()) UNILLM_THROW(ConfigError, "[launch] ", flag, " needs a value");
  return a[++i];
}

int64_t parse_nproc(const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || n < 1 || n > 1 << 20)
    UNILLM_THROW(ConfigError, "[launch] --nproc '", v, "' is not a number of processes >= 1");
  return n;
}

// --config_file: accelerate's process count and its plugin's training keys (accelerate_config.h).
void apply_accelerate_config(LaunchPlan& p) {
  const AccelerateLaunch acc = read_accelerate_config(p.config_file);
  if (acc.num_processes > 0) {
    if (p.nproc > 0 && p.nproc != acc.num_processes)
      UNILLM_THROW(ConfigError, "[launch] --nproc ", p.nproc, " but ", p.config_file, " has num_processes ",
                   acc.num_processes);
    p.nproc = acc.num_processes;
  }
  if (acc.num_machines > 1 && p.hosts.empty() && p.hostfile.empty())
    UNILLM_THROW(ConfigError, "[launch] ", p.config_file, ": num_machines ", acc.num_machines,
                 ": accelerate starts one launcher per machine (machine_rank, main_process_ip); unillm launch "
                 "starts every machine's processes from this one over Open MPI: give --hostfile (or --hosts) "
                 "listing the machines");
  if (!acc.train_overrides.empty()) {
    if (p.command[0] != "train")
      UNILLM_THROW(ConfigError, "[launch] ", p.config_file, ": its FSDP/DeepSpeed settings are training keys, "
                   "for `-- train CONFIG`, not `", p.command[0], "`");
    p.command.insert(p.command.end(), acc.train_overrides.begin(), acc.train_overrides.end());
  }
  // Exported to the ranks with the other UNILLM_* variables (mpirun -x); cmd_train reads it.
  if (!acc.mixed_precision.empty()) setenv("UNILLM_ACCELERATE_MIXED_PRECISION", acc.mixed_precision.c_str(), 1);
  std::string said;
  for (const auto& n : acc.notes) said += (said.empty() ? "" : "; ") + n;
  std::fprintf(stderr, "unillm: launch: %s: %s\n", p.config_file.c_str(), said.c_str());
}

// Splits at `--`: the options before, the unillm command after.
LaunchPlan parse_launch(const std::vector<std::string>& args) {
  LaunchPlan p;
  if (std::find(args.begin(), args.end(), "--") == args.end())
    UNILLM_THROW(ConfigError, "[launch] missing `--` before the unillm command, e.g. ",
                 "unillm launch --nproc 2 -- train CONFIG.yaml");
  size_t i = 0;
  const std::vector<std::string> known = {"--nproc", "--hosts",      "--hostfile",   "--dist-timeout",
                                          "--mca",   "--mpirun-arg", "--config_file"};
  for (; i < args.size() && args[i] != "--"; ++i) {
    const std::string& a = args[i];
    auto is = [&](const char* f) { return a == f || a.rfind(std::string(f) + "=", 0) == 0; };
    if (is("--nproc"))
      p.nproc = parse_nproc(value_of(args, i, "--nproc"));
    else if (is("--hosts"))
      p.hosts = value_of(args, i, "--hosts");
    else if (is("--hostfile"))
      p.hostfile = value_of(args, i, "--hostfile");
    else if (is("--dist-timeout"))
      p.timeout = value_of(args, i, "--dist-timeout");
    else if (is("--config_file") || is("--config-file"))
      p.config_file = value_of(args, i, a.rfind("--config-file", 0) == 0 ? "--config-file" : "--config_file");
    else if (is("--mpirun-arg"))
      p.extra.push_back(value_of(args, i, "--mpirun-arg"));
    else if (a == "--mca") {
      if (i + 2 >= args.size()) UNILLM_THROW(ConfigError, "[launch] --mca needs a KEY and a VALUE");
      p.mca.push_back(args[i + 1]);
      p.mca.push_back(args[i + 2]);
      i += 2;
    } else if (a.rfind("-", 0) == 0) {
      const std::string guess = did_you_mean(a.substr(0, a.find('=')), known);
      UNILLM_THROW(ConfigError, "[launch] unknown option '", a, "'",
                   guess.empty() ? "" : " (did you mean '" + guess + "'?)",
                   "; the unillm command goes after `--`");
    } else {
      UNILLM_THROW(ConfigError, "[launch] '", a,
                   "' before `--`: write the unillm command after it, e.g. unillm launch "
                   "--nproc 2 -- train CONFIG.yaml");
    }
  }
  p.command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
  // `-- unillm train …` out of mpirun habit: the program is ours already.
  if (!p.command.empty() && std::filesystem::path(p.command[0]).filename() == "unillm")
    p.command.erase(p.command.begin());
  if (p.command.empty())
    UNILLM_THROW(ConfigError,
                 "[launch] nothing after `--`: give a unillm command (train CONFIG.yaml)");
  if (!p.config_file.empty()) apply_accelerate_config(p);
  if (p.nproc == 0) UNILLM_THROW(ConfigError, "[launch] --nproc N is required");
  if (!p.hosts.empty() && !p.hostfile.empty())
    UNILLM_THROW(ConfigError, "[launch] give --hosts or --hostfile, not both");
  return p;
}

// HOST[:SLOTS],…: well formed, and enough slots for nproc (mpirun's own message is long).
void check_hosts(const std::string& hosts, int64_t nproc) {
  int64_t slots = 0;
  size_t start = 0;
  while (start <= hosts.size()) {
    const size_t end = std::min(hosts.find(',', start), hosts.size());
    const std::string item = hosts.substr(start, end - start);
    const size_t colon = item.find(':');
    const std::string name = item.substr(0, colon);
    int64_t n = 1;
    if (colon != std::string::npos) {
      const std::string s = item.substr(colon + 1);
      n = s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 6
              ? 0
              : std::stoll(s);
    }
    if (name.empty() || n < 1)
      UNILLM_THROW(ConfigError, "[launch] --hosts '", hosts, "': '", item,
                   "' is not HOST or HOST:SLOTS (SLOTS >= 1)");
    slots += n;
    start = end + 1;
  }
  if (slots < nproc)
    UNILLM_THROW(ConfigError, "[launch] --hosts '", hosts, "' has ", slots, " slots for --nproc ",
                 nproc, ": give HOST:SLOTS, or --mpirun-arg --oversubscribe");
}

std::string find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, end - start);
    const std::string cand = (dir.empty() ? "." : dir) + "/" + name;
    if (access(cand.c_str(), X_OK) == 0) return cand;
    start = end + 1;
  }
  return "";
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() &&
      s.find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") ==
          std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::vector<std::string> mpirun_line(const LaunchPlan& p, const std::string& mpirun,
                                     const std::string& self) {
  std::vector<std::string> a = {mpirun, "-np", std::to_string(p.nproc), "--bind-to", "none"};
  const bool one_host = p.hosts.empty() && p.hostfile.empty();
  if (!p.hosts.empty()) a.insert(a.end(), {"--host", p.hosts});
  if (!p.hostfile.empty()) a.insert(a.end(), {"--hostfile", p.hostfile});
  // Open MPI counts physical cores as a host's slots, so N ranks on N hardware threads would be
  // refused without it; it only permits sharing (yielding when idle is Open MPI's own choice).
  // Several hosts: TCP only, so shared memory never stands in for the network in a test.
  if (one_host)
    a.insert(a.end(), {"--oversubscribe", "--mca", "btl", "self,vader", "--mca",
                       "oob_tcp_if_include", "lo"});
  else
    a.insert(a.end(), {"--mca", "btl", "self,tcp"});
  for (size_t i = 0; i + 1 < p.mca.size(); i += 2)
    a.insert(a.end(), {"--mca", p.mca[i], p.mca[i + 1]});
  a.insert(a.end(), p.extra.begin(), p.extra.end());
  for (char** e = environ; *e; ++e) {  // UNILLM_DIST_TIMEOUT (set by cmd_launch) and the rest
    const std::string kv = *e;
    if (kv.rfind("UNILLM_", 0) == 0) a.insert(a.end(), {"-x", kv.substr(0, kv.find('='))});
  }
  a.push_back(self);
  a.insert(a.end(), p.command.begin(), p.command.end());
  return a;
}

double parse_timeout(const std::string& v, const std::string& where) {
  char* end = nullptr;
  const double s = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(s) || s < 0)
    UNILLM_THROW(ConfigError, "[dist] ", where, " '", v,
                 "' is not a number of seconds >= 0 (0: no timeout)");
  return s;
}

// UNILLM_TEST_*_RANK=R[:N] (test-only faults, see dist::WorldOptions).
void parse_fault(const char* name, int* rank, int* at) {
  const char* v = std::getenv(name);
  if (!v || !*v) return;
  int r = -1, n = 1;
  char extra = 0;
  const int got = std::sscanf(v, "%d:%d%c", &r, &n, &extra);
  if (got < 1 || got > 2 || r < 0 || n < 1)
    UNILLM_THROW(ConfigError, "[dist] ", name, "='", v, "' is not RANK[:N]");
  *rank = r;
  if (at) *at = n;
}

}  // namespace

dist::WorldOptions dist_world_options(const std::string& flag_timeout, int launch_rank) {
  dist::WorldOptions o;
  o.launch_rank = launch_rank;
  const char* env = std::getenv("UNILLM_DIST_TIMEOUT");
  if (!flag_timeout.empty())
    o.timeout_s = parse_timeout(flag_timeout, "--dist-timeout");
  else if (env && *env)
    o.timeout_s = parse_timeout(env, "UNILLM_DIST_TIMEOUT");
  parse_fault("UNILLM_TEST_HANG_RANK", &o.hang_rank, nullptr);
  parse_fault("UNILLM_TEST_KILL_RANK", &o.kill_rank, &o.kill_at);
  return o;
}

int cmd_launch(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kLaunchHelp, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  LaunchPlan p = parse_launch(args);
  if (const char* size = std::getenv("OMPI_COMM_WORLD_SIZE"))
    UNILLM_THROW(ConfigError, "[launch] already running under mpirun (OMPI_COMM_WORLD_SIZE=", size,
                 "): run `unillm ", p.command[0],
                 "` directly under mpirun, or `unillm launch` outside it");
  if (!p.hostfile.empty() && !std::filesystem::is_regular_file(p.hostfile))
    UNILLM_THROW(IoError, "[launch] --hostfile ", p.hostfile, ": no such file");
  if (!p.hosts.empty()) check_hosts(p.hosts, p.nproc);
  const double timeout = dist_world_options(p.timeout, -1).timeout_s;  // validates both sources
  const std::string mpirun = find_in_path("mpirun");
  if (mpirun.empty())
    UNILLM_THROW(ConfigError,
                 "[launch] mpirun not found in PATH: install Open MPI (Debian: apt-get install "
                 "openmpi-bin, or scripts/install-deps.sh)");
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) UNILLM_THROW(IoError, "[launch] cannot read /proc/self/exe: ", ec.message());
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", timeout);
  setenv("UNILLM_DIST_TIMEOUT", buf, 1);
  if (geteuid() == 0) {  // mpirun refuses root without both
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  const std::vector<std::string> line = mpirun_line(p, mpirun, self);
  std::string shown;
  for (const auto& w : line) shown += (shown.empty() ? "" : " ") + shell_quote(w);
  std::fprintf(stderr, "unillm: launch: %s\n", shown.c_str());
  std::fflush(stderr);
  std::vector<char*> argv;
  for (const auto& w : line) argv.push_back(const_cast<char*>(w.c_str()));
  argv.push_back(nullptr);
  execv(mpirun.c_str(), argv.data());
  UNILLM_THROW(IoError, "[launch] cannot run ", mpirun, ": ", std::strerror(errno));
}

}  // namespace unillm::cli
