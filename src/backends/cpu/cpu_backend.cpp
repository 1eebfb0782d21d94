// The CPU device: aligned host memory and memcpy copies.
#include "backends/cpu/cpu_backend.h"

#include <unistd.h>

#include <cstring>

namespace unillm::cpu {

DeviceProperties CpuBackend::properties(int) const {
  DeviceProperties p;
  p.name = "host CPU";
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  p.total_memory = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
  p.dtypes = {"f32", "f64", "bf16", "f16", "i32", "i64"};
  return p;
}

void CpuBackend::copy_to_device(void* dst, int, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void CpuBackend::copy_to_host(void* dst, const void* src, int, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void CpuBackend::copy_on_device(void* dst, const void* src, int, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
}
void CpuBackend::memset(void* dst, int value, size_t bytes, int) {
  if (bytes) std::memset(dst, value, bytes);
}

}  // namespace unillm::cpu
