// ProcessGroup over Open MPI on the host. The world group initialises MPI on first use
// (MPI_THREAD_FUNNELED: only the calling thread talks to MPI; OpenMP workers never do) and
// finalises it at exit. Tensors on a device are staged through host copies.
#pragma once

#include <memory>

#include "dist/process_group.h"

namespace unillm::dist {

// MPI_COMM_WORLD as a ProcessGroup. A process not started by mpirun is a world of one.
ProcessGroup& world();

// Whether MPI has been initialised in this process (world() was called).
bool mpi_started();

// Ends every rank of the world with `code` (MPI_Abort) when the world has more than one rank —
// a rank that fails while the others wait in a collective must not leave them hanging — else
// does nothing and returns.
void abort_world(int code);

}  // namespace unillm::dist
