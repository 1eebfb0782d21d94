// The CPU implementation of the Backend interface: host memory, memcpy copies, no queue (every
// call has finished when it returns).
#pragma once

#include "core/cpu_allocator.h"
#include "core/device.h"

namespace unillm::cpu {

class CpuBackend : public Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::cpu; }
  std::string name() const override { return "cpu"; }
  int device_count() const override { return 1; }
  DeviceProperties properties(int index) const override;
  bool host_accessible() const override { return true; }
  Allocator& allocator(int) override { return allocator_; }
  void copy_to_device(void* dst, int, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, int, size_t bytes) override;
  void copy_on_device(void* dst, const void* src, int, size_t bytes) override;
  void memset(void* dst, int value, size_t bytes, int) override;
  void synchronize(int) override {}

 private:
  CpuAllocator allocator_;
};

}  // namespace unillm::cpu
