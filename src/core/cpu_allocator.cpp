// Aligned host allocation with accounting, and the size-exact cache of large mapped blocks (see
// the header).
#include "core/cpu_allocator.h"

#include <sys/mman.h>

#include <cstdlib>

#include "core/error.h"

namespace unillm {

namespace {
constexpr size_t kLarge = size_t{1} << 20;  // blocks from here on are mapped and cached
constexpr size_t kPage = size_t{4096};
constexpr size_t kCacheSlack = 8;  // the cache may hold up to 1/8 of the live peak beyond it
size_t mapped_size(size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }
}  // namespace

CpuAllocator::~CpuAllocator() {
  for (auto& [size, p] : cache_) ::munmap(p, size);
}

size_t CpuAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

void* CpuAllocator::map_large(size_t m) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = cache_.find(m); it != cache_.end()) {
    void* p = it->second;
    cache_.erase(it);
    cached_ -= m;
    mapped_live_ += m;
    return p;
  }
  // A miss: unmap cached blocks (largest first) while keeping them would take the mapped total
  // past the peak of live large blocks so far plus an eighth. Without that eighth, blocks freed
  // before a step's peak and wanted again after it are unmapped and faulted back in every step
  // (stories15M full fine-tuning: 53 misses a step, ~10% slower); with it, ~5.
  const size_t limit = std::max(mapped_peak_, mapped_live_ + m) + mapped_peak_ / kCacheSlack;
  while (!cache_.empty() && mapped_live_ + cached_ + m > limit) {
    auto last = std::prev(cache_.end());
    ::munmap(last->second, last->first);
    cached_ -= last->first;
    cache_.erase(last);
  }
  void* p = ::mmap(nullptr, m, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED && !cache_.empty()) {  // out of address space or memory: drop the cache, retry
    for (auto& [size, q] : cache_) ::munmap(q, size);
    cache_.clear();
    cached_ = 0;
    p = ::mmap(nullptr, m, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  if (p == MAP_FAILED) return nullptr;
  // Transparent huge pages where the system allows them on request: a fresh block then faults in
  // 2 MiB at a time instead of 4 KiB (measured: a stories15M step's page-fault time).
  if (m >= (size_t{2} << 20)) ::madvise(p, m, MADV_HUGEPAGE);
  mapped_live_ += m;
  mapped_peak_ = std::max(mapped_peak_, mapped_live_);
  return p;
}

void* CpuAllocator::allocate(size_t bytes) {
  void* p = nullptr;
  if (bytes >= kLarge) {
    p = map_large(mapped_size(bytes));  // page aligned, so 64-byte aligned
  } else {
    p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  }
  if (!p) UNILLM_THROW(OutOfMemory, "[cpu] could not allocate ", bytes, " bytes");
  size_t now = in_use_.fetch_add(bytes) + bytes;
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  return p;
}

void CpuAllocator::deallocate(void* p, size_t bytes) {
  in_use_.fetch_sub(bytes);
  if (bytes < kLarge) {
    std::free(p);
    return;
  }
  const size_t m = mapped_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  mapped_live_ -= m;
  cache_.emplace(m, p);
  cached_ += m;
}

}  // namespace unillm
