// Loads device plugins (shared libraries exporting unillm_plugin_init) and registers each one's
// device kind, backend and kernels. The CLI passes UNILLM_PLUGIN_PATH; nothing here reads the
// environment.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include "unillm/device_plugin.h"

namespace unillm::plugin {

struct LoadReport {
  std::vector<std::string> loaded;    // "ref (…/libunillm_ref.so, ABI 1.1, 2 devices, 31 kernels, collectives)"
  std::vector<std::string> failures;  // one line each, naming the file and the reason
};

// search_path: ':'-separated entries, each a plugin file or a directory whose lib*.so files are
// tried in name order. A file that cannot be loaded (not a shared library, no
// unillm_plugin_init, another ABI major, a failed init, a kind name already taken) is reported
// in failures and skipped; nothing throws for it.
LoadReport load_plugins(const std::string& search_path);

// The kernel type of a plugin kernel in the registry (op, plugin kind, dtype, variant).
using PluginKernelFn = std::remove_pointer_t<unillm_kernel_fn>;

}  // namespace unillm::plugin
