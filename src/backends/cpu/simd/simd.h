// Runtime CPU feature detection: the kernels' register functions choose the *_avx2.cpp variants
// when has_avx2() is true.
#pragma once

namespace unillm::cpu {

bool has_avx2();  // AVX2 + FMA + F16C

}  // namespace unillm::cpu
