// `unillm tune CONFIG.yaml --nproc N`: the layout search of issue 19. Enumerates the layouts
// N processes can train the config with (tensor parallel × pipeline stages × data parallel ×
// ZeRO stage × micro-batch × recompute, the global batch kept), asks each one's memory plan whether it fits, times a few
// steps of those that do, prints the table and writes the fastest as a config.
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/tune_run.h"
#include "core/error.h"
#include "models/model_config.h"
#include "train/args.h"
#include "train/memory_plan.h"
#include "train/optimizer.h"
#include "train/zero.h"

namespace unillm::cli {

namespace {

namespace fs = std::filesystem;

const char* kUsage =
    "usage: unillm tune CONFIG.yaml --nproc N [--steps K] [--out FILE] [key=value ...]\n"
    "                   [--micro-batches 1,2,4] [--zero 0,1,2,3] [--recompute on,off] [--pp 1,2]\n"
    "                   [--tp 1,2] [--sp on,off]\n"
    "                   [--rounds R]\n"
    "                   [--run-timeout SECONDS] [--threads N] [--device NAME]\n"
    "Searches the layouts N processes on this host can train CONFIG with, keeping its global\n"
    "batch (per_device_train_batch_size x gradient_accumulation_steps of one process): tensor\n"
    "parallel x pipeline stages x data parallel over the rest of the N processes x ZeRO stage\n"
    "(0, 1, 2; AdamW and\n"
    "SGD) x micro-batch x recompute. Each layout's memory plan (`unillm train --plan-only` under mpirun) says\n"
    "whether it fits; those that fit train K steps after one warm-up step, timed. Prints the\n"
    "table and writes the fastest layout as CONFIG with those keys set to --out (default\n"
    "CONFIG-STEM.tuned.yaml in this directory), to run as `unillm launch --nproc N -- train\n"
    "FILE`.\n"
    "  --steps K            timed steps per layout (default 4; the median is kept)\n"
    "  --rounds R           time the layouts that fit R times over, in turn, and keep each one's\n"
    "                       fastest round (default 1): other load on the host only adds time\n"
    "  --micro-batches L    per_device_train_batch_size values to try (default 1, 2, 4, ... up to\n"
    "                       the global batch)\n"
    "  --zero L             ZeRO stages to try (default 0,1,2 where the optimizer is sharded; 3, which\n"
    "                       also shards the parameters, on request; beside --pp only with several\n"
    "                       data-parallel replicas and no --tp)\n"
    "  --recompute L        on, off or both (default on,off)\n"
    "  --run-timeout S      bound on each child run (default 600)\n"
    "  --threads, --device  passed to every `unillm train`\n"
    "  --pp L               pipeline stages to try (default 1 and every divisor of N); N / pp\n"
    "                       processes are data-parallel replicas\n"
    "  --tp L               tensor-parallel degrees to try (default 1 and every divisor of N that\n"
    "                       divides the model's heads, key/value heads and MLP width); N / (tp x pp)\n"
    "                       processes are data-parallel replicas\n"
    "  --sp L               sequence parallelism for the tp > 1 layouts: on, off or both (default both\n"
    "                       for stages pt and sft with their plain token loss, else off)\n";

struct TuneOptions {
  std::string config, out;
  int nproc = 0, steps = 4, rounds = 1, timeout_s = 600;
  std::vector<int64_t> micro;  // empty: powers of two up to the global batch
  std::vector<int> zero;       // empty: 0, 1, 2 as the optimizer allows
  std::vector<int> pp;         // empty: 1 and every divisor of nproc
  std::vector<int> tp;         // empty: 1 and every divisor of nproc the model splits by
  std::vector<bool> sp;        // empty: off and on (tp > 1, pt and sft's plain token loss), else off
  std::vector<bool> recompute = {true, false};
  std::vector<std::string> overrides, train_flags;
};

struct Layout {
  int64_t micro = 1, ga = 1;
  int zero = 0;
  bool recompute = true;
  int pp = 1;  // pipeline stages; the processes are pp × tp × (nproc / (pp · tp)) data-parallel replicas
  int tp = 1;  // tensor-parallel degree
  bool sp = false;  // sequence parallelism (tp > 1)
  int dp(int nproc) const { return nproc / (pp * tp); }
};

struct Row {
  Layout layout;
  tune::PlanResult plan;
  bool fits = false;
  tune::Timing timing;
  std::string note;  // why it was not timed, or why the timing failed
};

int64_t parse_int(const std::string& flag, const std::string& v, int64_t min) {
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty() || n < min)
    UNILLM_THROW(ConfigError, "[tune] ", flag, " ", v, ": expected a whole number >= ", min);
  return n;
}

std::vector<std::string> split_commas(const std::string& v) {
  std::vector<std::string> out;
  std::stringstream in(v);
  for (std::string w; std::getline(in, w, ',');)
    if (!w.empty()) out.push_back(w);
  return out;
}

std::string value_of(const std::vector<std::string>& args, size_t& i) {
  if (i + 1 == args.size()) UNILLM_THROW(ConfigError, "[tune] ", args[i], " needs a value");
  return args[++i];
}

// Applies a list flag (--micro-batches, --zero, --recompute, --pp, --tp, --sp) to o.
void set_list(TuneOptions& o, const std::string& flag, const std::string& v) {
  const auto words = split_commas(v);
  if (words.empty())
    UNILLM_THROW(ConfigError, "[tune] ", flag, " '", v, "': expected a comma-separated list");
  if (flag == "--micro-batches") {
    o.micro.clear();
    for (const auto& w : words) o.micro.push_back(parse_int(flag, w, 1));
  } else if (flag == "--pp" || flag == "--tp") {
    std::vector<int>& list = flag == "--pp" ? o.pp : o.tp;
    list.clear();
    for (const auto& w : words) list.push_back(static_cast<int>(parse_int(flag, w, 1)));
  } else if (flag == "--zero") {
    o.zero.clear();
    for (const auto& w : words) {
      const auto z = parse_int(flag, w, 0);
      if (z > 3) UNILLM_THROW(ConfigError, "[tune] --zero ", w, ": ZeRO stages are 0, 1, 2 and 3");
      o.zero.push_back(static_cast<int>(z));
    }
  } else {
    std::vector<bool>& list = flag == "--sp" ? o.sp : o.recompute;
    list.clear();
    for (const auto& w : words) {
      if (w != "on" && w != "off")
        UNILLM_THROW(ConfigError, "[tune] ", flag, " ", w, ": expected on, off or on,off");
      list.push_back(w == "on");
    }
  }
}

TuneOptions parse_options(const std::vector<std::string>& args) {
  TuneOptions o;
  o.config = args[0];
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--nproc") {
      o.nproc = static_cast<int>(parse_int(a, value_of(args, i), 1));
    } else if (a == "--rounds") {
      o.rounds = static_cast<int>(parse_int(a, value_of(args, i), 1));
    } else if (a == "--steps") {
      o.steps = static_cast<int>(parse_int(a, value_of(args, i), 1));
    } else if (a == "--out") {
      o.out = value_of(args, i);
    } else if (a == "--run-timeout") {
      o.timeout_s = static_cast<int>(parse_int(a, value_of(args, i), 1));
    } else if (a == "--micro-batches" || a == "--zero" || a == "--recompute" || a == "--pp" || a == "--tp" ||
               a == "--sp") {
      set_list(o, a, value_of(args, i));
    } else if (a == "--threads" || a == "--device") {
      o.train_flags.push_back(a);
      o.train_flags.push_back(value_of(args, i));
    } else if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {
      o.overrides.push_back(a.substr(2));  // LLaMA-Factory's --key=value
    } else if (a.find('=') != std::string::npos) {
      o.overrides.push_back(a);
    } else {
      UNILLM_THROW(ConfigError, "[tune] unknown argument '", a,
                   "' (unillm tune --help lists the options)");
    }
  }
  if (o.nproc < 1)
    UNILLM_THROW(ConfigError, "[tune] --nproc N is required: the number of processes to tune for");
  return o;
}

// The config with the overrides applied ("a.b=v" sets one entry of a map), as YAML.
YAML::Node load_config(const TuneOptions& o) {
  YAML::Node root = YAML::LoadFile(o.config);
  if (!root.IsMap())
    UNILLM_THROW(ConfigError, "[tune] ", o.config, ": expected a YAML map of training keys");
  for (const auto& ov : o.overrides) {
    const size_t eq = ov.find('=');
    std::vector<std::string> path;
    std::stringstream in(ov.substr(0, eq));
    for (std::string k; std::getline(in, k, '.');) path.push_back(k);
    YAML::Node n = root;
    for (size_t i = 0; i + 1 < path.size(); ++i) n.reset(n[path[i]]);
    n[path.back()] = YAML::Load(ov.substr(eq + 1));
  }
  return root;
}

// The config as one layout trains it: its parallel keys replaced by the layout's.
YAML::Node layout_node(const YAML::Node& base, const Layout& l) {
  YAML::Node n = YAML::Clone(base);
  for (const char* k : {"deepspeed", "fsdp", "fsdp_config", "sharding", "sharding_parallel_degree",
                        "pipeline_parallel_degree", "virtual_pp_degree", "tensor_parallel_degree",
                        "sequence_parallel"})
    n.remove(k);
  if (l.pp > 1) n["pipeline_parallel_degree"] = l.pp;
  if (l.tp > 1) n["tensor_parallel_degree"] = l.tp;
  if (l.sp) n["sequence_parallel"] = true;
  n["per_device_train_batch_size"] = l.micro;
  n["gradient_accumulation_steps"] = l.ga;
  n["disable_gradient_checkpointing"] = !l.recompute;
  if (l.zero > 0) n["sharding"] = "stage" + std::to_string(l.zero);
  return n;
}

void write_yaml(const std::string& path, const YAML::Node& n, const std::string& header) {
  YAML::Emitter e;
  e << n;
  std::error_code ec;  // --out into a directory that does not exist yet: made, as output_dir is
  if (const fs::path parent = fs::path(path).parent_path(); !parent.empty()) fs::create_directories(parent, ec);
  std::ofstream f(path);
  f << header << e.c_str() << "\n";
  if (!f) UNILLM_THROW(IoError, "[tune] cannot write ", path, ec ? " (" + ec.message() + ")" : std::string());
}

std::string layout_name(const Layout& l, int nproc) {
  std::string s;
  auto add = [&s](const char* axis, int degree) {
    if (degree > 1) s += (s.empty() ? "" : "x") + std::string(axis) + std::to_string(degree);
  };
  add("tp", l.tp);
  add("pp", l.pp);
  add("dp", l.dp(nproc));
  if (s.empty()) s = "dp1";
  return s + (l.sp ? "+sp" : "") + (l.zero > 0 ? "+zero" + std::to_string(l.zero) : "");
}

// Whether the model's layers split over tp ranks (nn's own check, from config.json alone; a
// mixture of experts does not split: nn/moe.h).
bool model_splits(const models::ModelConfig& c, int tp) {
  return c.num_heads % tp == 0 && c.num_kv_heads % tp == 0 && c.intermediate_size % tp == 0 && c.num_experts == 0;
}

// The layouts to try; notes what was left out and why.
std::vector<Layout> enumerate(const TuneOptions& o, const train::TrainArgs& a,
                              std::vector<std::string>& notes) {
  const int64_t global = a.per_device_train_batch_size * a.gradient_accumulation_steps;
  std::vector<int64_t> micro = o.micro;
  if (micro.empty())
    for (int64_t m = 1; m <= global; m *= 2) micro.push_back(m);
  std::vector<int> zero = o.zero;
  const std::string kind = train::optimizer_config(a).kind;
  if (zero.empty()) zero = {0, 1, 2};
  if (o.nproc == 1 || !train::zero_shardable(kind)) {
    if (zero != std::vector<int>{0})
      notes.push_back(o.nproc == 1 ? "ZeRO: one process has nothing to shard; stage 0 only"
                                   : "ZeRO: optimizer " + kind +
                                         " is not sharded (AdamW and SGD are); stage 0 only");
    zero = {0};
  }
  // Pipeline stages: the divisors of the process count (every stage runs as pipeline stages).
  std::vector<int> pp = o.pp;
  if (pp.empty()) {
    pp = {1};
    for (int p = 2; p <= o.nproc; ++p)
      if (o.nproc % p == 0) pp.push_back(p);
  }
  for (int p : pp)
    if (o.nproc % p != 0) UNILLM_THROW(ConfigError, "[tune] --pp ", p, " does not divide --nproc ", o.nproc);
  // Sequence parallelism splits the plain token loss of pt and sft only (train/stages/lm_stage.cpp).
  const bool plain_token_loss = (a.stage == "pt" || a.stage == "sft") && !a.use_asft_loss && !a.use_dft_loss &&
                                !a.use_eaft_loss && a.label_smoothing_factor <= 0;
  if (!plain_token_loss && std::find(o.sp.begin(), o.sp.end(), true) != o.sp.end())
    UNILLM_THROW(ConfigError, "[tune] --sp on: sequence parallelism needs the plain token loss of stages pt and sft "
                 "(stage ", a.stage, " and its loss options do not run with it)");
  // Tensor parallelism: the divisors of the process count that split the model's heads and MLP.
  const models::ModelConfig mc =
      models::load_model_config((fs::path(a.model_name_or_path) / "config.json").string());
  std::vector<int> tp = o.tp;
  if (tp.empty()) {
    tp = {1};
    for (int t = 2; t <= o.nproc; ++t)
      if (o.nproc % t == 0 && model_splits(mc, t)) tp.push_back(t);
  }
  for (int t : tp) {
    if (o.nproc % t != 0) UNILLM_THROW(ConfigError, "[tune] --tp ", t, " does not divide --nproc ", o.nproc);
    if (t > 1 && mc.num_experts > 0)
      UNILLM_THROW(ConfigError, "[tune] --tp ", t, ": tensor parallelism over the model's mixture-of-experts layers "
                   "is not implemented");
    if (!model_splits(mc, t))
      UNILLM_THROW(ConfigError, "[tune] --tp ", t, ": the model's ", mc.num_heads, " heads, ", mc.num_kv_heads,
                   " key/value heads and MLP width ", mc.intermediate_size, " do not all split ", t, " ways");
  }
  std::vector<Layout> out;
  for (int t : tp)
    for (int p : pp) {
      if (o.nproc % (t * p) != 0) continue;  // tp × pp must divide the processes too
      for (int64_t m : micro) {
        const int64_t dp = o.nproc / (t * p);
        if (global % (m * dp) != 0) {
          notes.push_back("micro-batch " + std::to_string(m) + " skipped for tp " + std::to_string(t) + " pp " +
                          std::to_string(p) + ": " + std::to_string(m) + " x " + std::to_string(dp) +
                          " data-parallel replicas does not divide the global batch " + std::to_string(global));
          continue;
        }
        // Sequence parallelism needs the plain token loss (the trainer's rule: Stage::model_token_loss).
        std::vector<bool> sps = {false};
        if (t > 1 && plain_token_loss) sps = o.sp.empty() ? std::vector<bool>{false, true} : o.sp;
        for (bool q : sps)
          for (int z : zero) {
            // Stage 3 shards the parameters beside tensor parallelism, and beside pipeline stages
            // among each stage's data-parallel replicas (the trainer's Run::zero3_fallback: with
            // one replica a stage, or beside tensor parallelism, it would run as 2).
            if (z == 3 && p > 1 && (dp == 1 || t > 1)) continue;
            for (bool r : o.recompute) out.push_back({m, global / (m * dp), z, r, p, t, q});
          }
      }
    }
  return out;
}

std::string find_mpirun() {
  const char* path = std::getenv("PATH");
  std::stringstream in(path ? path : "");
  for (std::string d; std::getline(in, d, ':');)
    if (!d.empty() && access((fs::path(d) / "mpirun").c_str(), X_OK) == 0)
      return (fs::path(d) / "mpirun").string();
  UNILLM_THROW(
      ConfigError,
      "[tune] mpirun is not in PATH: install Debian's openmpi-bin (scripts/install-deps.sh), "
      "or tune for --nproc 1");
}

// Runs the plan and, where it fits, the timing of each layout (progress on stderr).
std::vector<Row> measure(const std::vector<Layout>& layouts, const TuneOptions& o,
                         const tune::Launcher& l, const YAML::Node& base, const std::string& tmp) {
  std::vector<Row> rows;
  for (size_t i = 0; i < layouts.size(); ++i) {
    Row r;
    r.layout = layouts[i];
    const std::string yaml = tmp + "/layout-" + std::to_string(i + 1) + ".yaml";
    write_yaml(yaml, layout_node(base, r.layout), "");
    std::fprintf(stderr, "[tune] %zu/%zu %s micro-batch %lld GA %lld recompute %s: ", i + 1,
                 layouts.size(), layout_name(r.layout, o.nproc).c_str(),
                 static_cast<long long>(r.layout.micro), static_cast<long long>(r.layout.ga),
                 r.layout.recompute ? "on" : "off");
    r.plan = tune::plan_layout(l, yaml);
    // The plainest layout comes first: when it cannot even plan, the config itself is wrong here.
    if (i == 0 && !r.plan.ok)
      UNILLM_THROW(ConfigError, "[tune] ", o.config, " (", layout_name(r.layout, o.nproc),
                   ", micro-batch ", r.layout.micro, "): ", r.plan.error);
    // The trainer's own check: the limit is per process (the host's available memory divided
    // among the processes on it, or UNILLM_MEMORY_LIMIT).
    r.fits = r.plan.ok && r.plan.fits;
    if (!r.plan.ok) {
      r.note = "no plan: " + r.plan.error;
    } else if (!r.fits) {
      r.note = "does not fit: peak " + train::format_bytes(r.plan.peak) + " > " +
               train::format_bytes(r.plan.limit) + " per process";
    } else {
      r.timing = tune::time_layout(l, yaml, o.steps, tmp + "/run-" + std::to_string(i + 1));
      if (!r.timing.ok) r.note = "failed: " + r.timing.error;
    }
    if (r.timing.ok)
      std::fprintf(stderr, "%.1f ms/step, %.0f tok/s\n", r.timing.step_s * 1e3,
                   r.timing.tokens_per_s);
    else
      std::fprintf(stderr, "%s\n", r.note.c_str());
    rows.push_back(r);
  }
  return rows;
}

// Rounds 2..R over the timed layouts, in turn, so that load on the host that comes and goes
// meets every layout; each keeps its fastest round's median.
void retime(std::vector<Row>& rows, const TuneOptions& o, const tune::Launcher& l,
            const std::string& tmp) {
  for (int round = 2; round <= o.rounds; ++round)
    for (size_t i = 0; i < rows.size(); ++i) {
      if (!rows[i].timing.ok) continue;
      const std::string yaml = tmp + "/layout-" + std::to_string(i + 1) + ".yaml";
      const tune::Timing t =
          tune::time_layout(l, yaml, o.steps, tmp + "/run-" + std::to_string(i + 1));
      if (t.ok)
        std::fprintf(stderr, "[tune] round %d, %zu/%zu: %.1f ms/step\n", round, i + 1, rows.size(),
                     t.step_s * 1e3);
      else
        std::fprintf(stderr, "[tune] round %d, %zu/%zu: %s\n", round, i + 1, rows.size(),
                     t.error.c_str());
      if (t.ok && t.step_s < rows[i].timing.step_s) rows[i].timing = t;
    }
}

std::string compact_bytes(int64_t b) {
  std::string s = train::format_bytes(b);
  s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
  return s;
}

// The table on stdout; returns the index of the fastest timed row (-1: none).
int print_table(const std::vector<Row>& rows, const TuneOptions& o) {
  int best = -1;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].timing.ok && (best < 0 || rows[i].timing.step_s < rows[best].timing.step_s))
      best = static_cast<int>(i);
  std::printf("%3s  %-13s %5s %4s  %-9s %10s %9s %9s %7s  %s\n", "#", "layout", "micro", "GA",
              "recompute", "peak/proc", "step_ms", "tok/s", "vs_best", "note");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    char step[32] = "-", tok[32] = "-", rel[32] = "-";
    if (r.timing.ok) {
      std::snprintf(step, sizeof step, "%.1f", r.timing.step_s * 1e3);
      std::snprintf(tok, sizeof tok, "%.0f", r.timing.tokens_per_s);
      std::snprintf(rel, sizeof rel, "%.2f", r.timing.step_s / rows[best].timing.step_s);
    }
    std::printf("%3zu  %-13s %5lld %4lld  %-9s %10s %9s %9s %7s  %s\n", i + 1,
                layout_name(r.layout, o.nproc).c_str(), static_cast<long long>(r.layout.micro),
                static_cast<long long>(r.layout.ga), r.layout.recompute ? "on" : "off",
                r.plan.ok ? compact_bytes(r.plan.peak).c_str() : "-", step, tok, rel,
                static_cast<int>(i) == best ? "best" : r.note.c_str());
  }
  return best;
}

tune::Launcher make_launcher(const TuneOptions& o) {
  tune::Launcher l;
  l.self = fs::read_symlink("/proc/self/exe").string();
  l.nproc = o.nproc;
  l.timeout_s = o.timeout_s;
  l.train_flags = o.train_flags;
  if (o.nproc > 1) {
    l.mpirun = find_mpirun();
    if (geteuid() ==
        0) {  // mpirun refuses root without its consent pair (as `unillm launch` sets it)
      setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
      setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    }
  }
  return l;
}

// measure() in a temporary directory (the layouts' YAMLs and output dirs), removed after.
std::vector<Row> measure_in_temp(const std::vector<Layout>& layouts, const TuneOptions& o,
                                 const YAML::Node& base) {
  const tune::Launcher l = make_launcher(o);
  std::string tmp = (fs::temp_directory_path() / "unillm-tune-XXXXXX").string();
  if (!mkdtemp(tmp.data()))
    UNILLM_THROW(IoError, "[tune] cannot make a temporary directory under /tmp");
  try {
    std::vector<Row> rows = measure(layouts, o, l, base, tmp);
    retime(rows, o, l, tmp);
    fs::remove_all(tmp);
    return rows;
  } catch (...) {
    fs::remove_all(tmp);
    throw;
  }
}

void print_header(const TuneOptions& o, int64_t global, const std::vector<Row>& rows,
                  const std::vector<std::string>& notes) {
  std::printf(
      "unillm tune: %s on %d process%s, global batch %lld, median of %d timed steps after 1 "
      "warm-up step%s\n",
      o.config.c_str(), o.nproc, o.nproc == 1 ? "" : "es", static_cast<long long>(global), o.steps,
      o.rounds > 1 ? (", fastest of " + std::to_string(o.rounds) + " rounds").c_str() : "");
  std::printf(
      "layouts: tensor parallel x pipeline stages x data parallel x ZeRO stage x micro-batch x "
      "recompute\n");
  if (!rows.empty() && rows[0].plan.ok) {
    const auto& p = rows[0].plan;
    std::printf("memory limit per process: %s (%s)\n",
                p.limit > 0 ? train::format_bytes(p.limit).c_str() : "none",
                p.limit_source.c_str());
  }
  for (const auto& n : notes) std::printf("note: %s\n", n.c_str());
}

// The config with the best layout's keys, to --out (or CONFIG-STEM.tuned.yaml here).
void write_best(const TuneOptions& o, const YAML::Node& base, const std::vector<Row>& rows,
                int best) {
  const Layout& b = rows[best].layout;
  const std::string out =
      o.out.empty() ? fs::path(o.config).stem().string() + ".tuned.yaml" : o.out;
  std::ostringstream header;
  header << "# unillm tune --nproc " << o.nproc << ": " << layout_name(b, o.nproc)
         << ", micro-batch " << b.micro << ", GA " << b.ga << ", recompute "
         << (b.recompute ? "on" : "off") << " (the fastest of " << rows.size()
         << " layouts)\n# from " << o.config << "; run it as `unillm launch --nproc " << o.nproc
         << " -- train " << out << "`\n";
  write_yaml(out, layout_node(base, b), header.str());
  std::printf(
      "best: #%d %s micro-batch %lld GA %lld recompute %s -> wrote %s (run it with %d process%s)\n",
      best + 1, layout_name(b, o.nproc).c_str(), static_cast<long long>(b.micro),
      static_cast<long long>(b.ga), b.recompute ? "on" : "off", out.c_str(), o.nproc,
      o.nproc == 1 ? "" : "es");
}

}  // namespace

int cmd_tune(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const TuneOptions o = parse_options(args);
  if (!fs::is_regular_file(o.config))
    UNILLM_THROW(ConfigError, "[tune] ", o.config, ": no such config file");
  if (std::getenv("OMPI_COMM_WORLD_SIZE"))
    UNILLM_THROW(
        ConfigError,
        "[tune] already running under mpirun: run `unillm tune` alone; it starts mpirun itself");
  // The config must train as it is (clear errors name its file and key), and fixes the global
  // batch.
  const train::TrainArgs a = train::load_train_args(o.config, o.overrides);
  const int64_t global = a.per_device_train_batch_size * a.gradient_accumulation_steps;
  const YAML::Node base = load_config(o);
  std::vector<std::string> notes;
  for (const char* k : {"deepspeed", "fsdp", "sharding"})
    if (base[k])
      notes.push_back(std::string("the config's `") + k +
                      "` is replaced by each layout's `sharding`");
  const std::vector<Layout> layouts = enumerate(o, a, notes);
  if (layouts.empty())
    UNILLM_THROW(ConfigError, "[tune] ", o.config, ": no micro-batch keeps the global batch ",
                 global, " over ", o.nproc,
                 " processes (it must be a multiple of micro-batch x processes)");
  const std::vector<Row> rows = measure_in_temp(layouts, o, base);
  print_header(o, global, rows, notes);
  const int best = print_table(rows, o);
  if (best < 0)
    UNILLM_THROW(ConfigError, "[tune] ", o.config,
                 ": no layout could be timed (the table says why)");
  write_best(o, base, rows, best);
  return 0;
}

}  // namespace unillm::cli
