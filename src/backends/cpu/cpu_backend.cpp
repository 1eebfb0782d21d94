// The CPU device: aligned host memory and memcpy copies.
#include "backends/cpu/cpu_backend.h"

#include <cstring>

namespace unillm::cpu {

void CpuBackend::copy(void* dst, Device, const void* src, Device, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

}  // namespace unillm::cpu
