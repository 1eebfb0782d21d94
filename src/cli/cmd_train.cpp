// `unillm train CONFIG.yaml [key=value ...]`: LLaMA-Factory-style training from a YAML config.
#include <unistd.h>

#include <csignal>

#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/predict.h"
#include "core/error.h"
#include "core/parallel.h"
#include "backends/plugin/plugin_backend.h"
#include "dist/launch_env.h"
#include "dist/mpi_group.h"
#include "dist/plugin_group.h"
#include "train/key_table.h"
#include "train/memory_plan.h"
#include "train/trainer.h"
#include "train/trainer_log.h"

namespace unillm::cli {

namespace {

// enable_jit_checkpoint: SIGTERM only sets a flag; the trainer reads it after each optimizer step
// (a handler can do nothing else safely).
volatile std::sig_atomic_t g_sigterm = 0;
void on_sigterm(int) { g_sigterm = 1; }
void install_sigterm_flag() {
  struct sigaction sa {};
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
}
bool sigterm_received() { return g_sigterm != 0; }

void print_progress(const train::ProgressInfo& p) {
  static const bool tty = isatty(fileno(stderr));
  std::fprintf(stderr, "%s[train] %lld/%lld %5.1f%% | loss %.4f | lr %.3g | grad_norm %.3f | %.0f tok/s | mem %.0f MB | %s<%s%s",
               tty ? "\r" : "", static_cast<long long>(p.step), static_cast<long long>(p.total_steps),
               100.0 * p.step / std::max<int64_t>(p.total_steps, 1), p.loss, p.lr, p.grad_norm, p.tokens_per_s,
               p.memory_bytes / 1048576.0, train::format_duration(p.elapsed_s).c_str(),
               train::format_duration(p.remaining_s).c_str(), tty && p.step < p.total_steps ? "" : "\n");
  std::fflush(stderr);
}

// The memory the run may use (docs/training.md, "Memory plan"): UNILLM_MEMORY_LIMIT (a size such
// as 6G, or "off"), else what the system has available now.
void set_memory_limit(train::TrainerHooks& hooks) {
  const char* env = std::getenv("UNILLM_MEMORY_LIMIT");
  if (env && *env) {
    const std::string v = env;
    if (v == "off" || v == "0") return;
    hooks.memory_limit = train::parse_memory_size(v, "UNILLM_MEMORY_LIMIT");
    hooks.memory_limit_source = "UNILLM_MEMORY_LIMIT=" + v;
    return;
  }
  hooks.memory_limit = train::available_memory_bytes();
  hooks.memory_limit_source = "MemAvailable / cgroup memory.max; override with UNILLM_MEMORY_LIMIT";
  // Processes sharing a host share its memory: each plans for its part (UNILLM_MEMORY_LIMIT is
  // per process as given).
  const dist::LaunchEnv launch = dist::read_launch_env();
  if (launch.local_size > 1) {
    hooks.memory_limit /= launch.local_size;
    hooks.memory_limit_source = "MemAvailable / cgroup memory.max shared by the " + std::to_string(launch.local_size) +
                                " processes on this host; override with UNILLM_MEMORY_LIMIT (per process)";
  }
}

// --plan-only: the memory plan of this process as one JSON line on stdout (unillm tune reads it).
void print_plan_json(const train::MemoryPlan& p, const train::TrainerHooks& h) {
  const nlohmann::json j = {{"weights", p.weights}, {"frozen_weights", p.frozen_weights},
                            {"gradients", p.gradients}, {"optimizer", p.optimizer},
                            {"activations", p.activations()}, {"activations_recompute", p.activations_recompute},
                            {"activations_no_recompute", p.activations_no_recompute},
                            {"loss_transient", p.loss_transient}, {"backward_transient", p.backward_transient},
                            {"eval_transient", p.eval_transient},
                            {"runtime", p.runtime}, {"allocator_cache", p.allocator_cache},
                            {"baseline", p.baseline}, {"reference", p.reference}, {"load_peak", p.load_peak},
                            {"train_peak", p.train_peak}, {"peak", p.peak}, {"recompute", p.recompute},
                            {"limit", h.memory_limit}, {"limit_source", h.memory_limit_source},
                            {"fits", h.memory_limit <= 0 || p.peak <= h.memory_limit}};
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// The data-parallel group's collectives (docs/devices.md, "Collectives"), said at start: a
// plugin device's own when its plugin has the table, else the world's host MPI (device tensors
// staged through host memory). *keep owns a plugin group for the run.
dist::ProcessGroup* choose_collectives(dist::ProcessGroup& world, Device device, double timeout_s, bool rank0,
                                       std::unique_ptr<dist::ProcessGroup>* keep) {
  std::string said = device.is_cpu() ? "host MPI" : "host MPI, device tensors staged through host memory";
  auto* pb = device.is_cpu() ? nullptr : dynamic_cast<plugin::PluginBackend*>(find_backend(device.kind));
  if (pb && pb->collectives()) {
    try {  // every rank agrees on the outcome (make_plugin_group), so all fall back alike
      *keep = dist::make_plugin_group(world, {pb->name(), pb->device_interface(), pb->collectives()},
                                      {device, timeout_s});
      said = pb->name() + "'s";
    } catch (const DeviceError& e) {
      said += std::string(" (") + e.what() + ")";
    }
  }
  if (rank0) std::fprintf(stderr, "[train] collectives: %s\n", said.c_str());
  return *keep ? keep->get() : &world;
}

}  // namespace

int cmd_train(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf("usage: unillm train CONFIG.yaml [key=value ...] [--threads N] [--device NAME[:N]]\n"
                "                    [--device-fallback warn|error] [--quiet] [--dist-timeout SECONDS] [--plan-only]\n"
                "Trains as LLaMA-Factory's `llamafactory-cli train` does (stage pt|sft, finetuning_type full|freeze|lora).\n"
                "Keys: docs/config-keys.md. Overrides use LLaMA-Factory's key=value form.\n"
                "Several processes: mpirun -np N unillm train ..., or unillm launch --nproc N -- train ...;\n"
                "--dist-timeout (else UNILLM_DIST_TIMEOUT, else 1800 s) bounds every wait on another rank.\n"
                "--plan-only prints this process's memory plan as one JSON line and stops (nothing is written).\n");
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--print-keys") {  // regenerates docs/config-keys.md
    std::fputs(train::key_table_markdown().c_str(), stdout);
    return 0;
  }
  RuntimeOptions runtime;
  bool quiet = false, plan_only = false;
  int64_t kill_after = -1, kill_in_save = -1, term_after = -1;  // crash-test flags (docs/training.md)
  bool kill_in_final_save = false;
  std::vector<std::string> overrides;
  std::string dist_timeout;  // "" = UNILLM_DIST_TIMEOUT or the default (cmd_launch.cpp)
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--dist-timeout") {
      if (i + 1 == args.size()) UNILLM_THROW(ConfigError, "[cli] --dist-timeout needs a value");
      dist_timeout = args[++i];
    } else if (args[i].rfind("--dist-timeout=", 0) == 0) {
      dist_timeout = args[i].substr(15);
    } else if (args[i] == "--threads") {
      if (i + 1 == args.size()) UNILLM_THROW(ConfigError, "[cli] --threads needs a value");
      runtime.threads = parse_threads(args[++i]);
    } else if (args[i].rfind("--threads=", 0) == 0) {
      runtime.threads = parse_threads(args[i].substr(10));
    } else if (take_runtime_flag(args, i, runtime)) {
    } else if (args[i] == "--kill-after-step" && i + 1 < args.size()) {
      kill_after = std::stoll(args[++i]);
    } else if (args[i] == "--term-after-step" && i + 1 < args.size()) {
      term_after = std::stoll(args[++i]);
    } else if (args[i] == "--kill-during-save" && i + 1 < args.size()) {
      kill_in_save = std::stoll(args[++i]);
    } else if (args[i] == "--kill-during-final-save") {
      kill_in_final_save = true;
    } else if (args[i] == "--quiet") {
      quiet = true;
    } else if (args[i] == "--plan-only") {
      plan_only = true;
    } else if (args[i].rfind("--", 0) == 0) {
      overrides.push_back(args[i].substr(2));  // LLaMA-Factory also accepts --key=value
    } else {
      overrides.push_back(args[i]);
    }
  }
  // Several processes (mpirun -np N; torchrun's variables are refused by read_launch_env): data
  // parallelism over Open MPI's world (docs/training.md, "Several processes"). Processes sharing a
  // host share its cores unless --threads says otherwise.
  const dist::LaunchEnv env = dist::read_launch_env();
  dist::ProcessGroup* dp = nullptr;
  const dist::WorldOptions world_options = dist_world_options(dist_timeout, env.under_mpi ? env.rank : -1);
  if (env.size > 1) {
    dp = &dist::init_world(world_options);
    if (runtime.threads < 0) runtime.threads = std::max(1, affinity_cores() / env.local_size);
    if (runtime.device != "cpu" && runtime.device.find(':') == std::string::npos)
      runtime.device += ":" + std::to_string(dist::local_device_index(env, [](const char* n) -> const char* {
                          return std::getenv(n);
                        }));
  }
  const bool rank0 = !dp || dp->rank() == 0;
  const Device device = setup_runtime(runtime);
  train::TrainArgs targs = train::load_train_args(args[0], overrides);
  // accelerate's mixed_precision (unillm launch --config_file): HF's TrainingArguments keep it only
  // when they set neither bf16 nor fp16 themselves.
  if (const char* mp = std::getenv("UNILLM_ACCELERATE_MIXED_PRECISION");
      mp && (std::string(mp) == "bf16" || std::string(mp) == "fp16") && !targs.bf16 && !targs.fp16) {
    overrides.push_back(std::string(mp) + "=true");
    targs = train::load_train_args(args[0], overrides);
    if (rank0)
      std::fprintf(stderr, "[train] %s mixed precision from the accelerate config's mixed_precision (the training config "
                   "sets neither bf16 nor fp16)\n", mp);
  }
  targs.device = device;
  if (rank0)
    for (auto& w : targs.warnings) std::fprintf(stderr, "unillm: warning: %s\n", w.c_str());
  std::unique_ptr<dist::ProcessGroup> plugin_dp;  // the device's own collectives, when it has them
  if (dp) dp = choose_collectives(*dp, device, world_options.timeout_s, rank0, &plugin_dp);
  train::TrainerHooks hooks;
  hooks.dp = dp;
  hooks.hf_cache_root = hf_cache_root();
  if (rank0) hooks.info = [](const std::string& s) { std::fprintf(stderr, "[train] %s\n", s.c_str()); };
  if (!quiet && rank0) hooks.progress = print_progress;
  set_memory_limit(hooks);
  if (kill_after > 0 || term_after > 0)  // SIGTERM: a preemption's, delivered after that step
    hooks.after_step = [kill_after, term_after](int64_t step) {
      if (step == kill_after) raise(SIGKILL);
      if (step == term_after) raise(SIGTERM);
    };
  if (targs.enable_jit_checkpoint) {
    install_sigterm_flag();
    hooks.stop_requested = [] { return sigterm_received(); };
  }
  if (kill_in_save > 0)
    hooks.before_checkpoint_commit = [kill_in_save](int64_t step) {
      if (step == kill_in_save) raise(SIGKILL);
    };
  if (kill_in_final_save) hooks.before_output_commit = [] { raise(SIGKILL); };
  if (plan_only) {
    hooks.plan_only = [&hooks, rank0](const train::MemoryPlan& p) {
      if (rank0) print_plan_json(p, hooks);
    };
    train::run_training(targs, hooks);
    return 0;
  }
  // do_predict with predict_with_generate: generation and BLEU/ROUGE after training, or alone
  // when do_train is off (LLaMA-Factory's nlg_eval example).
  // Under several processes every one generates its share (predict.h).
  const bool generate = targs.do_predict && targs.predict_with_generate;
  if (generate && !targs.do_train) {
    predict_with_generate(targs, false, dp);
    return 0;
  }
  auto r = train::run_training(targs, hooks);
  if (r.interrupted) return 128 + SIGTERM;  // stopped by SIGTERM, its checkpoint saved
  if (rank0 && !targs.do_train)
    std::printf("evaluated (do_train: false):%s%s -> %s\n",
                r.final_eval_loss >= 0 ? (" eval_loss=" + std::to_string(r.final_eval_loss)).c_str() : "",
                r.test_loss >= 0 ? (" test_loss=" + std::to_string(r.test_loss)).c_str() : "", r.output_dir.c_str());
  else if (rank0)
    std::printf(
        "trained %lld steps: train_loss=%.6f%s%s -> %s\n", static_cast<long long>(r.steps),
        r.train_loss,
        r.final_eval_loss >= 0 ? (" eval_loss=" + std::to_string(r.final_eval_loss)).c_str() : "",
        r.test_loss >= 0 ? (" test_loss=" + std::to_string(r.test_loss)).c_str() : "",
        r.output_dir.c_str());
  if (generate) {
    if (dp) dp->barrier();  // rank 0's final save is on disk before anyone loads it
    predict_with_generate(targs, true, dp);
  }
  return 0;
}

}  // namespace unillm::cli
