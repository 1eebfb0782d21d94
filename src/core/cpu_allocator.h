// The host allocator: 64-byte aligned, counting bytes in use and the peak (for memory plans).
//
// Blocks of 1 MiB and more are mapped directly (mmap) and, when freed, cached by exact size for
// the next request of that size: a training step allocates the same activation and workspace
// sizes every step, so after the first step they come back without page faults (fresh blocks of
// 2 MiB and more ask for transparent huge pages). The cache never lets mapped memory exceed the
// larger of the live peak so far and what is in use now plus the request, plus 1/8 of that
// peak: on a miss that would, cached blocks are unmapped first. So the process's resident memory
// is bounded by 9/8 of the live peak of large blocks, where glibc keeps freed blocks below its
// adaptive mmap threshold (up to 32 MiB each) resident without a bound.
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
