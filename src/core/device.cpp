// Backend list and storage allocation.
#include "core/device.h"

#include <cstring>
#include <vector>

#include "core/error.h"

namespace unillm {

namespace {

// The kind table and the backend of each kind (one of the registry's globals: set up explicitly
// at start-up, before any work).
struct Kinds {
  std::vector<std::string> names{"cpu"};
  std::vector<std::unique_ptr<Backend>> backends = [] {
    std::vector<std::unique_ptr<Backend>> v;
    v.emplace_back();
    return v;
  }();
};

// Never destroyed: backends outlive every tensor, including those static destructors free at
// exit, and a plugin's backend must not be torn down after its library's own statics.
Kinds& kinds() {
  static auto* k = new Kinds();
  return *k;
}

std::string kind_list() {
  std::string out;
  for (const auto& n : kinds().names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

DeviceKind register_device_kind(const std::string& name) {
  DeviceKind k;
  if (find_device_kind(name, &k))
    UNILLM_THROW(ConfigError, "[device] a device kind named '", name, "' is already registered");
  auto& t = kinds();
  UNILLM_CHECK(t.names.size() < 65535, "[device] too many device kinds");
  t.names.push_back(name);
  t.backends.emplace_back();
  return DeviceKind{static_cast<uint16_t>(t.names.size() - 1)};
}

bool find_device_kind(const std::string& name, DeviceKind* out) {
  const auto& n = kinds().names;
  for (size_t i = 0; i < n.size(); ++i)
    if (n[i] == name) {
      *out = DeviceKind{static_cast<uint16_t>(i)};
      return true;
    }
  return false;
}

const std::string& device_kind_name(DeviceKind kind) {
  UNILLM_CHECK(kind.id < kinds().names.size(), "[device] unknown kind id ", kind.id);
  return kinds().names[kind.id];
}

std::string device_name(const Device& d) {
  if (d.is_cpu()) return "cpu";
  return device_kind_name(d.kind) + ":" + std::to_string(d.index);
}

Device parse_device(const std::string& s) {
  std::string name = s;
  int index = 0;
  auto colon = s.find(':');
  if (colon != std::string::npos) {
    name = s.substr(0, colon);
    size_t used = 0;
    try {
      index = std::stoi(s.substr(colon + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size() - colon - 1 || index < 0)
      UNILLM_THROW(ConfigError, "[device] '", s, "': the index after ':' must be an integer >= 0");
  }
  DeviceKind kind;
  if (!find_device_kind(name, &kind) || !find_backend(kind))
    UNILLM_THROW(ConfigError, "[device] unknown device '", name, "' (registered: ", kind_list(),
                 "; plugin devices are loaded from UNILLM_PLUGIN_PATH)");
  const int count = find_backend(kind)->device_count();
  if (index >= count)
    UNILLM_THROW(ConfigError, "[device] '", s, "' does not exist: ", name, " has ", count,
                 count == 1 ? " device (index 0)" : " devices");
  return Device{kind, index};
}

void register_backend(std::unique_ptr<Backend> backend) {
  auto& t = kinds();
  const uint16_t id = backend->kind().id;
  UNILLM_CHECK(id < t.backends.size(), "[device] backend of an unregistered kind");
  t.backends[id] = std::move(backend);
}

Backend* find_backend(DeviceKind kind) {
  auto& b = kinds().backends;
  return kind.id < b.size() ? b[kind.id].get() : nullptr;
}

Backend& backend_for(const Device& d) {
  Backend* b = find_backend(d.kind);
  if (!b)
    UNILLM_THROW(DeviceError, "[device] no backend for '", device_name(d),
                 "' in this process (see `unillm env`)");
  if (d.index < 0 || d.index >= b->device_count())
    UNILLM_THROW(DeviceError, "[device] '", device_name(d), "' does not exist (", b->device_count(),
                 " present)");
  return *b;
}

std::vector<Backend*> registered_backends() {
  std::vector<Backend*> out;
  for (auto& b : kinds().backends)
    if (b) out.push_back(b.get());
  return out;
}

void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  if (bytes == 0) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memcpy(dst, src, bytes);
  } else if (src_dev.is_cpu()) {
    backend_for(dst_dev).copy_to_device(dst, dst_dev.index, src, bytes);
  } else if (dst_dev.is_cpu()) {
    backend_for(src_dev).copy_to_host(dst, src, src_dev.index, bytes);
  } else if (dst_dev == src_dev) {
    backend_for(dst_dev).copy_on_device(dst, src, dst_dev.index, bytes);
  } else {  // two devices: through the host
    std::vector<unsigned char> host(bytes);
    backend_for(src_dev).copy_to_host(host.data(), src, src_dev.index, bytes);
    backend_for(dst_dev).copy_to_device(dst, dst_dev.index, host.data(), bytes);
  }
}

void release_cached_memory(const Device& d) { backend_for(d).allocator(d.index).release_cached(); }

std::shared_ptr<Storage> Storage::allocate(size_t bytes, Device device, bool* zeroed) {
  Allocator& a = backend_for(device).allocator(device.index);
  if (zeroed) *zeroed = bytes == 0;
  void* p = !bytes ? nullptr : zeroed ? a.allocate_zeroed(bytes, zeroed) : a.allocate(bytes);
  std::shared_ptr<void> owner(p, [&a, bytes](void* q) {
    if (q) a.deallocate(q, bytes);
  });
  return std::make_shared<Storage>(p, bytes, device, std::move(owner));
}

void Storage::refill() {
  std::shared_ptr<Storage> fresh = allocate(bytes_, device_);
  data_ = fresh->data();
  owner_ = std::move(fresh);  // keeps the fresh memory (and its deallocation) alive
}

void Storage::release() {
  data_ = nullptr;
  owner_.reset();
}

}  // namespace unillm
