// Plugins that must be refused cleanly, one shared library per BAD_PLUGIN_KIND:
// 1 another ABI major, 2 a failing initialisation, 3 the kind name of an existing plugin
// ("ref"), 4 no unillm_plugin_init at all.
#include <cstdio>

#include "unillm/device_plugin.h"

#if BAD_PLUGIN_KIND != 4
extern "C" __attribute__((visibility("default"))) unillm_status unillm_plugin_init(
    uint32_t, uint32_t, unillm_plugin* out) {
#if BAD_PLUGIN_KIND == 1
  out->abi_major = UNILLM_PLUGIN_ABI_MAJOR + 1;
  out->abi_minor = 0;
  out->name = "future";
  return UNILLM_OK;
#elif BAD_PLUGIN_KIND == 2
  std::snprintf(out->error, sizeof out->error, "no accelerator found (driver says: error 100)");
  return UNILLM_ERROR;
#else
  static unillm_device_interface dev{};
  dev.size = sizeof dev;
  out->abi_major = UNILLM_PLUGIN_ABI_MAJOR;
  out->name = "ref";
  out->device = &dev;
  return UNILLM_OK;
#endif
}
#else
extern "C" __attribute__((visibility("default"))) int some_other_symbol() { return 0; }
#endif
