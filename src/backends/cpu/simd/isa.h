// The CPU's instruction-set levels: what the CPU and its OS support (CPUID + XGETBV), and the one
// level the CPU backend runs at, chosen when its kernels are registered (docs/ARCHITECTURE.md,
// "CPU instruction sets"). Kernels never ask the CPU at call time.
#pragma once

#include <string>

namespace unillm::cpu {

// Ordered: each level includes the ones below it.
enum class IsaLevel : int {
  portable = 0,     // baseline x86-64
  avx2 = 1,         // AVX2 + FMA + F16C
  avx512 = 2,       // AVX-512 F, BW, VL, DQ (with the OS saving opmask and ZMM state)
  avx512_bf16 = 3,  // avx512 + AVX512-BF16
  amx_bf16 = 4,     // avx512_bf16 + AMX-TILE and AMX-BF16 (with the OS saving tile state); used
                    // only through oneDNN's bf16 GEMMs (gemm/provider.h): no unillm kernel of its own
};

struct CpuFeatures {
  bool os_avx = false;     // XCR0: XMM and YMM state saved
  bool os_avx512 = false;  // XCR0: opmask, ZMM_Hi256 and Hi16_ZMM state saved
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false, avx512_vnni = false, avx_vnni = false;
  bool os_amx = false;  // XCR0: XTILECFG and XTILEDATA state saved
  bool amx_tile = false, amx_bf16 = false;
};

// Reads CPUID and XGETBV (once; cached).
const CpuFeatures& cpu_features();
// The highest level the CPU and the OS support.
IsaLevel detected_isa();
// "avx2 fma f16c avx512f …": the features found, for `unillm env`.
std::string feature_names(const CpuFeatures& f);

const char* isa_name(IsaLevel level);
// "auto" → the detected level; a level name → that level. False for anything else.
bool parse_isa(const std::string& text, IsaLevel* out);

// The level the kernels were registered for (portable until register_cpu_backend runs).
IsaLevel chosen_isa();
// Sets the chosen level to min(cap, detected): only register.cpp calls this, before it
// (re-)registers the kernels.
IsaLevel choose_isa(IsaLevel cap);
inline bool isa_at_least(IsaLevel l) { return static_cast<int>(chosen_isa()) >= static_cast<int>(l); }

}  // namespace unillm::cpu
