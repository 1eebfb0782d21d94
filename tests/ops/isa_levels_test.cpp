// The CPU's instruction-set levels: detection against the kernel's own view (/proc/cpuinfo's
// flags, an independent reader of CPUID), the cap rule, and kernels re-registered per level
// giving the same results within rounding (every op test also runs under UNILLM_ISA=portable in
// scripts/test.sh).
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "backends/cpu/register.h"
#include "backends/cpu/simd/isa.h"
#include "core/registry.h"
#include "core/rng.h"
#include "ops/rms_norm.h"
#include "ops/softmax.h"
#include "ops/swiglu.h"
#include "support/expect.h"

namespace unillm {
namespace {

using cpu::IsaLevel;

std::set<std::string> proc_cpuinfo_flags() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::set<std::string> flags;
      for (std::string w; words >> w;) flags.insert(w);
      return flags;
    }
  return {};
}

TEST(IsaLevels, DetectionAgreesWithProcCpuinfo) {
  const auto flags = proc_cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags line";
  const cpu::CpuFeatures& f = cpu::cpu_features();
  // The kernel lists a feature only when the OS supports its state, as our XGETBV check does.
  EXPECT_EQ(f.avx2, flags.count("avx2") == 1);
  EXPECT_EQ(f.fma, flags.count("fma") == 1);
  EXPECT_EQ(f.f16c, flags.count("f16c") == 1);
  EXPECT_EQ(f.avx512f, flags.count("avx512f") == 1);
  EXPECT_EQ(f.avx512bw, flags.count("avx512bw") == 1);
  EXPECT_EQ(f.avx512vl, flags.count("avx512vl") == 1);
  EXPECT_EQ(f.avx512dq, flags.count("avx512dq") == 1);
  EXPECT_EQ(f.avx512_bf16, flags.count("avx512_bf16") == 1);
  EXPECT_EQ(f.avx512_vnni, flags.count("avx512_vnni") == 1);
  EXPECT_EQ(f.avx_vnni, flags.count("avx_vnni") == 1);
  EXPECT_EQ(f.amx_tile, flags.count("amx_tile") == 1);
  EXPECT_EQ(f.amx_bf16, flags.count("amx_bf16") == 1);
  const bool avx512 = flags.count("avx512f") && flags.count("avx512bw") && flags.count("avx512vl") &&
                      flags.count("avx512dq");
  const IsaLevel want = !(flags.count("avx2") && flags.count("fma") && flags.count("f16c"))
                            ? IsaLevel::portable
                            : !avx512 ? IsaLevel::avx2
                                      : !flags.count("avx512_bf16") ? IsaLevel::avx512
                                      : flags.count("amx_tile") && flags.count("amx_bf16") ? IsaLevel::amx_bf16
                                                                                           : IsaLevel::avx512_bf16;
  EXPECT_EQ(cpu::detected_isa(), want) << cpu::feature_names(f);
}

TEST(IsaLevels, NamesParseAndCapsNeverExceedTheCpu) {
  for (IsaLevel l : {IsaLevel::portable, IsaLevel::avx2, IsaLevel::avx512, IsaLevel::avx512_bf16,
                     IsaLevel::amx_bf16}) {
    IsaLevel back;
    ASSERT_TRUE(cpu::parse_isa(cpu::isa_name(l), &back));
    EXPECT_EQ(back, l);
  }
  IsaLevel a;
  ASSERT_TRUE(cpu::parse_isa("auto", &a));
  EXPECT_EQ(a, cpu::detected_isa());
  EXPECT_FALSE(cpu::parse_isa("avx1024", &a));
  EXPECT_FALSE(cpu::parse_isa("AVX2", &a));
  testing::init_cpu();
  const IsaLevel before = cpu::chosen_isa();
  EXPECT_EQ(cpu::reregister_cpu_kernels(IsaLevel::amx_bf16), cpu::detected_isa());
  EXPECT_EQ(cpu::reregister_cpu_kernels(IsaLevel::portable), IsaLevel::portable);
  EXPECT_FALSE(cpu::isa_at_least(IsaLevel::avx2));
  cpu::reregister_cpu_kernels(before);
}

Tensor random(const Shape& s, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (auto& x : v) x = static_cast<float>(rng.uniform_double() * 2 - 1);
  return Tensor::from_vector(v, s);
}

// The same ops under every level the machine has: the registered kernel changes, the results
// agree within f32 rounding.
TEST(IsaLevels, KernelsOfEveryLevelAgree) {
  testing::init_cpu();
  const IsaLevel before = cpu::chosen_isa();
  const Tensor x = random({7, 67}, 1), w = random({67}, 2), gu = random({5, 2 * 33}, 3);
  std::vector<std::vector<Tensor>> results;
  std::vector<void (*)()> kernels;
  for (int l = 0; l <= static_cast<int>(cpu::detected_isa()); ++l) {
    cpu::reregister_cpu_kernels(static_cast<IsaLevel>(l));
    kernels.push_back(reinterpret_cast<void (*)()>(
        kernel_registry().find<ops::RmsNormKernel>("rms_norm", DeviceKind::cpu, DType::f32)));
    results.push_back({ops::rms_norm(x, w, 1e-5f), ops::softmax(x), ops::swiglu(gu)});
  }
  cpu::reregister_cpu_kernels(before);
  if (results.size() < 2) GTEST_SKIP() << "this CPU has only the portable level";
  EXPECT_NE(kernels[0], kernels[1]) << "portable and avx2 registered the same rms_norm kernel";
  for (size_t l = 1; l < results.size(); ++l)
    for (size_t op = 0; op < results[0].size(); ++op)
      testing::expect_close(results[l][op], results[0][op], 1e-6, 1e-5);
}

}  // namespace
}  // namespace unillm
