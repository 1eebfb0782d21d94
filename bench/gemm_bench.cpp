// ops::linear throughput: f32 GEMM at 1024³ and 2048³ (GFLOP/s and % of the measured FMA peak of
// all threads, one pinned per core), and decode GEMV (M = 1) in GB/s of weights for f32 and bf16,
// with OpenBLAS sgemv as the peer in the same run.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu/register.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "ops/cross_entropy.h"
#include "ops/linear.h"
#include "bench_common.h"

namespace {

using unillm::DType;
using unillm::Tensor;

double g_peak_flops = 0;  // measured once in main()

// FMA peak: kChains independent 8-wide FMA chains per thread. Zen 3 has 2 FMA pipes with 4-cycle
// latency, so ≥ 8 chains keep both busy; 12 leave margin and still fit the 16 ymm registers.
constexpr int kChains = 12;

__attribute__((target("avx2,fma"))) double fma_chains(int64_t iters) {
  __m256 a[kChains];
#pragma GCC unroll 12
  for (int i = 0; i < kChains; ++i) a[i] = _mm256_set1_ps(1.0f + i * 1e-3f);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
    // Keeps every chain in a register and stops the compiler from shortening the loop.
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) asm volatile("" : "+x"(a[i]));
  }
  // Unrolled too: a rolled loop here made GCC keep a[] on the stack and store all chains every
  // trip (11 ymm stores per 12 FMAs, store-port bound at ~10 flop/cycle instead of 32).
  __m256 s = a[0];
#pragma GCC unroll 12
  for (int i = 1; i < kChains; ++i) s = _mm256_add_ps(s, a[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  benchmark::DoNotOptimize(out);
  return static_cast<double>(iters) * kChains * 8 * 2;
}

// Core clock estimate: 8 dependent 1-cycle integer adds per loop trip (the loop counter runs in
// parallel), so trips × 8 / seconds ≈ Hz.
double measure_ghz() {
  const int64_t trips = 25'000'000;
  double best = 0;
  for (int rep = 0; rep < 10; ++rep) {
    uint64_t x = 0;
    int64_t n = trips;
    auto t0 = std::chrono::steady_clock::now();
    asm volatile(
        "1:\n\t"
        "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
        "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
        "dec %1\n\tjnz 1b"
        : "+r"(x), "+r"(n));
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, trips * 8.0 / s / 1e9);
  }
  return best;
}

// Pins OpenMP thread t to the t-th CPU of the process's affinity mask: one thread per core.
void pin_threads() {
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) cpus.push_back(c);
#pragma omp parallel
  {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[omp_get_thread_num() % cpus.size()], &one);
    pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
  }
}

struct Peak {
  double total = 0;                 // flop/s of all threads over the wall time
  std::vector<double> per_thread;   // flop/s of each thread over its own time
};

// Best of 10 runs of `threads` threads, each running the FMA chains for ~0.1 s (short runs, so
// the best one likely caught the cores free when other processes share the machine).
Peak measure_peak(int threads) {
  const int64_t iters = 8'000'000;
  Peak best;
  for (int rep = 0; rep < 10; ++rep) {
    std::vector<double> per(threads);
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      auto ts = std::chrono::steady_clock::now();
      double f = fma_chains(iters);
      per[omp_get_thread_num()] =
          f / std::chrono::duration<double>(std::chrono::steady_clock::now() - ts).count();
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double total = threads * static_cast<double>(iters) * kChains * 16 / s;
    if (total > best.total) best = {total, per};
  }
  return best;
}

void print_peak(const char* label, const Peak& p, double ghz) {
  std::printf("FMA peak %-10s total %6.1f GFLOP/s (%.1f flop/cycle at %.2f GHz); per thread:", label,
              p.total / 1e9, p.total / (ghz * 1e9), ghz);
  for (double t : p.per_thread) std::printf(" %.1f", t / 1e9);
  std::printf("\n");
}

void BM_FmaPeak(benchmark::State& state) {
  double flops = 0;
  for (auto _ : state) {
    double f = 0;
#pragma omp parallel reduction(+ : f)
    f += fma_chains(1'000'000);
    flops = f;
  }
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = unillm::num_threads();
}

void BM_LinearF32(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor x = random_tensor({n, n}, 1, 0.1, DType::f32), w = random_tensor({n, n}, 2, 0.1, DType::f32);
  for (auto _ : state) benchmark::DoNotOptimize(unillm::ops::linear(x, w).raw_data());
  const double flops = 2.0 * n * n * n;
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["pct_peak"] =
      benchmark::Counter(100 * flops / g_peak_flops, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_GemvLinear(benchmark::State& state, DType wt) {
  const int64_t n = state.range(0), k = state.range(1);
  Tensor x = random_tensor({1, k}, 3, 0.1, DType::f32), w = random_tensor({n, k}, 4, 0.1, wt);
  for (auto _ : state) benchmark::DoNotOptimize(unillm::ops::linear(x, w).raw_data());
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.nbytes()) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

void BM_GemvOpenBlasF32(benchmark::State& state) {  // the peer: OpenBLAS sgemv on the same shape
  const int64_t n = state.range(0), k = state.range(1);
  Tensor x = random_tensor({k}, 3, 0.1, DType::f32), w = random_tensor({n, k}, 4, 0.1, DType::f32);
  Tensor y = Tensor::empty({n}, DType::f32);
  for (auto _ : state)
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, w.data<float>(), k, x.data<float>(), 1,
                0.0f, y.data<float>(), 1);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.nbytes()) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

// The fused cross-entropy's three GEMMs for one chunk of r labelled rows against the lm_head
// W [V, C] (backends/cpu/kernels/linear_cross_entropy.cpp): logits = x·Wᵀ (K = C), dx = dlogits·W (K = V),
// dW += dlogitsᵀ·x (K = r, all of dW read and written per chunk). Args: {r, V, C, which}.
void BM_CrossEntropyGemm(benchmark::State& state) {
  const int64_t r = state.range(0), v = state.range(1), c = state.range(2), which = state.range(3);
  Tensor x = random_tensor({r, c}, 5, 0.1, DType::f32), w = random_tensor({v, c}, 6, 0.1, DType::f32);
  Tensor l = random_tensor({r, v}, 7, 0.1, DType::f32), dw = random_tensor({v, c}, 8, 0.1, DType::f32);
  Tensor dx = Tensor::empty({r, c}, DType::f32);
  const float *xp = x.data<float>(), *wp = w.data<float>(), *lp = l.data<float>();
  for (auto _ : state) {
    if (which == 0)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r, v, c, 1.0f, xp, c, wp, c, 0.0f,
                  l.data<float>(), v);
    else if (which == 1)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, c, v, 1.0f, lp, v, wp, c, 0.0f,
                  dx.data<float>(), c);
    else if (which == 2)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, v, c, r, 1.0f, lp, v, xp, c, 1.0f,
                  dw.data<float>(), c);
    else if (which == 4)  // logits split over V: each thread a single-threaded sgemm
      unillm::parallel_for(v, 64, [&](int64_t lo, int64_t hi) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r, hi - lo, c, 1.0f, xp, c, wp + lo * c,
                    c, 0.0f, l.data<float>() + lo, v);
      });
    else if (which == 5)  // dW split over V
      unillm::parallel_for(v, 64, [&](int64_t lo, int64_t hi) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, hi - lo, c, r, 1.0f, lp + lo, v, xp, c,
                    1.0f, dw.data<float>() + lo * c, c);
      });
    else {  // dx split over K (the vocabulary): each thread a single-threaded sgemm, then a sum
      const int nt = unillm::num_threads();
      std::vector<float> part(static_cast<size_t>(nt) * r * c);
      unillm::parallel_for(nt, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t t = lo; t < hi; ++t) {
          const int64_t k0 = v * t / nt, k1 = v * (t + 1) / nt;
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, c, k1 - k0, 1.0f, lp + k0, v,
                      wp + k0 * c, c, 0.0f, part.data() + t * r * c, c);
        }
      });
      float* d = dx.data<float>();
      for (int64_t i = 0; i < r * c; ++i) {
        float acc = 0;
        for (int t = 0; t < nt; ++t) acc += part[t * r * c + i];
        d[i] = acc;
      }
    }
  }
  const double flops = 2.0 * r * v * c;
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["pct_peak"] =
      benchmark::Counter(100 * flops / g_peak_flops, benchmark::Counter::kIsIterationInvariantRate);
}

// A decoder projection's forward y = x·Wᵀ [M, K]·[N, K]ᵀ: OpenBLAS's own threading (which 0) or
// our static split of M with a single-threaded sgemm per thread (which 1). Args: {M, N, K, which}.
void BM_ProjectionSplit(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2), which = state.range(3);
  Tensor x = random_tensor({m, k}, 5, 0.1, DType::f32), w = random_tensor({n, k}, 6, 0.1, DType::f32);
  Tensor y = Tensor::empty({m, n}, DType::f32);
  const float *xp = x.data<float>(), *wp = w.data<float>();
  float* yp = y.data<float>();
  for (auto _ : state) {
    if (which == 0)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, xp, k, wp, k, 0.0f, yp, n);
    else
      unillm::parallel_for(m, 16, [&](int64_t lo, int64_t hi) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, hi - lo, n, k, 1.0f, xp + lo * k, k, wp,
                    k, 0.0f, yp + lo * n, n);
      });
  }
  const double flops = 2.0 * m * n * k;
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// The whole eager cross-entropy op as training runs it (loss and both gradients in one pass over
// the chunks): stories15M's 8 × 256 scored rows against its lm_head, trainable f32 (which 0) or
// frozen bf16 (which 1, LoRA with bf16: no dW). Args: {N, V, C, which}.
void BM_CrossEntropyEager(benchmark::State& state) {
  const int64_t n = state.range(0), v = state.range(1), c = state.range(2), which = state.range(3);
  Tensor x = random_tensor({n, c}, 5, 0.1, DType::f32).set_requires_grad(true);
  Tensor w = random_tensor({v, c}, 6, 0.1, which == 0 ? DType::f32 : DType::bf16);
  if (which == 0) w.set_requires_grad(true);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<int32_t>((i * 7919) % v);
  Tensor lab = Tensor::from_ints(labels, {n});
  for (auto _ : state) {
    auto r = unillm::ops::linear_cross_entropy_eager_grad(x, w, lab, 1.0 / static_cast<double>(n));
    benchmark::DoNotOptimize(r.loss_sum.raw_data());
  }
  const double flops = 2.0 * n * v * c * (which == 0 ? 3 : 2);
  state.counters["pct_peak"] =
      benchmark::Counter(100 * flops / g_peak_flops, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_FmaPeak)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LinearF32)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvLinear, f32, DType::f32)->Args({768, 768})->Args({32000, 768})->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvLinear, bf16, DType::bf16)->Args({768, 768})->Args({32000, 768})->UseRealTime();
BENCHMARK(BM_GemvOpenBlasF32)->Args({768, 768})->Args({32000, 768})->UseRealTime();
// stories15M's fused q/k/v, gate/up and down projections; stories110M's q/k/v and gate/up.
BENCHMARK(BM_ProjectionSplit)
    ->ArgsProduct({{2048}, {864, 1536, 288}, {288}, {0, 1}})
    ->ArgsProduct({{1024}, {2304, 4096}, {768}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// stories15M's lm_head (C = 288) at the default 32 MiB chunk (262 rows), 65, 131 and 524 rows.
BENCHMARK(BM_CrossEntropyGemm)
    ->ArgsProduct({{65, 131, 262, 524}, {32000}, {288}, {0, 1, 2, 3, 4, 5}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_CrossEntropyEager)
    ->ArgsProduct({{2048}, {32000}, {288}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

// Flags: --threads=N (default: the affinity cores), then Google Benchmark's.
int main(int argc, char** argv) {
  start_cpu(argc, argv);
  pin_threads();
  const double ghz = measure_ghz();
  const int n = unillm::num_threads();
  print_peak("1 thread", measure_peak(1), ghz);
  Peak all = measure_peak(n);
  print_peak((std::to_string(n) + " threads").c_str(), all, ghz);
  std::printf("theoretical: 2 FMA pipes x 8 lanes x 2 flop = 32 flop/cycle/core = %.1f GFLOP/s on %d "
              "cores at %.2f GHz\n", 32 * ghz * n, n, ghz);
  g_peak_flops = all.total;
  std::printf("pct_peak = 100 x GEMM GFLOP/s / %.1f (the measured %d-thread FMA peak)\n", g_peak_flops / 1e9, n);
  return run_benchmarks(argc, argv);
}
