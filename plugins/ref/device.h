// The reference device's state, shared by its device functions and its kernels: per device a
// memory pool; per stream a worker queue that knows its device.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pool.h"
#include "stream.h"
#include "unillm/device_plugin.h"

namespace unillm_ref {

constexpr int kDevices = 2;
constexpr size_t kDeviceMemory = size_t{8} << 30;  // reserved address space; pages on use

struct RefDevice {
  explicit RefDevice(size_t bytes) : pool(bytes) {}
  Pool pool;
};

// What an unillm_stream handle points to.
struct RefStream {
  explicit RefStream(RefDevice& d) : device(d) {}
  RefDevice& device;
  Stream queue;
};

RefDevice& device(int index);
inline RefStream& stream_of(unillm_stream s) { return *reinterpret_cast<RefStream*>(s); }

// Sets this thread's last error and returns status (for the device functions and kernels).
unillm_status fail(unillm_status status, const std::string& message);

// The kernel table (kernels.cpp).
const std::vector<unillm_kernel>& kernel_table();

// The collectives over MPI (collectives.cpp; ABI 1.1).
const unillm_collectives_v1* collectives_table();

}  // namespace unillm_ref
