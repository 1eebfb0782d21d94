// The CPU implementation of the Backend interface.
#pragma once

#include "core/cpu_allocator.h"
#include "core/device.h"

namespace unillm::cpu {

class CpuBackend : public Backend {
 public:
  DeviceType type() const override { return DeviceType::cpu; }
  std::string name() const override { return "cpu"; }
  int device_count() const override { return 1; }
  Allocator& allocator(int) override { return allocator_; }
  void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) override;
  void synchronize(int) override {}

 private:
  CpuAllocator allocator_;
};

}  // namespace unillm::cpu
