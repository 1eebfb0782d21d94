// `unillm train` on a full disk: output_dir is a small tmpfs mounted in a private mount namespace
// (unshare -m), so the mount disappears with the test's shell even when the test fails. A failed
// write stops the run with the file named, never leaves half a log line, a half-written final
// output or a failed checkpoint's files behind. Skipped where tmpfs cannot be mounted (not root).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::shell_quote;
using testing::slurp;
using testing::source_path;

constexpr int kNoMount = 97;

struct FullDiskRun {
  testing::CliResult cli;
  std::string result;      // a copy of output_dir as the run left it
  int64_t used_kib = -1;   // of the tmpfs after the run
};

// Trains cfg (whose output_dir is root/out) with root a tmpfs of size_kib, on `processes`
// processes (mpirun, bounded by a timeout) when more than one.
FullDiskRun train_on_tmpfs(const std::string& root, int64_t size_kib, const std::string& cfg, int processes = 1) {
  const std::string result = root + "-result", used = root + "-used";
  fs::create_directories(root);
  const std::string launch =
      processes == 1 ? ""
                     : "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader timeout -k 5 120 "
                       "mpirun --oversubscribe --bind-to none -np " + std::to_string(processes) + " ";
  const std::string script =
      "mount -t tmpfs -o size=" + std::to_string(size_kib) + "k tmpfs " + shell_quote(root) +
      " || exit " + std::to_string(kNoMount) + "; " + launch + std::string(UNILLM_BINARY_DIR) +
      "/unillm train " + shell_quote(cfg) + " --quiet </dev/null; rc=$?; cp -r " +
      shell_quote(root + "/out") + " " + shell_quote(result) + "; df -k --output=used " +
      shell_quote(root) + " | tail -1 > " + shell_quote(used) + "; exit $rc";
  FullDiskRun r;
  r.cli = testing::run_shell("unshare -m sh -c " + shell_quote(script));
  r.result = result;
  std::istringstream(slurp(used)) >> r.used_kib;
  return r;
}

std::string config(const std::string& dir, const std::string& out, const std::string& extra) {
  const std::string path = dir + "/cfg.yaml";
  std::ofstream(path) << "model_name_or_path: " << source_path("assets/stories260K")
                      << "\nstage: pt\ndo_train: true\ndataset: tinyshakespeare\ndataset_dir: " << source_path("data")
                      << "\ncutoff_len: 32\nmax_samples: 400\nper_device_train_batch_size: 2\n"
                      << "logging_steps: 1\nlearning_rate: 1.0e-3\noutput_dir: " << out << "\n"
                      << extra;
  return path;
}

#define SKIP_WITHOUT_MOUNT(run)                                                    \
  if ((run).cli.exit_code == kNoMount) GTEST_SKIP() << "cannot mount a tmpfs here: " << (run).cli.err

TEST(DiskFull, LogWriteFailureStopsTheRunWithCompleteLines) {
  const std::string dir = testing::temp_dir("fulllog");
  auto run = train_on_tmpfs(dir + "/fs", 48,
                            config(dir, dir + "/fs/out", "finetuning_type: lora\nmax_steps: 2000\nsave_steps: 5000\n"));
  SKIP_WITHOUT_MOUNT(run);
  EXPECT_EQ(run.cli.exit_code, 1) << run.cli.err;
  EXPECT_NE(run.cli.err.find("trainer_log.jsonl"), std::string::npos) << run.cli.err;
  EXPECT_NE(run.cli.err.find("No space left"), std::string::npos) << run.cli.err;
  std::ifstream log(run.result + "/trainer_log.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(log, line)) {
    ++lines;
    EXPECT_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded()) << "cut line: " << line;
  }
  EXPECT_GT(lines, 20);
  EXPECT_LT(lines, 2000);
  EXPECT_EQ(slurp(run.result + "/trainer_log.jsonl").back(), '\n');
}

TEST(DiskFull, AFailedFinalSaveLeavesNoPartialOutput) {
  const std::string dir = testing::temp_dir("fullfinal");
  // 6 LoRA steps log ~2 KiB; the final adapter (~200 KiB) and tokenizer do not fit in 128 KiB.
  auto run = train_on_tmpfs(dir + "/fs", 128,
                            config(dir, dir + "/fs/out", "finetuning_type: lora\nmax_steps: 6\nsave_steps: 100\n"));
  SKIP_WITHOUT_MOUNT(run);
  EXPECT_EQ(run.cli.exit_code, 1) << run.cli.err;
  EXPECT_NE(run.cli.err.find("No space left"), std::string::npos) << run.cli.err;
  for (const auto& e : fs::directory_iterator(run.result))
    EXPECT_EQ(e.path().filename(), "trainer_log.jsonl") << "left behind: " << e.path();
  EXPECT_LT(run.used_kib, 32) << "the failed output's files still take space";
}

TEST(DiskFull, AFailedCheckpointIsRemoved) {
  const std::string dir = testing::temp_dir("fullckpt");
  // A full fine-tuning checkpoint (1 MiB weights + 2 MiB optimizer state) does not fit in 2 MiB.
  auto run = train_on_tmpfs(dir + "/fs", 2048,
                            config(dir, dir + "/fs/out", "finetuning_type: full\nmax_steps: 6\nsave_steps: 2\n"));
  SKIP_WITHOUT_MOUNT(run);
  EXPECT_EQ(run.cli.exit_code, 1) << run.cli.err;
  EXPECT_NE(run.cli.err.find("checkpoint-2"), std::string::npos) << run.cli.err;
  for (const auto& e : fs::directory_iterator(run.result))
    EXPECT_EQ(e.path().filename(), "trainer_log.jsonl") << "left behind: " << e.path();
  EXPECT_LT(run.used_kib, 32) << "the failed checkpoint's files still take space";
}

// ZeRO-3 writes the model a unit at a time, the other process serving the writer's gathers: a
// write failing midway (the 1 MiB model in 512 KiB) still ends both processes at once with the
// file named, and leaves nothing behind — a checkpoint's, and the final output's.
TEST(DiskFull, AFailedZeroThreeSaveEndsEveryProcess) {
  for (const std::string& when : {std::string("save_steps: 2\n"), std::string("save_strategy: 'no'\n")}) {
    const std::string dir = testing::temp_dir("fullzero3");
    auto run = train_on_tmpfs(dir + "/fs", 512,
                              config(dir, dir + "/fs/out",
                                     "finetuning_type: full\nmax_steps: 4\n" + when + "deepspeed: " +
                                         source_path("tests/data/llamafactory_examples/deepspeed/ds_z3_config.json") + "\n"),
                              2);
    SKIP_WITHOUT_MOUNT(run);
    EXPECT_NE(run.cli.exit_code, 0) << run.cli.err;
    EXPECT_NE(run.cli.exit_code, 124) << "timed out: " << run.cli.err;
    EXPECT_NE(run.cli.err.find("model.safetensors: write failed (No space left on device)"), std::string::npos)
        << run.cli.err;
    for (const auto& e : fs::directory_iterator(run.result))
      EXPECT_EQ(e.path().filename(), "trainer_log.jsonl") << "left behind: " << e.path();
    EXPECT_LT(run.used_kib, 32) << "the failed save's files still take space";
  }
}

}  // namespace
}  // namespace unillm
