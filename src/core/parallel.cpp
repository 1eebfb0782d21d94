// OpenMP thread settings and affinity.
#include "core/parallel.h"

#include <omp.h>
#include <sched.h>

namespace unillm {

int num_threads() {
  if (const detail::Team* team = detail::active_team()) return team->size();
  return omp_get_max_threads();
}

void set_omp_threads(int n) { omp_set_num_threads(n > 0 ? n : affinity_cores()); }

int affinity_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

// Inside run_with_team, the thread running fn is in a parallel region but not inside a job.
bool in_parallel_region() {
  if (const detail::Team* team = detail::active_team()) return team->in_job();
  return omp_in_parallel() != 0;
}
int thread_index() { return omp_get_thread_num(); }

}  // namespace unillm
