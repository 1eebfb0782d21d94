// Which host each process of a parallel run is on, for layouts that follow the hosts (HF fsdp's
// hybrid_shard: sharding within a host, replication across hosts).
#pragma once

#include "dist/process_group.h"

namespace unillm::dist {

// Collective over `world`: how many processes each host runs, when every host runs the same
// number as consecutive ranks (mpirun's default placement, by slot) — then the mesh's sharding
// groups of that size are the hosts. ConfigError naming the placement otherwise (every rank
// throws the same).
int processes_per_host(ProcessGroup& world);

}  // namespace unillm::dist
