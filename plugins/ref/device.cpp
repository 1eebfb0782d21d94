// The reference device's C functions (unillm_device_interface) and unillm_plugin_init.
#include "device.h"

#include <cstddef>
#include <cstring>
#include <mutex>

#ifndef UNILLM_REF_NAME
#define UNILLM_REF_NAME "ref"  // a test build names its copy otherwise
#endif
// A test build (ref_v0) stands for a plugin of ABI 1.0: it reports minor 0 and has no collectives.
#ifdef UNILLM_REF_ABI_1_0
#define REF_ABI_MINOR 0
#else
#define REF_ABI_MINOR UNILLM_PLUGIN_ABI_MINOR
#endif

namespace unillm_ref {

namespace {

thread_local std::string last_error_text;

// Never destroyed: at exit a stream may still run queued work on a device's memory, and the order
// of static destructors across the host and the plugin is not ours to choose.
std::vector<std::unique_ptr<RefDevice>>& devices() {
  static auto* d = new std::vector<std::unique_ptr<RefDevice>>();
  return *d;
}

bool bad_index(int32_t i) { return i < 0 || i >= static_cast<int32_t>(devices().size()); }

#define REF_CHECK_DEVICE(i) \
  if (bad_index(i)) return fail(UNILLM_ERROR_INVALID_ARGUMENT, "no reference device " + std::to_string(i))

unillm_status device_count(int32_t* count) {
  *count = static_cast<int32_t>(devices().size());
  return UNILLM_OK;
}

unillm_status device_properties(int32_t i, unillm_device_properties* out) {
  REF_CHECK_DEVICE(i);
  std::snprintf(out->name, sizeof out->name, "unillm reference device %d (guarded host memory)", i);
  out->total_memory = device(i).pool.capacity();
  out->dtype_mask = (1u << UNILLM_DTYPE_F32) | (1u << UNILLM_DTYPE_F64) | (1u << UNILLM_DTYPE_BF16) |
                    (1u << UNILLM_DTYPE_F16) | (1u << UNILLM_DTYPE_I32) | (1u << UNILLM_DTYPE_I64);
  return UNILLM_OK;
}

unillm_status allocate(int32_t i, size_t bytes, void** out) {
  REF_CHECK_DEVICE(i);
  *out = device(i).pool.allocate(bytes);
  if (!*out)
    return fail(UNILLM_ERROR_OUT_OF_MEMORY, "no free block of " + std::to_string(bytes) + " bytes");
  return UNILLM_OK;
}

unillm_status free_async(int32_t i, void* p, unillm_stream s) {
  REF_CHECK_DEVICE(i);
  if (!p) return UNILLM_OK;
  RefDevice* d = &device(i);
  // Stream-ordered: the block is released once the work queued before it has run.
  stream_of(s).queue.enqueue([d, p] {
    return d->pool.release(p) ? std::string() : std::string("free of a pointer that is not a block");
  }, /*always=*/true);
  return UNILLM_OK;
}

// The plugin-side address of a device range, checked at the call (not in the worker).
char* checked_view(int32_t i, const void* p, size_t bytes) { return device(i).pool.view(p, bytes); }

unillm_status copy_h2d(int32_t i, void* dst, const void* src, size_t bytes, unillm_stream s) {
  REF_CHECK_DEVICE(i);
  char* to = checked_view(i, dst, bytes);
  if (!to) return fail(UNILLM_ERROR_INVALID_ARGUMENT, "copy_h2d: destination is not device memory");
  // src is read now (the caller may reuse it when this returns); the write is queued.
  auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                    static_cast<const char*>(src) + bytes);
  stream_of(s).queue.enqueue([to, staged] {
    std::memcpy(to, staged->data(), staged->size());
    return std::string();
  });
  return UNILLM_OK;
}

unillm_status copy_d2h(int32_t i, void* dst, const void* src, size_t bytes, unillm_stream s) {
  REF_CHECK_DEVICE(i);
  const char* from = checked_view(i, src, bytes);
  if (!from) return fail(UNILLM_ERROR_INVALID_ARGUMENT, "copy_d2h: source is not device memory");
  stream_of(s).queue.enqueue([dst, from, bytes] {
    std::memcpy(dst, from, bytes);
    return std::string();
  });
  return UNILLM_OK;
}

unillm_status copy_d2d(int32_t i, void* dst, const void* src, size_t bytes, unillm_stream s) {
  REF_CHECK_DEVICE(i);
  char* to = checked_view(i, dst, bytes);
  const char* from = checked_view(i, src, bytes);
  if (!to || !from) return fail(UNILLM_ERROR_INVALID_ARGUMENT, "copy_d2d: a side is not device memory");
  stream_of(s).queue.enqueue([to, from, bytes] {
    std::memmove(to, from, bytes);
    return std::string();
  });
  return UNILLM_OK;
}

unillm_status memset_async(int32_t i, void* dst, int32_t value, size_t bytes, unillm_stream s) {
  REF_CHECK_DEVICE(i);
  char* to = checked_view(i, dst, bytes);
  if (!to) return fail(UNILLM_ERROR_INVALID_ARGUMENT, "memset: destination is not device memory");
  stream_of(s).queue.enqueue([to, value, bytes] {
    std::memset(to, value, bytes);
    return std::string();
  });
  return UNILLM_OK;
}

unillm_status stream_create(int32_t i, unillm_stream* out) {
  REF_CHECK_DEVICE(i);
  *out = reinterpret_cast<unillm_stream>(new RefStream(device(i)));
  return UNILLM_OK;
}

unillm_status stream_destroy(int32_t, unillm_stream s) {
  delete &stream_of(s);
  return UNILLM_OK;
}

unillm_status stream_synchronize(int32_t, unillm_stream s) {
  const std::string e = stream_of(s).queue.synchronize();
  return e.empty() ? UNILLM_OK : fail(UNILLM_ERROR, e);
}

Event& event_of(unillm_event e) { return *reinterpret_cast<Event*>(e); }

unillm_status event_create(int32_t, unillm_event* out) {
  *out = reinterpret_cast<unillm_event>(new Event());
  return UNILLM_OK;
}
unillm_status event_destroy(int32_t, unillm_event e) {
  delete &event_of(e);
  return UNILLM_OK;
}
unillm_status event_record(int32_t, unillm_event e, unillm_stream s) {
  event_of(e).record(stream_of(s).queue);
  return UNILLM_OK;
}
unillm_status stream_wait_event(int32_t, unillm_stream s, unillm_event e) {
  event_of(e).wait_on(stream_of(s).queue);
  return UNILLM_OK;
}
unillm_status event_synchronize(int32_t, unillm_event e) {
  event_of(e).synchronize();
  return UNILLM_OK;
}

const char* last_error() { return last_error_text.c_str(); }

const unillm_device_interface kInterface = {
    sizeof(unillm_device_interface), device_count, device_properties, allocate, free_async,
    copy_h2d, copy_d2h, copy_d2d, memset_async, stream_create, stream_destroy, stream_synchronize,
    event_create, event_destroy, event_record, stream_wait_event, event_synchronize, last_error};

}  // namespace

RefDevice& device(int index) { return *devices()[static_cast<size_t>(index)]; }

unillm_status fail(unillm_status status, const std::string& message) {
  last_error_text = message;
  return status;
}

}  // namespace unillm_ref

extern "C" __attribute__((visibility("default"))) unillm_status unillm_plugin_init(
    uint32_t host_major, uint32_t host_minor, unillm_plugin* out) {
  using namespace unillm_ref;
  (void)host_minor;
  if (host_major != UNILLM_PLUGIN_ABI_MAJOR) {
    std::snprintf(out->error, sizeof out->error, "the reference plugin takes ABI %d.x, the host is %u.x",
                  UNILLM_PLUGIN_ABI_MAJOR, host_major);
    return UNILLM_ERROR_UNSUPPORTED;
  }
  try {
    static std::once_flag once;
    std::call_once(once, [] {
      for (int i = 0; i < kDevices; ++i) devices().push_back(std::make_unique<RefDevice>(kDeviceMemory));
    });
  } catch (const std::exception& e) {
    std::snprintf(out->error, sizeof out->error, "cannot reserve device memory: %s", e.what());
    return UNILLM_ERROR;
  }
  out->abi_major = UNILLM_PLUGIN_ABI_MAJOR;
  out->abi_minor = REF_ABI_MINOR;
  out->name = UNILLM_REF_NAME;
  out->device = &kInterface;
  out->kernels = kernel_table().data();
  out->num_kernels = kernel_table().size();
  // A 1.0 host's struct ends before the collectives pointer: writing it would overrun the host.
  const bool host_has_collectives = out->size >= offsetof(unillm_plugin, collectives) + sizeof out->collectives;
  if (REF_ABI_MINOR >= 1 && host_has_collectives) out->collectives = collectives_table();
  return UNILLM_OK;
}
