// `unillm launch` (docs/training.md, "Launching"): it runs the same job as a hand-written mpirun
// line (the same losses, bit for bit), refuses bad invocations with one clear line, and with
// --dist-timeout a rank that hangs ends the whole job within the timeout naming the waiting rank,
// while a rank killed mid-run ends it at once (Open MPI names the dead rank). Every process is
// bounded by `timeout -k`, so a hang fails the test instead of the suite.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

using testing::run_shell;

const std::string kSft = "examples/train_lora/stories260K_lora_sft.yaml";
const std::string kShort =
    " max_steps=4 logging_steps=1 save_steps=100 eval_steps=100 max_samples=32"
    " per_device_train_batch_size=4 --quiet";
const std::string kBin = std::string(UNILLM_BINARY_DIR) + "/unillm";

struct Timed {
  testing::CliResult r;
  double seconds = 0;
};

// A shell line from the source dir (the example's relative paths), bounded, and timed.
Timed run_timed(const std::string& line, int limit_s = 240) {
  const auto t0 = std::chrono::steady_clock::now();
  Timed t;
  t.r = run_shell("cd " + testing::source_path("") + " && timeout -k 5 " + std::to_string(limit_s) +
                  " env " + line);
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

// (loss, grad_norm) of each logged step.
std::vector<std::pair<double, double>> figures(const std::string& dir) {
  std::vector<std::pair<double, double>> out;
  for (const auto& j : testing::log_lines(dir))
    if (j.contains("loss")) out.emplace_back(j["loss"].get<double>(), j["grad_norm"].get<double>());
  return out;
}

TEST(Launch, RunsTheSameJobAsMpirun) {
  const std::string dir = testing::temp_dir("launch_same");
  auto launched = run_timed(kBin + " launch --nproc 2 -- train " + kSft + " output_dir=" + dir +
                            "/launch" + kShort);
  ASSERT_EQ(launched.r.exit_code, 0) << launched.r.err;
  // The line it ran: this binary, two ranks, shared memory only, the timeout exported.
  const std::string& err = launched.r.err;
  EXPECT_NE(err.find("unillm: launch: "), std::string::npos) << err;
  EXPECT_NE(
      err.find(
          " -np 2 --bind-to none --oversubscribe --mca btl self,vader --mca oob_tcp_if_include lo"),
      std::string::npos)
      << err;
  EXPECT_NE(
      err.find("-x UNILLM_DIST_TIMEOUT " + std::filesystem::canonical(kBin).string() + " train "),
      std::string::npos)
      << err;
  EXPECT_NE(err.find("data parallel: 2 processes"), std::string::npos) << err;
  auto direct = run_timed(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader mpirun "
      "--oversubscribe --bind-to none -np 2 " +
      kBin + " train " + kSft + " output_dir=" + dir + "/mpirun" + kShort);
  ASSERT_EQ(direct.r.exit_code, 0) << direct.r.err;
  const auto a = figures(dir + "/launch"), b = figures(dir + "/mpirun");
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a, b);
}

TEST(Launch, BadInvocationsAreOneClearLine) {
  const std::string dir = testing::temp_dir("launch_bad");
  struct Case {
    std::string line, expect;
  };
  const std::vector<Case> cases = {
      {"launch --nproc 2 train cfg.yaml", "missing `--` before the unillm command"},
      {"launch --nproc 0 -- train cfg.yaml", "--nproc '0' is not a number of processes >= 1"},
      {"launch -- train cfg.yaml", "--nproc N is required"},
      {"launch --nproc 2 --", "nothing after `--`"},
      {"launch --nprocs 2 -- train cfg.yaml", "did you mean '--nproc'"},
      {"launch --nproc 2 --hostfile " + dir + "/nope -- train cfg.yaml",
       "--hostfile " + dir + "/nope: no such file"},
      {"launch --nproc 3 --hosts a:1,b:1 -- train cfg.yaml", "has 2 slots for --nproc 3"},
      {"launch --nproc 2 --hosts a:x -- train cfg.yaml", "'a:x' is not HOST or HOST:SLOTS"},
      {"launch --nproc 2 --dist-timeout soon -- train cfg.yaml",
       "--dist-timeout 'soon' is not a number of seconds"},
      {"train cfg.yaml --dist-timeout -1", "--dist-timeout '-1' is not a number of seconds"},
  };
  for (const auto& c : cases) {
    auto r = run_timed(kBin + " " + c.line, 30).r;
    EXPECT_EQ(r.exit_code, 1) << c.line << "\n" << r.err;
    EXPECT_NE(r.err.find("unillm: error: "), std::string::npos) << c.line << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.line << "\n" << r.err;
  }
  // No mpirun on PATH: Debian's package and the install script are named.
  auto r = run_timed("env PATH=/nonexistent " + kBin + " launch --nproc 2 -- train cfg.yaml", 30).r;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("mpirun not found in PATH"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("openmpi-bin"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("scripts/install-deps.sh"), std::string::npos) << r.err;
  // Nested: launch inside an mpirun rank is refused.
  r = run_timed("OMPI_COMM_WORLD_SIZE=2 " + kBin + " launch --nproc 2 -- train cfg.yaml", 30).r;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("already running under mpirun"), std::string::npos) << r.err;
  // The help says what root needs.
  r = run_timed(kBin + " launch --help", 30).r;
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("OMPI_ALLOW_RUN_AS_ROOT=1"), std::string::npos) << r.out;
}

// accelerate's launch configs (LLaMA-Factory's examples/accelerate/*.yaml, unchanged): their
// num_processes is --nproc and their FSDP / DeepSpeed plugin becomes the training key it stands
// for. `--mpirun-arg --version` shows the line without running it; one config runs for real and
// gives the run of the key it maps to.
TEST(Launch, AccelerateConfigFilesGiveTheirProcessesAndPlugin) {
  const std::string dir = testing::temp_dir("launch_accelerate");
  const std::string ex = "tests/data/llamafactory_examples/accelerate/";
  auto line_of = [&](const std::string& config) {
    auto r = run_timed(kBin + " launch --config_file " + config + " --mpirun-arg --version -- train cfg.yaml", 30).r;
    EXPECT_EQ(r.exit_code, 0) << config << "\n" << r.err;
    return r.err;
  };
  for (const auto& [config, want] : std::vector<std::pair<std::string, std::string>>{
           {ex + "fsdp_config.yaml", " train cfg.yaml fsdp=full_shard"},
           {ex + "fsdp_config_offload.yaml", " train cfg.yaml 'fsdp=full_shard offload'"},
           {ex + "fsdp2_config.yaml", " train cfg.yaml fsdp=full_shard"},  // reshard_after_forward
           {ex + "fsdp2_config_qwen35.yaml", " train cfg.yaml fsdp=full_shard"}}) {
    const std::string err = line_of(config);
    EXPECT_NE(err.find(config == ex + "fsdp2_config_qwen35.yaml" ? " -np 8 " : " -np 2 "), std::string::npos) << err;
    EXPECT_NE(err.find(want), std::string::npos) << config << "\n" << err;
    EXPECT_NE(err.find("mixed_precision bf16 where the training config sets neither bf16 nor fp16"), std::string::npos)
        << err;
  }
  // DeepSpeed's plugin: its stage and offload, or its JSON file as is.
  std::ofstream(dir + "/ds.yaml") << "distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n"
                                     "  zero_stage: 3\n  offload_optimizer_device: cpu\n  offload_param_device: none\n"
                                     "  zero3_init_flag: true\n";
  EXPECT_NE(line_of(dir + "/ds.yaml").find(R"('deepspeed={"zero_optimization":{"offload_optimizer":{"device":"cpu"},"stage":3}}')"),
            std::string::npos);
  std::ofstream(dir + "/ds_file.yaml") << "distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n"
                                          "  deepspeed_config_file: tests/data/llamafactory_examples/deepspeed/ds_z2_config.json\n";
  EXPECT_NE(line_of(dir + "/ds_file.yaml").find(" deepspeed=tests/data/llamafactory_examples/deepspeed/ds_z2_config.json"), std::string::npos);
  // For real: fsdp_config.yaml's FULL_SHARD over its 2 processes, with its mixed_precision bf16
  // (the example sets neither bf16 nor fp16), is fsdp=full_shard bf16=true's run; bf16=false
  // leaves accelerate's in place too (HF's TrainingArguments override it only with bf16 or fp16 true).
  const std::string train = " -- train " + kSft + " finetuning_type=full" + kShort + " output_dir=" + dir;
  auto acc = run_timed(kBin + " launch --config_file " + ex + "fsdp_config.yaml" + train + "/acc");
  ASSERT_EQ(acc.r.exit_code, 0) << acc.r.err;
  EXPECT_NE(acc.r.err.find("(fsdp: 'full_shard'): parameters, gradients and optimizer state sharded over 2 processes"),
            std::string::npos)
      << acc.r.err;
  EXPECT_NE(acc.r.err.find("bf16 mixed precision from the accelerate config's mixed_precision"), std::string::npos)
      << acc.r.err;
  EXPECT_NE(acc.r.err.find("bf16 mixed precision, bf16 GEMMs"), std::string::npos) << acc.r.err;
  auto own = run_timed(kBin + " launch --config_file " + ex + "fsdp_config.yaml" + train + "/own fp16=false bf16=false max_steps=1");
  ASSERT_EQ(own.r.exit_code, 0) << own.r.err;
  EXPECT_NE(own.r.err.find("bf16 mixed precision from the accelerate config"), std::string::npos) << own.r.err;
  auto key = run_timed(kBin + " launch --nproc 2" + train + "/key fsdp=full_shard bf16=true");
  ASSERT_EQ(key.r.exit_code, 0) << key.r.err;
  ASSERT_EQ(figures(dir + "/key").size(), 4u);
  EXPECT_EQ(figures(dir + "/acc"), figures(dir + "/key"));
  // Refused with the file (and line) named.
  std::ofstream(dir + "/typo.yaml") << "distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_sharding_stratgy: 1\n";
  std::ofstream(dir + "/megatron.yaml") << "distributed_type: MEGATRON_LM\nnum_processes: 2\n";
  for (const auto& [line, expect] : std::vector<std::pair<std::string, std::string>>{
           {"--config_file " + ex + "fsdp_config_multiple_nodes.yaml -- train cfg.yaml",
            "num_machines 2: accelerate starts one launcher per machine"},
           {"--config_file " + ex + "fsdp_config.yaml --nproc 4 -- train cfg.yaml",
            "--nproc 4 but " + ex + "fsdp_config.yaml has num_processes 2"},
           {"--config_file " + dir + "/typo.yaml -- train cfg.yaml",
            dir + "/typo.yaml line 4: unknown accelerate key 'fsdp_config.fsdp_sharding_stratgy'"},
           {"--config_file " + dir + "/megatron.yaml -- train cfg.yaml", "distributed_type MEGATRON_LM is not run"},
           {"--config_file " + ex + "fsdp_config.yaml -- export cfg.yaml", "not `export`"},
           {"--config_file " + dir + "/none.yaml -- train cfg.yaml", dir + "/none.yaml: cannot read it"}}) {
    auto r = run_timed(kBin + " launch " + line, 30).r;
    EXPECT_EQ(r.exit_code, 1) << line << "\n" << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << line << "\n" << r.err;
  }
}

TEST(Launch, AHungRankEndsTheJobWithinTheTimeoutNamingTheWaitingRank) {
  const std::string dir = testing::temp_dir("launch_hang");
  // Rank 1 sleeps before its first collective; rank 0 waits in it for 3 s, then reports and exits.
  auto t =
      run_timed("UNILLM_TEST_HANG_RANK=1 " + kBin + " launch --nproc 2 --dist-timeout 3 -- train " +
                    kSft + " output_dir=" + dir + "/out" + kShort,
                120);
  EXPECT_NE(t.r.exit_code, 0) << t.r.err;
  EXPECT_NE(t.r.exit_code, 124) << "the job hung until `timeout` ended it\n" << t.r.err;
  EXPECT_NE(t.r.err.find("unillm: error: rank 0: "), std::string::npos) << t.r.err;
  EXPECT_NE(t.r.err.find(" did not complete within 3 s; another process has died or hung"),
            std::string::npos)
      << t.r.err;
  // Start-up (reading the model and data) takes a few seconds before the first collective.
  EXPECT_LT(t.seconds, 45) << t.r.err;
  EXPECT_GE(t.seconds, 3);
}

TEST(Launch, AKilledRankEndsTheJobAtOnceNamingTheDeadRank) {
  const std::string dir = testing::temp_dir("launch_kill");
  // Rank 1 kills itself (SIGKILL) at its 6th blocking collective: inside step 2. The timeout is
  // long: Open MPI itself sees the death and ends the job.
  auto t = run_timed("UNILLM_TEST_KILL_RANK=1:6 " + kBin +
                         " launch --nproc 2 --dist-timeout 600 -- train " + kSft +
                         " output_dir=" + dir + "/out" + kShort,
                     120);
  EXPECT_NE(t.r.exit_code, 0) << t.r.err;
  EXPECT_NE(t.r.exit_code, 124) << "the job hung until `timeout` ended it\n" << t.r.err;
  EXPECT_NE(t.r.err.find("rank 1"), std::string::npos) << t.r.err;
  EXPECT_NE(t.r.err.find("signal 9"), std::string::npos) << t.r.err;
  EXPECT_LT(t.seconds, 60) << t.r.err;
}

}  // namespace
}  // namespace unillm
