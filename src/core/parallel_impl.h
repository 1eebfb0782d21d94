// Template body of parallel_for (kept apart so parallel.h reads as a contract).
#pragma once

#include <algorithm>

namespace unillm {

template <typename Fn>
void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  int nt = num_threads();
  if (nt <= 1 || n < 2 * std::max<int64_t>(grain, 1) || in_parallel_region()) {
    fn(int64_t{0}, n);
    return;
  }
  int64_t chunks = std::min<int64_t>(nt, (n + grain - 1) / std::max<int64_t>(grain, 1));
#pragma omp parallel for schedule(static, 1) num_threads(static_cast<int>(chunks))
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t b = n * c / chunks, e = n * (c + 1) / chunks;
    if (b < e) fn(b, e);
  }
}

}  // namespace unillm
