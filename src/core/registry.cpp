// Registry storage and the coverage table.
#include "core/registry.h"

#include <set>
#include <sstream>

namespace unillm {

KernelRegistry& kernel_registry() {
  static KernelRegistry registry;
  return registry;
}

std::vector<KernelKey> KernelRegistry::keys() const {
  std::vector<KernelKey> out;
  for (auto& [k, v] : table_) out.push_back(k);
  return out;
}

void KernelRegistry::report_fallback(const std::string& op, DeviceKind device) {
  if (!reported_.insert({op, device.id}).second || !report_) return;
  report_("[" + op + "] no kernel on " + device_kind_name(device) +
          ": running the CPU kernel on host copies (reported once per op)");
}

std::string KernelRegistry::coverage_table() const {
  std::map<std::string, std::set<std::string>> rows;
  for (auto& [k, v] : table_)
    rows[k.op].insert(device_kind_name(k.device) + "/" + dtype_name(k.dtype) +
                      (k.variant.empty() ? "" : "/" + k.variant) +
                      (v.impl.empty() ? "" : ":" + v.impl));
  std::ostringstream os;
  for (auto& [op, cells] : rows) {
    os << "  " << op << ":";
    for (auto& c : cells) os << " " << c;
    os << "\n";
  }
  return os.str();
}

}  // namespace unillm
