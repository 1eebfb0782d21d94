// CPUID/XGETBV feature detection and the chosen instruction-set level.
#include "backends/cpu/simd/isa.h"

#include <cpuid.h>

#include <algorithm>
#include <cstdint>

namespace unillm::cpu {

namespace {

struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned sub) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) r = Regs{};
  return r;
}

// XCR0, the state components the OS saves on a context switch (readable only when OSXSAVE).
uint64_t xgetbv0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool bit(unsigned reg, int n) { return (reg >> n) & 1u; }

CpuFeatures detect() {
  CpuFeatures f;
  const unsigned max_leaf = __get_cpuid_max(0, nullptr);
  const Regs l1 = cpuid(1, 0);
  const bool osxsave = bit(l1.c, 27), avx = bit(l1.c, 28);
  if (osxsave && avx) {
    const uint64_t xcr0 = xgetbv0();
    f.os_avx = (xcr0 & 0x6) == 0x6;      // XMM | YMM
    f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask | ZMM_Hi256 | Hi16_ZMM
    f.os_amx = f.os_avx512 && (xcr0 & 0x60000) == 0x60000;  // XTILECFG | XTILEDATA
  }
  f.fma = f.os_avx && bit(l1.c, 12);
  f.f16c = f.os_avx && bit(l1.c, 29);
  if (max_leaf >= 7) {
    const Regs l7 = cpuid(7, 0);
    f.avx2 = f.os_avx && bit(l7.b, 5);
    f.avx512f = f.os_avx512 && bit(l7.b, 16);
    f.avx512dq = f.os_avx512 && bit(l7.b, 17);
    f.avx512bw = f.os_avx512 && bit(l7.b, 30);
    f.avx512vl = f.os_avx512 && bit(l7.b, 31);
    f.avx512_vnni = f.os_avx512 && bit(l7.c, 11);
    f.amx_bf16 = f.os_amx && bit(l7.d, 22);
    f.amx_tile = f.os_amx && bit(l7.d, 24);
    if (l7.a >= 1) {
      const Regs l71 = cpuid(7, 1);
      f.avx_vnni = f.os_avx && bit(l71.a, 4);
      f.avx512_bf16 = f.os_avx512 && bit(l71.a, 5);
    }
  }
  return f;
}

IsaLevel g_chosen = IsaLevel::portable;  // written only by choose_isa, at registration

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

IsaLevel detected_isa() {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx2 && f.fma && f.f16c)) return IsaLevel::portable;
  if (!(f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq)) return IsaLevel::avx2;
  if (!f.avx512_bf16) return IsaLevel::avx512;
  return f.amx_tile && f.amx_bf16 ? IsaLevel::amx_bf16 : IsaLevel::avx512_bf16;
}

std::string feature_names(const CpuFeatures& f) {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512dq, "avx512dq");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.avx_vnni, "avx_vnni");
  add(f.amx_tile, "amx_tile");
  add(f.amx_bf16, "amx_bf16");
  if (!f.os_avx) add(true, "(the OS does not save AVX state)");
  else if (f.avx512f && !f.os_avx512) add(true, "(the OS does not save AVX-512 state)");
  return s.empty() ? "none beyond x86-64" : s;
}

const char* isa_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::portable: return "portable";
    case IsaLevel::avx2: return "avx2";
    case IsaLevel::avx512: return "avx512";
    case IsaLevel::avx512_bf16: return "avx512_bf16";
    case IsaLevel::amx_bf16: return "amx_bf16";
  }
  return "?";
}

bool parse_isa(const std::string& text, IsaLevel* out) {
  if (text == "auto") {
    *out = detected_isa();
    return true;
  }
  for (IsaLevel l : {IsaLevel::portable, IsaLevel::avx2, IsaLevel::avx512, IsaLevel::avx512_bf16,
                     IsaLevel::amx_bf16})
    if (text == isa_name(l)) {
      *out = l;
      return true;
    }
  return false;
}

IsaLevel chosen_isa() { return g_chosen; }

IsaLevel choose_isa(IsaLevel cap) {
  g_chosen = static_cast<IsaLevel>(std::min(static_cast<int>(cap), static_cast<int>(detected_isa())));
  return g_chosen;
}

}  // namespace unillm::cpu
