// Backend over a plugin's device functions.
#include "backends/plugin/plugin_backend.h"

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace unillm::plugin {

void check_status(const unillm_device_interface* dev, unillm_status s, const std::string& who,
                  const char* what) {
  if (s == UNILLM_OK) return;
  const char* msg = dev && dev->last_error ? dev->last_error() : nullptr;
  const std::string why = msg && *msg ? msg : "no message";
  if (s == UNILLM_ERROR_OUT_OF_MEMORY)
    UNILLM_THROW(OutOfMemory, "[", who, "] ", what, ": out of device memory (", why, ")");
  UNILLM_THROW(DeviceError, "[", who, "] ", what, " failed (status ", s, "): ", why);
}

void* PluginAllocator::allocate(size_t bytes) {
  void* p = nullptr;
  check_status(dev_, dev_->allocate(index_, bytes, &p), who_, "allocate");
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
  return p;
}

void PluginAllocator::deallocate(void* p, size_t bytes) {
  // Called from destructors: a failure cannot be thrown, and leaks the block at worst.
  if (dev_->free_async(index_, p, static_cast<unillm_stream>(stream_)) == UNILLM_OK) in_use_ -= bytes;
}

const unillm_collectives_v1* usable_collectives(const unillm_plugin& plugin, std::string* why) {
  why->clear();
  // A 1.0 plugin never wrote the field; the host zeroed it.
  const unillm_collectives_v1* c = plugin.collectives;
  if (!c) return nullptr;
  if (c->size < sizeof(unillm_collectives_v1)) {
    *why = UNILLM_MSG("its collectives table has size ", c->size, ", expected at least ", sizeof(unillm_collectives_v1));
  } else if (c->unique_id_size == 0 || c->unique_id_size > UNILLM_UNIQUE_ID_MAX) {
    *why = UNILLM_MSG("its collectives' unique_id_size is ", c->unique_id_size, ", expected 1..", UNILLM_UNIQUE_ID_MAX);
  } else if (!c->get_unique_id || !c->comm_init || !c->comm_destroy || !c->allreduce || !c->reduce_scatter ||
             !c->allgather || !c->broadcast || !c->send || !c->recv) {
    *why = "its collectives table has a NULL function";
  }
  return why->empty() ? c : nullptr;
}

PluginBackend::PluginBackend(DeviceKind kind, const unillm_plugin& plugin, std::string file)
    : kind_(kind), name_(plugin.name), file_(std::move(file)), dev_(plugin.device) {
  std::string ignored;  // the loader reports the reason
  collectives_ = usable_collectives(plugin, &ignored);
  int32_t n = 0;
  check(dev_->device_count(&n), "device_count");
  for (int32_t i = 0; i < n; ++i) {
    PerDevice d;
    check(dev_->stream_create(i, &d.stream), "stream_create");
    d.allocator = std::make_unique<PluginAllocator>(dev_, i, d.stream, name_ + ":" + std::to_string(i));
    devices_.push_back(std::move(d));
  }
}

PluginBackend::~PluginBackend() {
  for (size_t i = 0; i < devices_.size(); ++i) {
    dev_->stream_synchronize(static_cast<int32_t>(i), devices_[i].stream);
    dev_->stream_destroy(static_cast<int32_t>(i), devices_[i].stream);
  }
}

void PluginBackend::check(unillm_status s, const char* what) const { check_status(dev_, s, name_, what); }

DeviceProperties PluginBackend::properties(int index) const {
  unillm_device_properties p;
  std::memset(&p, 0, sizeof p);
  p.size = sizeof p;
  check(dev_->device_properties(index, &p), "device_properties");
  DeviceProperties out;
  out.name = std::string(p.name, strnlen(p.name, sizeof p.name));
  out.total_memory = p.total_memory;
  for (int code = 0; code < 64; ++code)
    if (p.dtype_mask >> code & 1u) {
      DType t;
      out.dtypes.push_back(dtype_from_code(code, &t) ? dtype_name(t) : "code " + std::to_string(code));
    }
  return out;
}

void PluginBackend::copy_to_device(void* dst, int index, const void* src, size_t bytes) {
  check(dev_->copy_h2d(index, dst, src, bytes, devices_.at(index).stream), "copy_h2d");
}

void PluginBackend::copy_to_host(void* dst, const void* src, int index, size_t bytes) {
  check(dev_->copy_d2h(index, dst, src, bytes, devices_.at(index).stream), "copy_d2h");
  synchronize(index);  // the host reads dst next
}

void PluginBackend::copy_on_device(void* dst, const void* src, int index, size_t bytes) {
  check(dev_->copy_d2d(index, dst, src, bytes, devices_.at(index).stream), "copy_d2d");
}

void PluginBackend::memset(void* dst, int value, size_t bytes, int index) {
  check(dev_->memset_async(index, dst, value, bytes, devices_.at(index).stream), "memset");
}

std::string PluginBackend::last_error() const {
  const char* m = dev_->last_error ? dev_->last_error() : nullptr;
  return m ? m : "";
}

void PluginBackend::synchronize(int index) {
  check(dev_->stream_synchronize(index, devices_.at(index).stream), "stream_synchronize");
}

}  // namespace unillm::plugin
