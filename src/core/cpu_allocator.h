// The host allocator: 64-byte aligned, counting bytes in use and the peak (for memory plans).
#pragma once

#include <atomic>

#include "core/device.h"

namespace unillm {

class CpuAllocator : public Allocator {
 public:
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;
  size_t bytes_in_use() const override { return in_use_.load(); }
  size_t peak_bytes() const override { return peak_.load(); }
  void reset_peak() override { peak_.store(in_use_.load()); }

 private:
  std::atomic<size_t> in_use_{0};
  std::atomic<size_t> peak_{0};
};

}  // namespace unillm
