// Devices, storage and the backend interface each device implements (allocator, copies, sync).
// Backends register themselves explicitly at start-up (cli calls register_*_backend()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace unillm {

enum class DeviceType : uint8_t { cpu, cuda, plugin };
constexpr int kNumDeviceTypes = 3;

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool is_cpu() const { return type == DeviceType::cpu; }
};

const char* device_type_name(DeviceType t);
std::string device_name(const Device& d);
// Parses "cpu", "cuda", "cuda:1", "plugin:0"; throws ConfigError with the spelling otherwise.
Device parse_device(const std::string& s);

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p, size_t bytes) = 0;
  // Bytes currently held and the peak since the last reset (for the memory plan).
  virtual size_t bytes_in_use() const = 0;
  virtual size_t peak_bytes() const = 0;
  virtual void reset_peak() = 0;
};

// What every device supplies. Kernels are registered separately into the KernelRegistry.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType type() const = 0;
  virtual std::string name() const = 0;
  virtual int device_count() const = 0;
  virtual Allocator& allocator(int index) = 0;
  // Copies bytes between host and this device or within it; one side may be the CPU.
  virtual void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) = 0;
  virtual void synchronize(int index) = 0;
};

// The backend list: one slot per device type, filled explicitly at start-up.
void register_backend(std::unique_ptr<Backend> backend);
Backend* find_backend(DeviceType t);  // nullptr when not registered
Backend& backend_for(const Device& d);  // throws DeviceError when absent
std::vector<Backend*> registered_backends();

// Raw storage: a pointer, its size and device, and an owner that keeps the memory alive
// (an allocation, an mmap of a checkpoint, or a parent storage).
class Storage {
 public:
  Storage(void* data, size_t bytes, Device device, std::shared_ptr<void> owner)
      : data_(data), bytes_(bytes), device_(device), owner_(std::move(owner)) {}
  // Allocates from the device's allocator.
  static std::shared_ptr<Storage> allocate(size_t bytes, Device device);
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t bytes_;
  Device device_;
  std::shared_ptr<void> owner_;
};

}  // namespace unillm
