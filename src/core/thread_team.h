// A held OpenMP team for runs of short parallel_for calls (decoding one token: ~5 calls per
// decoder layer, each a few tens of microseconds).
//
// With passive OpenMP waiting (what the CLI sets, so that a busy machine does not collapse),
// every parallel region wakes its threads from a futex sleep; on this VM that costs ~80 µs a
// region, 20 % of a stories110M decode step. run_with_team(fn) opens one parallel region for
// the whole of fn: fn runs on the calling thread, and each parallel_for it makes hands its chunks
// to the team's other threads, which wait between calls by spinning briefly and then yielding
// the CPU (sched_yield) instead of sleeping, so a competing process still gets the core.
// Chunks are the same as parallel_for's, so results are bit-identical with or without a team.
#pragma once

#include <functional>

namespace unillm {

// Runs fn with a held team (inline when there is one thread or when already in a parallel
// region). Exceptions from fn propagate. BLAS calls made inside fn run single-threaded
// (OpenBLAS sees a parallel region): use it for GEMV-sized work only.
void run_with_team(const std::function<void()>& fn);

}  // namespace unillm
