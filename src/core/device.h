// Devices, storage and the backend interface each device implements (allocator, copies, sync).
// Backends register themselves explicitly at start-up (cli calls register_*_backend()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace unillm {

// A device kind: an id from the process-wide kind table. Kinds are registered at run time (the
// CPU backend, each loaded plugin), so several plugins coexist; 0 is always the CPU.
struct DeviceKind {
  uint16_t id = 0;
  static const DeviceKind cpu;
  bool operator==(const DeviceKind& o) const { return id == o.id; }
  bool operator<(const DeviceKind& o) const { return id < o.id; }
};
inline constexpr DeviceKind DeviceKind::cpu{0};

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool is_cpu() const { return kind == DeviceKind::cpu; }
};

// Adds a kind named name (ConfigError if the name is taken); "cpu" is registered from the start.
DeviceKind register_device_kind(const std::string& name);
// The kind of that name, or false.
bool find_device_kind(const std::string& name, DeviceKind* out);
const std::string& device_kind_name(DeviceKind kind);
std::string device_name(const Device& d);  // "cpu", "ref:1"
// The device's allocator's release_cached().
void release_cached_memory(const Device& d);
// Parses "cpu", "ref", "ref:1" against the registered kinds and their device counts; throws
// ConfigError naming what is registered otherwise.
Device parse_device(const std::string& s);

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  // Like allocate; *zeroed says whether the block already reads as zeros (the caller clears it
  // otherwise). The host allocator's fresh mappings are, so a zero tensor that is overwritten
  // before it is read (a model's parameters while a checkpoint loads) never touches its pages.
  virtual void* allocate_zeroed(size_t bytes, bool* zeroed) {
    *zeroed = false;
    return allocate(bytes);
  }
  virtual void deallocate(void* p, size_t bytes) = 0;
  // Returns freed blocks the allocator keeps for reuse to the system (the CPU allocator unmaps
  // its cached ranges): for a phase that frees memory for good, such as a load that replaces
  // dense matrices by quantised ones. A no-op where nothing is cached.
  virtual void release_cached() {}
  // Bytes currently held and the peak since the last reset (for the memory plan).
  virtual size_t bytes_in_use() const = 0;
  virtual size_t peak_bytes() const = 0;
  virtual void reset_peak() = 0;
};

struct DeviceProperties {
  std::string name;           // e.g. "unillm reference device 0"
  uint64_t total_memory = 0;  // bytes (0: unknown)
  std::vector<std::string> dtypes;  // dtype names its kernels take
};

// What every device supplies. Kernels are registered separately into the KernelRegistry. Work
// is queued on each device's default stream (returned by stream(), passed to plugin kernels), so
// its order is the order of the calls; copies to the host wait for the work queued before them.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;
  virtual int device_count() const = 0;
  virtual DeviceProperties properties(int index) const = 0;
  // True when the host may read and write this device's memory directly (the CPU only).
  virtual bool host_accessible() const { return false; }
  // deallocate is stream-ordered: the block is reused only after the work queued before it.
  virtual Allocator& allocator(int index) = 0;
  virtual void copy_to_device(void* dst, int index, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, int index, size_t bytes) = 0;
  virtual void copy_on_device(void* dst, const void* src, int index, size_t bytes) = 0;
  virtual void memset(void* dst, int value, size_t bytes, int index) = 0;
  virtual void* stream(int index) { return nullptr; }  // the default stream's handle
  // The message of the device's last failed call on this thread ("" when it has none).
  virtual std::string last_error() const { return ""; }
  virtual void synchronize(int index) = 0;
};

// The backend list, keyed by kind, filled explicitly at start-up.
void register_backend(std::unique_ptr<Backend> backend);
Backend* find_backend(DeviceKind kind);  // nullptr when not registered
Backend& backend_for(const Device& d);   // throws DeviceError when absent or out of range
std::vector<Backend*> registered_backends();
// Copies bytes between any two devices (through the host when neither side is the CPU and they
// differ); ordered after the work queued on both.
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes);

// Raw storage: a pointer, its size and device, and an owner that keeps the memory alive
// (an allocation, an mmap of a checkpoint, or a parent storage).
class Storage {
 public:
  Storage(void* data, size_t bytes, Device device, std::shared_ptr<void> owner)
      : data_(data), bytes_(bytes), device_(device), owner_(std::move(owner)) {}
  // Allocates from the device's allocator; with `zeroed`, through allocate_zeroed (whether the
  // memory already reads as zeros).
  static std::shared_ptr<Storage> allocate(size_t bytes, Device device, bool* zeroed = nullptr);
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // Memory that comes and goes under one storage object (ZeRO-3's gathered parameters,
  // train/param_shards.h): refill() gives it fresh memory of bytes() from the device's
  // allocator (contents undefined), release() frees it. Every view of the storage, including
  // tensors an autograd graph saved, reads whatever it holds at the time; between release() and
  // refill() data() is null.
  void refill();
  void release();
  bool holds_memory() const { return data_ != nullptr || bytes_ == 0; }

 private:
  void* data_;
  size_t bytes_;
  Device device_;
  std::shared_ptr<void> owner_;
};

}  // namespace unillm
