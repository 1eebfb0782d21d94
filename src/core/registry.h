// The kernel registry keyed by (op, device, dtype). Each op declares one typed kernel signature,
// e.g. `using RmsNormKernel = void(const RmsNormArgs&)`; backends add function pointers of that
// type with an explicit register call (no static initialisers). Lookups check the type.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <typeindex>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

namespace unillm {

// A kernel's key. The variant ("" by default) tells apart kernels of one op for one device and
// dtype, e.g. ISA levels; lookups without a variant get the default one.
struct KernelKey {
  std::string op;
  DeviceKind device;
  DType dtype;
  std::string variant;
  // Integers first (most compares end there), then one string compare of the op: lookups run on
  // every op call.
  bool operator<(const KernelKey& o) const {
    if (device.id != o.device.id) return device.id < o.device.id;
    if (dtype != o.dtype) return dtype < o.dtype;
    if (const int c = op.compare(o.op)) return c < 0;
    return variant < o.variant;
  }
};

class KernelRegistry {
 public:
  // impl names the implementation for `unillm env --kernels` (the CPU's ISA level: "avx2",
  // "portable"); "" prints nothing.
  template <typename Fn>
  void add(const std::string& op, DeviceKind device, DType dtype, Fn* fn,
           const std::string& variant = "", const std::string& impl = "") {
    table_.insert_or_assign(KernelKey{op, device, dtype, variant},
                            Entry{reinterpret_cast<void (*)()>(fn), typeid(Fn), impl});
  }
  // The kernel or nullptr; throws if registered with another signature (a programming error).
  template <typename Fn>
  Fn* find(const std::string& op, DeviceKind device, DType dtype,
           const std::string& variant = "") const {
    auto it = table_.find(KernelKey{op, device, dtype, variant});
    if (it == table_.end()) return nullptr;
    UNILLM_CHECK(it->second.type == std::type_index(typeid(Fn)), "[registry] kernel '", op,
                 "' registered with a different signature");
    return reinterpret_cast<Fn*>(it->second.fn);
  }
  // The kernel when one is registered with exactly this signature, else nullptr (a device kind
  // may hold plugin kernels and native ones under different signatures).
  template <typename Fn>
  Fn* find_exact(const std::string& op, DeviceKind device, DType dtype,
                 const std::string& variant = "") const {
    auto it = table_.find(KernelKey{op, device, dtype, variant});
    if (it == table_.end() || it->second.type != std::type_index(typeid(Fn))) return nullptr;
    return reinterpret_cast<Fn*>(it->second.fn);
  }
  std::vector<KernelKey> keys() const;

  // What an op does on a device that lacks its kernel: run the CPU kernel on host copies,
  // reporting the op once (warn), or refuse (error). The CLI sets it from --device-fallback.
  enum class Fallback { warn, error };
  void set_fallback(Fallback policy, std::function<void(const std::string&)> report) {
    fallback_ = policy;
    report_ = std::move(report);
  }
  Fallback fallback() const { return fallback_; }
  // Reports op (once per op and device kind) through the reporter set by set_fallback.
  void report_fallback(const std::string& op, DeviceKind device);
  // A printable op × (device, dtype) table for `unillm env`: "cpu/f32:avx2" where an entry names
  // its implementation.
  std::string coverage_table() const;

 private:
  struct Entry {
    void (*fn)();
    std::type_index type;
    std::string impl;
  };
  std::map<KernelKey, Entry> table_;
  Fallback fallback_ = Fallback::warn;
  std::function<void(const std::string&)> report_;
  std::set<std::pair<std::string, uint16_t>> reported_;
};

// The process-wide registry (one of the two tolerated globals, with the logger).
KernelRegistry& kernel_registry();

}  // namespace unillm
