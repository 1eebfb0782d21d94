// The host allocator: 64-byte aligned, counting bytes in use and the peak (for memory plans).
//
// Blocks of 1 MiB and more are mapped directly (mmap) and, when freed, cached by exact size for
// the next request of that size: a training step allocates the same activation and workspace
// sizes every step, so after the first step they come back without page faults. The cache never
// lets mapped memory exceed the larger of the peak in use so far and what is in use now plus the
// request: on a miss that would, cached blocks are unmapped first. So the process's resident
// memory tracks the live peak instead of the heap's freed-but-kept blocks (glibc keeps freed
// blocks below its adaptive mmap threshold, up to 32 MiB each, resident).
#pragma once

#include <atomic>
#include <map>
#include <mutex>

#include "core/device.h"

namespace unillm {

class CpuAllocator : public Allocator {
 public:
  ~CpuAllocator() override;
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;
  size_t bytes_in_use() const override { return in_use_.load(); }
  size_t peak_bytes() const override { return peak_.load(); }
  void reset_peak() override { peak_.store(in_use_.load()); }
  // Bytes of freed large blocks kept for reuse.
  size_t cached_bytes() const;

 private:
  void* map_large(size_t mapped);
  std::atomic<size_t> in_use_{0};
  std::atomic<size_t> peak_{0};
  mutable std::mutex mu_;  // guards the cache
  std::multimap<size_t, void*> cache_;  // mapped size -> free block
  size_t cached_ = 0, mapped_live_ = 0, mapped_peak_ = 0;  // large blocks, in mapped bytes
};

}  // namespace unillm
