// Whether the chosen instruction-set level (simd/isa.h) includes AVX2 or AVX-512: the kernels'
// register functions choose the *_avx2.cpp / *_avx512.cpp variants when it does; the row
// conversions ask at call time.
#pragma once

#include "backends/cpu/simd/isa.h"

namespace unillm::cpu {

inline bool has_avx2() { return isa_at_least(IsaLevel::avx2); }  // AVX2 + FMA + F16C
// The implementation label (KernelRegistry::add's impl) of a kernel chosen by has_avx2().
inline const char* avx2_or_portable() { return has_avx2() ? "avx2" : "portable"; }
inline bool has_avx512() { return isa_at_least(IsaLevel::avx512); }  // F, BW, VL, DQ
constexpr const char* kPortable = "portable";

// For a kernel with all three variants: the one of the chosen level, and its label.
template <typename Fn>
Fn* by_level(Fn* portable, Fn* avx2, Fn* avx512) {
  return has_avx512() ? avx512 : has_avx2() ? avx2 : portable;
}
inline const char* level_label() { return has_avx512() ? "avx512" : avx2_or_portable(); }

}  // namespace unillm::cpu
