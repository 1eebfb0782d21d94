// The reference device's memory: one memfd per device, mapped twice. The addresses handed out lie
// in a PROT_NONE mapping that is never made accessible, so a host access that bypassed the
// device path faults; the plugin's kernels and copies reach the same pages through a second,
// read-write mapping (view()). Blocks are kept in an offset-ordered free list, first fit, joined
// on release; pages of released blocks of 1 MiB and more go back to the system.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

namespace unillm_ref {

class Pool {
 public:
  explicit Pool(size_t capacity);  // throws std::runtime_error when the mappings fail
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  void* allocate(size_t bytes);  // nullptr when no block fits
  bool release(void* device_ptr);  // false for a pointer that is not a live block
  // The read-write address of [device_ptr, device_ptr + bytes), or nullptr when the range is
  // not inside the pool.
  char* view(const void* device_ptr, size_t bytes) const;
  size_t capacity() const { return capacity_; }

 private:
  int fd_ = -1;
  char* guard_ = nullptr;  // the device addresses: PROT_NONE
  char* rw_ = nullptr;     // the same pages, read-write, for the plugin only
  size_t capacity_ = 0;
  std::mutex mu_;
  std::map<size_t, size_t> free_;  // offset -> size
  std::map<size_t, size_t> used_;  // offset -> size
};

}  // namespace unillm_ref
