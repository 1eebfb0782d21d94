// STREAM-style memory bandwidth (copy, scale, add, triad) with OpenMP over arrays of ≥ 256 MB each:
// the ceiling for decode, which reads every weight once per token. A plain program (no Google
// Benchmark) so bench/decode_bench.py can run it beside the model timings.
//   stream_bench [--threads=N] [--mb=M]   prints one line per kernel: "<name> <GB/s> GB/s".
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

struct Arrays {
  double* a;
  double* b;
  double* c;
  long n;
};

// Bytes moved per call, counted as STREAM does (reads + writes, no write-allocate traffic).
template <typename F>
double best_gbs(const char* name, double bytes, F&& kernel) {
  double best = 0;
  for (int rep = 0; rep < 8; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    kernel();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::max(best, bytes / s / 1e9);  // rep 0 warms up
  }
  std::printf("%-6s %8.2f GB/s\n", name, best);
  return best;
}

void run(const Arrays& x) {
  double *a = x.a, *b = x.b, *c = x.c;
  const long n = x.n;
  const double s = 3.0, word = sizeof(double);
  best_gbs("copy", 2 * word * n, [&] {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) c[i] = a[i];
  });
  best_gbs("scale", 2 * word * n, [&] {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) b[i] = s * c[i];
  });
  best_gbs("add", 3 * word * n, [&] {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) c[i] = a[i] + b[i];
  });
  best_gbs("triad", 3 * word * n, [&] {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
  });
  // Read-only sum: the access pattern of a GEMV over weights (no stores). Eight partial sums so
  // the add latency does not bound it.
  double sum = 0;
  best_gbs("read", word * n, [&] {
    double acc = 0;
#pragma omp parallel for schedule(static) reduction(+ : acc)
    for (long i = 0; i < n; i += 8) {
      double p[8];
      for (int j = 0; j < 8; ++j) p[j] = a[i + j];
      acc += ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
    }
    sum += acc;
  });
  if (sum == 42.0) std::printf("(unlikely)\n");  // keeps the read loop alive
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0;
  long mb = 256;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) threads = std::atoi(argv[i] + 10);
    else if (std::strncmp(argv[i], "--mb=", 5) == 0) mb = std::atol(argv[i] + 5);
    else {
      std::fprintf(stderr, "usage: stream_bench [--threads=N] [--mb=M]\n");
      return 2;
    }
  }
  if (threads > 0) omp_set_num_threads(threads);
  const long n = mb * (1L << 20) / static_cast<long>(sizeof(double));
  std::vector<double*> mem;
  for (int k = 0; k < 3; ++k) mem.push_back(static_cast<double*>(std::aligned_alloc(64, n * sizeof(double))));
  // First touch in the same static split as the kernels.
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i) mem[0][i] = 1.0, mem[1][i] = 2.0, mem[2][i] = 0.0;
  std::printf("stream: %d threads, 3 arrays of %ld MB\n", omp_get_max_threads(), mb);
  run({mem[0], mem[1], mem[2], n});
  for (double* p : mem) std::free(p);
  return 0;
}
