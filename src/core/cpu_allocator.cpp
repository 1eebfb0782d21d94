// Aligned host allocation with accounting, and the size-exact cache of large mapped blocks (see
// the header).
#include "core/cpu_allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace unillm {

namespace {
constexpr size_t kLarge = size_t{1} << 20;  // blocks from here on are mapped and cached
constexpr size_t kPage = size_t{4096};
constexpr size_t kCacheSlack = 8;  // the cache may hold up to 1/8 of the live peak beyond it
size_t mapped_size(size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }
}  // namespace

CpuAllocator::~CpuAllocator() {
  for (auto& [p, size] : free_) ::munmap(p, size);
}

size_t CpuAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

void CpuAllocator::erase_free(char* p, size_t size) {
  free_.erase(p);
  auto [lo, hi] = free_by_size_.equal_range(size);
  for (auto it = lo; it != hi; ++it) {
    if (it->second == p) {
      free_by_size_.erase(it);
      return;
    }
  }
}

void CpuAllocator::remove_free(char* p, size_t size) {
  erase_free(p, size);
  cached_ -= size;
}

void CpuAllocator::add_free(char* p, size_t size) {
  cached_ += size;
  auto next = free_.lower_bound(p);
  if (next != free_.end() && p + size == next->first) {  // join the range after
    const size_t n = next->second;
    erase_free(next->first, n);
    size += n;
  }
  next = free_.lower_bound(p);
  if (next != free_.begin()) {  // join the range before
    auto prev = std::prev(next);
    if (prev->first + prev->second == p) {
      char* q = prev->first;
      const size_t n = prev->second;
      erase_free(q, n);
      p = q;
      size += n;
    }
  }
  free_.emplace(p, size);
  free_by_size_.emplace(size, p);
}

void CpuAllocator::unmap_free(size_t bytes) {
  while (bytes > 0 && !free_by_size_.empty()) {
    auto last = std::prev(free_by_size_.end());
    const size_t size = last->first;
    char* p = last->second;
    remove_free(p, size);
    if (size <= bytes) {
      ::munmap(p, size);
      bytes -= size;
    } else {  // unmap the tail only; the head stays free and resident
      const size_t cut = (bytes + kPage - 1) / kPage * kPage;
      ::munmap(p + size - cut, cut);
      if (size > cut) add_free(p, size - cut);
      bytes = 0;
    }
  }
}

void* CpuAllocator::map_large(size_t m, bool* fresh) {
  *fresh = false;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = free_by_size_.lower_bound(m); it != free_by_size_.end()) {  // best fit
    const size_t size = it->first;
    char* p = it->second;
    remove_free(p, size);
    if (size > m) add_free(p + m, size - m);
    mapped_live_ += m;
    mapped_peak_ = std::max(mapped_peak_, mapped_live_);
    return p;
  }
  // A miss: unmap free ranges while keeping them would take the mapped total past the peak of
  // live large blocks so far plus an eighth. Without that eighth, blocks freed before a step's
  // peak and wanted again after it are unmapped and faulted back in every step.
  const size_t limit = std::max(mapped_peak_, mapped_live_ + m) + mapped_peak_ / kCacheSlack;
  if (mapped_live_ + cached_ + m > limit) unmap_free(mapped_live_ + cached_ + m - limit);
  void* p = ::mmap(nullptr, m, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED && !free_.empty()) {  // out of address space or memory: drop the cache, retry
    unmap_free(cached_);
    p = ::mmap(nullptr, m, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  if (p == MAP_FAILED) return nullptr;
  // Transparent huge pages where the system allows them on request: a fresh block then faults in
  // 2 MiB at a time instead of 4 KiB (measured: a stories15M step's page-fault time).
  if (m >= (size_t{2} << 20)) ::madvise(p, m, MADV_HUGEPAGE);
  mapped_live_ += m;
  mapped_peak_ = std::max(mapped_peak_, mapped_live_);
  *fresh = true;
  return p;
}

void CpuAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  unmap_free(cached_);
}

void* CpuAllocator::allocate(size_t bytes) {
  bool fresh = false;
  return take(bytes, &fresh);
}

void* CpuAllocator::allocate_zeroed(size_t bytes, bool* zeroed) {
  bool fresh = false;
  void* p = take(bytes, &fresh);
  if (!fresh) std::memset(p, 0, bytes);
  *zeroed = true;
  return p;
}

void* CpuAllocator::take(size_t bytes, bool* fresh) {
  void* p = nullptr;
  *fresh = false;
  if (bytes >= kLarge) {
    p = map_large(mapped_size(bytes), fresh);  // page aligned, so 64-byte aligned
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
  add_free(static_cast<char*>(p), m);
}

}  // namespace unillm
