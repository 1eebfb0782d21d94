// Backend list and storage allocation.
#include "core/device.h"

#include <array>

#include "core/error.h"

namespace unillm {

namespace {
std::array<std::unique_ptr<Backend>, kNumDeviceTypes>& backends() {
  static std::array<std::unique_ptr<Backend>, kNumDeviceTypes> list;
  return list;
}
}  // namespace

const char* device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::cuda: return "cuda";
    case DeviceType::plugin: return "plugin";
  }
  return "?";
}

std::string device_name(const Device& d) {
  if (d.type == DeviceType::cpu) return "cpu";
  return std::string(device_type_name(d.type)) + ":" + std::to_string(d.index);
}

Device parse_device(const std::string& s) {
  std::string kind = s;
  int index = 0;
  auto colon = s.find(':');
  if (colon != std::string::npos) {
    kind = s.substr(0, colon);
    try {
      index = std::stoi(s.substr(colon + 1));
    } catch (const std::exception&) {
      UNILLM_THROW(ConfigError, "[device] bad device index in '", s, "'");
    }
  }
  for (int t = 0; t < kNumDeviceTypes; ++t) {
    auto type = static_cast<DeviceType>(t);
    if (kind == device_type_name(type)) return Device{type, index};
  }
  UNILLM_THROW(ConfigError, "[device] unknown device '", s, "' (expected cpu, cuda[:N] or plugin[:N])");
}

void register_backend(std::unique_ptr<Backend> backend) {
  auto t = static_cast<size_t>(backend->type());
  backends()[t] = std::move(backend);
}

Backend* find_backend(DeviceType t) { return backends()[static_cast<size_t>(t)].get(); }

Backend& backend_for(const Device& d) {
  Backend* b = find_backend(d.type);
  if (!b)
    UNILLM_THROW(DeviceError, "[device] no backend for '", device_name(d),
                 "' in this build (see `unillm env`)");
  if (d.index < 0 || d.index >= b->device_count())
    UNILLM_THROW(DeviceError, "[device] '", device_name(d), "' does not exist (", b->device_count(),
                 " present)");
  return *b;
}

std::vector<Backend*> registered_backends() {
  std::vector<Backend*> out;
  for (auto& b : backends())
    if (b) out.push_back(b.get());
  return out;
}

std::shared_ptr<Storage> Storage::allocate(size_t bytes, Device device) {
  Allocator& a = backend_for(device).allocator(device.index);
  void* p = bytes ? a.allocate(bytes) : nullptr;
  std::shared_ptr<void> owner(p, [&a, bytes](void* q) {
    if (q) a.deallocate(q, bytes);
  });
  return std::make_shared<Storage>(p, bytes, device, std::move(owner));
}

}  // namespace unillm
