// memfd-backed device memory with a guarded address range (see pool.h).
#include "pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace unillm_ref {

namespace {
constexpr size_t kAlign = 256;
constexpr size_t kPunchFrom = size_t{1} << 20;

[[noreturn]] void fail(const char* what) {
  throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
}
}  // namespace

Pool::Pool(size_t capacity) : capacity_(capacity) {
  fd_ = ::memfd_create("unillm-ref-device", MFD_CLOEXEC);
  if (fd_ < 0) fail("memfd_create");
  if (::ftruncate(fd_, static_cast<off_t>(capacity)) != 0) fail("ftruncate");
  void* g = ::mmap(nullptr, capacity, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd_, 0);
  if (g == MAP_FAILED) fail("mmap (device range)");
  void* r = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd_, 0);
  if (r == MAP_FAILED) fail("mmap (plugin view)");
  guard_ = static_cast<char*>(g);
  rw_ = static_cast<char*>(r);
  free_[0] = capacity;
}

Pool::~Pool() {
  if (guard_) ::munmap(guard_, capacity_);
  if (rw_) ::munmap(rw_, capacity_);
  if (fd_ >= 0) ::close(fd_);
}

void* Pool::allocate(size_t bytes) {
  const size_t need = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const size_t off = it->first, left = it->second - need;
    free_.erase(it);
    if (left) free_[off + need] = left;
    used_[off] = need;
    return guard_ + off;
  }
  return nullptr;
}

bool Pool::release(void* device_ptr) {
  const auto* p = static_cast<const char*>(device_ptr);
  if (p < guard_ || p >= guard_ + capacity_) return false;
  size_t off = static_cast<size_t>(p - guard_);
  std::lock_guard<std::mutex> lock(mu_);
  auto u = used_.find(off);
  if (u == used_.end()) return false;
  size_t size = u->second;
  used_.erase(u);
  if (size >= kPunchFrom)  // the pages go back to the system; the range stays reserved
    ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(off),
                static_cast<off_t>(size));
  auto next = free_.lower_bound(off);
  if (next != free_.end() && off + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += size;
      return true;
    }
  }
  free_[off] = size;
  return true;
}

char* Pool::view(const void* device_ptr, size_t bytes) const {
  const auto* p = static_cast<const char*>(device_ptr);
  if (p < guard_ || p > guard_ + capacity_ || bytes > static_cast<size_t>(guard_ + capacity_ - p))
    return nullptr;
  return rw_ + (p - guard_);
}

}  // namespace unillm_ref
