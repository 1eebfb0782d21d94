// The CPU allocator's cache of large blocks: best fit with splitting, joining of freed neighbours,
// and the 1/8 bound on what it keeps, checked through addresses and cached_bytes().
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "core/cpu_allocator.h"

namespace unillm {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(CpuAllocatorTest, SmallBlocksAreAlignedAndCounted) {
  CpuAllocator a;
  void* p = a.allocate(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_EQ(a.bytes_in_use(), 100u);
  a.deallocate(p, 100);
  EXPECT_EQ(a.bytes_in_use(), 0u);
  EXPECT_EQ(a.peak_bytes(), 100u);
  EXPECT_EQ(a.cached_bytes(), 0u);  // below 1 MiB: glibc's heap, not the cache
}

TEST(CpuAllocatorTest, FreedLargeBlockComesBackForTheSameSize) {
  CpuAllocator a;
  char* p = static_cast<char*>(a.allocate(3 * kMiB));
  std::memset(p, 1, 3 * kMiB);
  a.deallocate(p, 3 * kMiB);
  EXPECT_EQ(a.cached_bytes(), 3 * kMiB);
  EXPECT_EQ(a.allocate(3 * kMiB), p);
  EXPECT_EQ(a.cached_bytes(), 0u);
  a.deallocate(p, 3 * kMiB);
}

TEST(CpuAllocatorTest, SmallerRequestsSplitAFreeBlockAndTheRestStaysCached) {
  CpuAllocator a;
  char* x = static_cast<char*>(a.allocate(4 * kMiB));
  a.deallocate(x, 4 * kMiB);
  char* p = static_cast<char*>(a.allocate(kMiB));
  EXPECT_EQ(p, x);
  EXPECT_EQ(a.cached_bytes(), 3 * kMiB);
  char* q = static_cast<char*>(a.allocate(kMiB + 1));  // rounded up to whole pages
  EXPECT_EQ(q, x + kMiB);
  std::memset(q, 2, kMiB + 1);
  EXPECT_EQ(a.cached_bytes(), 2 * kMiB - 4096);
  a.deallocate(p, kMiB);
  a.deallocate(q, kMiB + 1);
  EXPECT_EQ(a.cached_bytes(), 4 * kMiB);
}

TEST(CpuAllocatorTest, FreedNeighboursJoinIntoOneBlock) {
  CpuAllocator a;
  char* x = static_cast<char*>(a.allocate(4 * kMiB));
  a.deallocate(x, 4 * kMiB);
  char* b0 = static_cast<char*>(a.allocate(kMiB));
  char* b1 = static_cast<char*>(a.allocate(kMiB));
  char* b2 = static_cast<char*>(a.allocate(2 * kMiB));
  ASSERT_EQ(b0, x);
  ASSERT_EQ(b1, x + kMiB);
  ASSERT_EQ(b2, x + 2 * kMiB);
  a.deallocate(b0, kMiB);
  a.deallocate(b2, 2 * kMiB);
  a.deallocate(b1, kMiB);  // joins both sides
  EXPECT_EQ(a.cached_bytes(), 4 * kMiB);
  EXPECT_EQ(a.allocate(4 * kMiB), x);  // one 4 MiB range again, not three pieces
  a.deallocate(x, 4 * kMiB);
}

TEST(CpuAllocatorTest, CacheKeepsAtMostAnEighthOfThePeakBeyondIt) {
  CpuAllocator a;
  void* p = a.allocate(8 * kMiB);
  a.deallocate(p, 8 * kMiB);
  // A 16 MiB miss: mapped may reach max(peak 8, live 0 + 16) + 8/8 = 17 MiB, so of the 8 MiB
  // free range only 1 MiB stays mapped (its head).
  char* big = static_cast<char*>(a.allocate(16 * kMiB));
  std::memset(big, 3, 16 * kMiB);
  EXPECT_EQ(a.cached_bytes(), kMiB);
  EXPECT_EQ(a.allocate(kMiB), p);
  a.deallocate(p, kMiB);
  a.deallocate(big, 16 * kMiB);
  EXPECT_EQ(a.cached_bytes(), 17 * kMiB);
}

// allocate_zeroed: a fresh mapping is zero already and is handed out untouched (a model's
// parameters, overwritten by its checkpoint or dropped by a quantised bundle, then cost no
// page faults or resident memory); a cached block held old bytes and is cleared; small blocks too.
size_t resident_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long pages = 0, resident = 0;
  EXPECT_EQ(std::fscanf(f, "%lu %lu", &pages, &resident), 2);
  std::fclose(f);
  return resident * 4096;
}

bool all_zero(const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

TEST(CpuAllocatorTest, ZeroedBlocksReadAsZerosAndFreshOnesStayUntouched) {
  CpuAllocator a;
  bool zeroed = false;
  const size_t before = resident_bytes();
  char* fresh = static_cast<char*>(a.allocate_zeroed(256 * kMiB, &zeroed));
  EXPECT_TRUE(zeroed);
  EXPECT_LT(resident_bytes(), before + 16 * kMiB) << "a fresh zero block was written to";
  EXPECT_TRUE(all_zero(fresh + 100 * kMiB, kMiB));
  a.deallocate(fresh, 256 * kMiB);

  char* p = static_cast<char*>(a.allocate(3 * kMiB));
  std::memset(p, 7, 3 * kMiB);
  a.deallocate(p, 3 * kMiB);
  char* again = static_cast<char*>(a.allocate_zeroed(3 * kMiB, &zeroed));
  ASSERT_EQ(again, p) << "expected the cached block back";
  EXPECT_TRUE(zeroed);
  EXPECT_TRUE(all_zero(again, 3 * kMiB));
  a.deallocate(again, 3 * kMiB);

  char* small = static_cast<char*>(a.allocate_zeroed(1000, &zeroed));
  EXPECT_TRUE(zeroed);
  EXPECT_TRUE(all_zero(small, 1000));
  EXPECT_EQ(a.bytes_in_use(), 1000u);
  a.deallocate(small, 1000);
}

}  // namespace
}  // namespace unillm
