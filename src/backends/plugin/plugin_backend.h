// A device kind provided by a plugin: the Backend interface over the plugin's C device functions
// (include/unillm/device_plugin.h). Every call checks the status and turns a failure into a
// DeviceError carrying the plugin's message; nothing of the plugin throws.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "unillm/device_plugin.h"

namespace unillm::plugin {

// Allocations of one plugin device, counted like the CPU's (for memory plans and reports).
class PluginAllocator : public Allocator {
 public:
  PluginAllocator(const unillm_device_interface* dev, int32_t index, void* stream, std::string who)
      : dev_(dev), index_(index), stream_(stream), who_(std::move(who)) {}
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;  // stream-ordered (free_async)
  size_t bytes_in_use() const override { return in_use_; }
  size_t peak_bytes() const override { return peak_; }
  void reset_peak() override { peak_ = in_use_; }

 private:
  const unillm_device_interface* dev_;
  int32_t index_;
  void* stream_;
  std::string who_;
  size_t in_use_ = 0, peak_ = 0;
};

class PluginBackend : public Backend {
 public:
  // plugin must outlive the backend (its library stays loaded for the process).
  PluginBackend(DeviceKind kind, const unillm_plugin& plugin, std::string file);
  ~PluginBackend() override;
  DeviceKind kind() const override { return kind_; }
  std::string name() const override { return name_; }
  int device_count() const override { return static_cast<int>(devices_.size()); }
  DeviceProperties properties(int index) const override;
  Allocator& allocator(int index) override { return *devices_.at(index).allocator; }
  void copy_to_device(void* dst, int index, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, int index, size_t bytes) override;
  void copy_on_device(void* dst, const void* src, int index, size_t bytes) override;
  void memset(void* dst, int value, size_t bytes, int index) override;
  void* stream(int index) override { return devices_.at(index).stream; }
  void synchronize(int index) override;
  std::string last_error() const override;
  // The plugin's collectives (ABI 1.1), or nullptr: a 1.0 plugin, or a table the loader refused.
  const unillm_collectives_v1* collectives() const { return collectives_; }
  const unillm_device_interface* device_interface() const { return dev_; }

 private:
  struct PerDevice {
    unillm_stream stream = nullptr;
    std::unique_ptr<PluginAllocator> allocator;
  };
  void check(unillm_status s, const char* what) const;
  DeviceKind kind_;
  std::string name_, file_;
  const unillm_device_interface* dev_;
  const unillm_collectives_v1* collectives_ = nullptr;
  std::vector<PerDevice> devices_;
};

// The plugin's collectives table if it is complete (its size covers every v1 function, none is
// NULL, unique_id_size is 1..UNILLM_UNIQUE_ID_MAX), else nullptr with the reason in *why
// (nothing when the plugin has no table).
const unillm_collectives_v1* usable_collectives(const unillm_plugin& plugin, std::string* why);

// Throws DeviceError "[NAME] what failed: <last_error>" when s is not UNILLM_OK.
void check_status(const unillm_device_interface* dev, unillm_status s, const std::string& who,
                  const char* what);

}  // namespace unillm::plugin
