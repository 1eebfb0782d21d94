// --isa and UNILLM_ISA: the level unillm env reports, the cap rule, a bad value, and the same
// greedy tokens from the stories260K model at every level the machine has.
#include <gtest/gtest.h>

#include <string>

#include "backends/cpu/simd/isa.h"
#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm {
namespace {

using testing::run_shell;
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
  EXPECT_NE(bad.err.find("--isa must be auto, avx512_bf16, avx512, avx2 or portable, got 'avx1024'"),
            std::string::npos) << bad.err;
  auto bad_env = run_shell("UNILLM_ISA=fast " + std::string(UNILLM_BINARY_DIR) + "/unillm env");
  EXPECT_EQ(bad_env.exit_code, 1);
  EXPECT_NE(bad_env.err.find("UNILLM_ISA must be"), std::string::npos) << bad_env.err;
  if (cpu::detected_isa() != cpu::IsaLevel::avx512_bf16) {
    auto high = run_unillm("env --isa avx512_bf16");
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

}  // namespace
}  // namespace unillm
