// Whether the chosen instruction-set level (simd/isa.h) includes AVX2: the kernels' register
// functions choose the *_avx2.cpp variants when it does; the row conversions ask at call time.
#pragma once

#include "backends/cpu/simd/isa.h"

namespace unillm::cpu {

inline bool has_avx2() { return isa_at_least(IsaLevel::avx2); }  // AVX2 + FMA + F16C
// The implementation label (KernelRegistry::add's impl) of a kernel chosen by has_avx2().
inline const char* avx2_or_portable() { return has_avx2() ? "avx2" : "portable"; }
constexpr const char* kPortable = "portable";

}  // namespace unillm::cpu
