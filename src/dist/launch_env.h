// Where this process sits in a parallel run, read from the launcher's environment: Open MPI's
// OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} (mpirun, `unillm launch`). torchrun's
// RANK/WORLD_SIZE without them is refused by name: unillm's processes come from MPI.
#pragma once

#include <functional>
#include <string>

namespace unillm::dist {

struct LaunchEnv {
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  bool under_mpi = false;  // started by mpirun (or a world of one without it)
};

using GetEnv = std::function<const char*(const char*)>;

// Throws ConfigError for torchrun's variables without Open MPI's, and for values that are not
// integers in range (naming the variable).
LaunchEnv read_launch_env(const GetEnv& getenv);
LaunchEnv read_launch_env();  // the process's environment

// The device index of this rank on its host: local_rank into UNILLM_VISIBLE_DEVICES (else
// ASCEND_RT_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES) when set — a comma-separated list of
// indices — else local_rank itself. ConfigError when the list is shorter than the host's ranks or
// holds a non-integer (naming the variable).
int local_device_index(const LaunchEnv& env, const GetEnv& getenv);

}  // namespace unillm::dist
