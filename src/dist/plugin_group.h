// ProcessGroup over a device plugin's collectives (unillm_collectives_v1, ABI 1.1; docs/devices.md
// "Collectives"): tensors on the group's device go through the plugin's communicator, queued on
// the device's stream; everything else — host tensors (a step's loss, token counts, gathered
// strings) and tensors of another device — goes through the MPI group of the same processes, which
// also carries the communicator's unique id and the barrier.
#pragma once

#include <memory>
#include <string>

#include "dist/mpi_group.h"
#include "dist/process_group.h"
#include "unillm/device_plugin.h"

namespace unillm::dist {

// What the cli takes from a loaded plugin (backends/plugin's PluginBackend; dist does not link it).
struct PluginCollectives {
  std::string name;  // the plugin's device kind ("ref"), for messages
  const unillm_device_interface* device = nullptr;
  const unillm_collectives_v1* table = nullptr;  // complete (the loader checked it)
};

struct PluginGroupOptions {
  Device device;  // this process's plugin device; its default stream carries the collectives
  // Every wait on a device collective must end within this many seconds (watchdog.h), as the MPI
  // group's waits must; <= 0: no deadline. Only armed in a group of more than one process.
  double timeout_s = kDefaultDistTimeoutS;
};

// Collective over `host` (every rank calls it): rank 0 makes the unique id, `host` broadcasts
// it, every rank joins the plugin's communicator. When any rank cannot join (e.g. the plugin's
// comm_init says UNSUPPORTED), every rank throws the same DeviceError naming the plugin, the
// rank and its message, so the caller may fall back to `host` on all of them alike. `host` must
// outlive the group. Sub-groups (split) split `host` and join a communicator of their own.
// Send and recv on device tensors pair in issue order per peer: the ABI has no tags, so `tag`
// only names the operation in messages (as with NCCL).
std::unique_ptr<ProcessGroup> make_plugin_group(ProcessGroup& host,
                                                const PluginCollectives& collectives,
                                                const PluginGroupOptions& options);

}  // namespace unillm::dist
