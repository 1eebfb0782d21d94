// The one thread runtime: OpenMP. Work is split statically (contiguous equal chunks per thread)
// so a given thread count always gives bit-identical results. BLAS shares this runtime
// (OpenBLAS's OpenMP build); the CLI sets both thread counts through set_num_threads().
#pragma once

#include <cstdint>

namespace unillm {

int num_threads();
void set_omp_threads(int n);
// Cores in this process's affinity mask.
int affinity_cores();

// Calls fn(begin, end) on contiguous chunks of [0, n) across the threads, statically.
// Runs inline when n is below grain or when already inside a parallel region.
template <typename Fn>
void parallel_for(int64_t n, int64_t grain, Fn&& fn);

bool in_parallel_region();
int thread_index();

}  // namespace unillm

#include "core/parallel_impl.h"
