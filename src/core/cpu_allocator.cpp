// Aligned host allocation with accounting.
#include "core/cpu_allocator.h"

#include <cstdlib>

#include "core/error.h"

namespace unillm {

void* CpuAllocator::allocate(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) UNILLM_THROW(OutOfMemory, "[cpu] could not allocate ", bytes, " bytes");
  size_t now = in_use_.fetch_add(bytes) + bytes;
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  return p;
}

void CpuAllocator::deallocate(void* p, size_t bytes) {
  std::free(p);
  in_use_.fetch_sub(bytes);
}

}  // namespace unillm
