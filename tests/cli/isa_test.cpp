// --isa and UNILLM_ISA: the level unillm env reports, the cap rule, a bad value, the same greedy
// tokens from the stories260K model at every level the machine has, and bf16 training with bf16
// GEMMs (bf16_compute) against f32.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "backends/cpu/simd/isa.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

using testing::run_shell;
using testing::slurp;
using testing::run_unillm;

TEST(Isa, EnvReportsTheChosenLevel) {
  auto portable = run_unillm("env --isa portable");
  ASSERT_EQ(portable.exit_code, 0) << portable.err;
  EXPECT_NE(portable.out.find("isa: portable (detected "), std::string::npos) << portable.out;
  auto from_env = run_shell("UNILLM_ISA=portable " + std::string(UNILLM_BINARY_DIR) + "/unillm env");
  EXPECT_NE(from_env.out.find("isa: portable"), std::string::npos) << from_env.out;
  // The flag wins over the variable.
  auto both = run_shell("UNILLM_ISA=portable " + std::string(UNILLM_BINARY_DIR) + "/unillm env --isa auto");
  const std::string detected = cpu::isa_name(cpu::detected_isa());
  EXPECT_NE(both.out.find("isa: " + detected + " (detected " + detected), std::string::npos) << both.out;
}

// Each CPU kernel names the level of the code behind it.
TEST(Isa, KernelTableNamesEachKernelsLevel) {
  auto portable = run_unillm("env --kernels --isa portable");
  ASSERT_EQ(portable.exit_code, 0) << portable.err;
  EXPECT_NE(portable.out.find("rms_norm: cpu/bf16:portable cpu/f16:portable cpu/f32:portable "
                              "cpu/f64:portable"),
            std::string::npos)
      << portable.out;
  EXPECT_EQ(portable.out.find(":avx2"), std::string::npos) << portable.out;
  if (cpu::detected_isa() == cpu::IsaLevel::portable) return;
  auto avx2 = run_unillm("env --kernels --isa avx2");
  EXPECT_NE(avx2.out.find("rms_norm: cpu/bf16:avx2 cpu/f16:avx2 cpu/f32:avx2 cpu/f64:portable"),
            std::string::npos)
      << avx2.out;
}

TEST(Isa, BadValuesAreErrorsAndTooHighIsCapped) {
  auto bad = run_unillm("env --isa avx1024");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--isa must be auto, amx_bf16, avx512_bf16, avx512, avx2 or portable, got 'avx1024'"),
            std::string::npos) << bad.err;
  auto bad_env = run_shell("UNILLM_ISA=fast " + std::string(UNILLM_BINARY_DIR) + "/unillm env");
  EXPECT_EQ(bad_env.exit_code, 1);
  EXPECT_NE(bad_env.err.find("UNILLM_ISA must be"), std::string::npos) << bad_env.err;
  if (cpu::detected_isa() != cpu::IsaLevel::amx_bf16) {
    auto high = run_unillm("env --isa amx_bf16");
    EXPECT_EQ(high.exit_code, 0);
    EXPECT_NE(high.err.find("this CPU has only"), std::string::npos) << high.err;
  }
}

TEST(Isa, SameGreedyTokensAtEveryLevel) {
  const std::string gen = "generate --model " + testing::source_path("assets/stories260K") +
                          " --prompt-ids 1,400,60 --max-new-tokens 16 --temperature 0 --output-ids --quiet";
  auto want = run_unillm(gen + " --isa portable");
  ASSERT_EQ(want.exit_code, 0) << want.err;
  for (int l = 1; l <= static_cast<int>(cpu::detected_isa()); ++l) {
    const std::string name = cpu::isa_name(static_cast<cpu::IsaLevel>(l));
    auto got = run_unillm(gen + " --isa " + name);
    ASSERT_EQ(got.exit_code, 0) << got.err;
    EXPECT_EQ(got.out, want.out) << name;
  }
}

// bf16: true on stories260K, 20 steps of full fine-tuning: the loss curve stays within 2 % of the
// f32 run's; a second run gives the same bytes (fixed level and threads); and bf16_compute: false
// gives other weights exactly when this CPU has bf16 GEMMs (`unillm env`'s gemm line says so).
TEST(Isa, Bf16TrainingNearF32AndRepeatable) {
  const std::string dir = testing::temp_dir("isa-bf16");
  const std::string cfg = dir + "/cfg.yaml";
  std::ofstream(cfg) << "model_name_or_path: " << testing::source_path("assets/stories260K")
                     << "\nstage: pt\ndo_train: true\nfinetuning_type: full\ndataset: tinyshakespeare\n"
                     << "dataset_dir: " << testing::source_path("data") << "\ncutoff_len: 64\n"
                     << "max_samples: 200\nper_device_train_batch_size: 4\nmax_steps: 20\n"
                     << "logging_steps: 1\nsave_strategy: 'no'\nlearning_rate: 1.0e-3\nseed: 7\n";
  auto train = [&](const std::string& name, const std::string& extra) {
    auto r = run_unillm("train " + cfg + " output_dir=" + dir + "/" + name + " " + extra + " --quiet --threads 2");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return testing::log_lines(dir + "/" + name);
  };
  const auto f32 = train("f32", "");
  const auto bf16 = train("bf16", "bf16=true");
  const auto again = train("again", "bf16=true");
  train("f32gemm", "bf16=true bf16_compute=false");
  ASSERT_EQ(f32.size(), 20u);
  ASSERT_EQ(bf16.size(), 20u);
  for (size_t i = 0; i < f32.size(); ++i) {
    const double a = f32[i]["loss"].get<double>(), b = bf16[i]["loss"].get<double>();
    EXPECT_LE(std::abs(a - b), 0.02 * a) << "step " << i + 1;
  }
  const std::string weights = "/model.safetensors";
  EXPECT_EQ(slurp(dir + "/bf16" + weights), slurp(dir + "/again" + weights));
  auto env = run_unillm("env");
  const bool bf16_gemm = env.out.find("bf16 matmul") != std::string::npos;
  EXPECT_EQ(slurp(dir + "/bf16" + weights) != slurp(dir + "/f32gemm" + weights), bf16_gemm) << env.out;
}

// A model stored in bf16 computes its GEMMs in bf16 where the CPU can (--bf16-compute on, the
// default): eval ppl then differs from --bf16-compute off exactly when `unillm env` reports the bf16
// matmul, and stays within 1 % of it.
TEST(Isa, Bf16ModelComputesInBf16UnlessTurnedOff) {
  namespace fs = std::filesystem;
  testing::init_cpu();  // the bf16 copy is made here
  const std::string src = testing::source_path("assets/stories260K");
  const std::string dir = testing::temp_dir("isa-bf16-model");
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().filename() != "model.safetensors") fs::copy(e.path(), fs::path(dir) / e.path().filename());
  auto f32 = io::SafetensorsFile::open(src + "/model.safetensors");
  io::NamedTensors bf16;
  for (const auto& info : f32->tensors()) bf16.emplace_back(info.name, f32->tensor(info.name).to(DType::bf16));
  io::save_safetensors(dir + "/model.safetensors", bf16);
  const std::string ppl = "eval ppl --model " + dir + " --file " + src + "/llama2c_sample.txt";
  auto on = run_unillm(ppl), off = run_unillm(ppl + " --bf16-compute off");
  ASSERT_EQ(on.exit_code, 0) << on.err;
  ASSERT_EQ(off.exit_code, 0) << off.err;
  const size_t a = on.out.find("ppl="), b = off.out.find("ppl=");
  ASSERT_NE(a, std::string::npos) << on.out;
  ASSERT_NE(b, std::string::npos) << off.out;
  const double p_on = std::stod(on.out.substr(a + 4)), p_off = std::stod(off.out.substr(b + 4));
  EXPECT_LE(std::abs(p_on - p_off), 0.01 * p_off);
  const bool bf16_gemm = run_unillm("env").out.find("bf16 matmul") != std::string::npos;
  EXPECT_EQ(p_on != p_off, bf16_gemm) << on.out << off.out;
  auto bad = run_unillm(ppl + " --bf16-compute maybe");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--bf16-compute must be on or off, got 'maybe'"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace unillm
