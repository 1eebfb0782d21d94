// CPU feature detection (cached).
#include "backends/cpu/simd/simd.h"

namespace unillm::cpu {

bool has_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  return ok;
}

}  // namespace unillm::cpu
