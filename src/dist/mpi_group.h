// ProcessGroup over Open MPI on the host. The world group initialises MPI on first use
// (MPI_THREAD_FUNNELED: only the calling thread talks to MPI; OpenMP workers never do) and
// finalises it at exit. Tensors on a device are staged through host copies.
#pragma once

#include <memory>

#include "dist/process_group.h"

namespace unillm::dist {

// torch's default process-group timeout; `--dist-timeout` / UNILLM_DIST_TIMEOUT change it.
constexpr double kDefaultDistTimeoutS = 1800;

// How the world is set up (the cli fills it from flags and the launcher's environment).
struct WorldOptions {
  // Every blocking operation (a Work's wait, broadcast, send, recv, barrier, split, MPI_Init and
  // MPI_Finalize) must complete within this many seconds, else the process reports the operation
  // and its rank and exits (watchdog.h), which makes mpirun end the job. <= 0: no deadline.
  double timeout_s = kDefaultDistTimeoutS;
  int launch_rank = -1;  // OMPI_COMM_WORLD_RANK, to name the rank while MPI_Init runs
  // Test-only faults (UNILLM_TEST_HANG_RANK / UNILLM_TEST_KILL_RANK=R[:N], read by the cli;
  // tests/cli/launch_test.cpp): world rank hang_rank sleeps for an hour before its first blocking
  // operation; world rank kill_rank SIGKILLs itself on entering its kill_at-th one.
  int hang_rank = -1, kill_rank = -1, kill_at = 1;
};

// MPI_COMM_WORLD as a ProcessGroup, set up with `options` on the first call (later calls return
// the same group; passing options after it exists is a logic error and throws). A process not
// started by mpirun is a world of one (and runs no watchdog thread).
ProcessGroup& init_world(const WorldOptions& options);
ProcessGroup& world();  // init_world({}) on the first call

// Whether MPI has been initialised in this process (world() was called).
bool mpi_started();

// Ends every rank of the world with `code` (MPI_Abort) when the world has more than one rank —
// a rank that fails while the others wait in a collective must not leave them hanging — else
// does nothing and returns.
void abort_world(int code);

}  // namespace unillm::dist
