// The host allocator: 64-byte aligned, counting bytes in use and the peak (for memory plans).
//
// Blocks of 1 MiB and more are mapped directly (mmap) and, when freed, kept as free page ranges
// for the next requests: a training step allocates the same activation and workspace sizes every
// step, so after the first step they come back without page faults (fresh blocks of 2 MiB and
// more ask for transparent huge pages). A request takes the smallest free range that holds it
// and leaves the rest free; freed neighbours are joined, so a freed 12 MiB block serves the next
// phase's 2 MiB ones instead of being unmapped (exact-size reuse faulted 79 blocks back in per
// bf16 LoRA step on stories15M; best fit with splitting, none in steady state). The cache never
// lets mapped memory exceed the larger of the live peak so far and what is in use now plus the
// request, plus 1/8 of that peak: on a miss that would, free ranges are unmapped first (largest
// first, only as much as needed). So the process's resident memory is bounded by 9/8 of the live
// peak of large blocks, where glibc keeps freed blocks below its adaptive mmap threshold (up to
// 32 MiB each) resident without a bound.
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
  void* allocate_zeroed(size_t bytes, bool* zeroed) override;
  void deallocate(void* p, size_t bytes) override;
  size_t bytes_in_use() const override { return in_use_.load(); }
  size_t peak_bytes() const override { return peak_.load(); }
  void reset_peak() override { peak_.store(in_use_.load()); }
  void release_cached() override;
  // Bytes of freed large blocks kept for reuse.
  size_t cached_bytes() const;

 private:
  void* map_large(size_t mapped, bool* fresh);  // *fresh: newly mapped (zero pages), not cached
  void* take(size_t bytes, bool* fresh);        // allocate's body, with the accounting
  void add_free(char* p, size_t size);     // joins neighbours; caller holds mu_
  void remove_free(char* p, size_t size);  // caller holds mu_
  void erase_free(char* p, size_t size);   // remove_free without the byte count
  void unmap_free(size_t bytes);           // unmaps at least `bytes` of free ranges
  std::atomic<size_t> in_use_{0};
  std::atomic<size_t> peak_{0};
  mutable std::mutex mu_;  // guards the cache
  std::map<char*, size_t> free_;              // free range start -> size (page multiples)
  std::multimap<size_t, char*> free_by_size_;  // the same ranges by size, for best fit
  size_t cached_ = 0, mapped_live_ = 0, mapped_peak_ = 0;  // large blocks, in mapped bytes
};

}  // namespace unillm
