// Whether the chosen instruction-set level (simd/isa.h) includes AVX2: the kernels' register
// functions choose the *_avx2.cpp variants when it does; the row conversions ask at call time.
#pragma once

#include "backends/cpu/simd/isa.h"

namespace unillm::cpu {

inline bool has_avx2() { return isa_at_least(IsaLevel::avx2); }  // AVX2 + FMA + F16C

}  // namespace unillm::cpu
