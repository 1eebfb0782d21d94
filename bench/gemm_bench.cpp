// ops::linear throughput: f32 GEMM at 1024³ and 2048³ (GFLOP/s and the fraction of a measured FMA
// peak), and decode GEMV (M = 1) in GB/s of weights for f32 and bf16, with OpenBLAS sgemv as the
// peer in the same run.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/register.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "ops/linear.h"

namespace {

using unillm::DType;
using unillm::Tensor;

double g_peak_flops = 0;  // measured once in main()

Tensor random_tensor(const unillm::Shape& shape, DType dtype, uint64_t seed) {
  unillm::Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(unillm::shape_numel(shape)));
  for (auto& e : v) e = static_cast<float>(rng.normal() * 0.1);
  return Tensor::from_vector(v, shape, dtype);
}

// 10 independent 8-wide FMA chains per thread (enough to cover latency × ports); flops per call.
__attribute__((target("avx2,fma"))) double fma_chains(int64_t iters) {
  __m256 a[10];
#pragma GCC unroll 10
  for (int i = 0; i < 10; ++i) a[i] = _mm256_set1_ps(1.0f + i * 1e-3f);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it)
#pragma GCC unroll 10
    for (int i = 0; i < 10; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
  __m256 s = a[0];
  for (int i = 1; i < 10; ++i) s = _mm256_add_ps(s, a[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  benchmark::DoNotOptimize(out);
  return static_cast<double>(iters) * 10 * 8 * 2;
}

double measure_peak_flops() {
  const int64_t iters = 20'000'000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    double flops = 0;
#pragma omp parallel reduction(+ : flops)
    flops += fma_chains(iters);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flops / s);
  }
  return best;
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
  Tensor x = random_tensor({n, n}, DType::f32, 1), w = random_tensor({n, n}, DType::f32, 2);
  for (auto _ : state) benchmark::DoNotOptimize(unillm::ops::linear(x, w).raw_data());
  const double flops = 2.0 * n * n * n;
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["of_peak"] = benchmark::Counter(flops / g_peak_flops, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_GemvLinear(benchmark::State& state, DType wt) {
  const int64_t n = state.range(0), k = state.range(1);
  Tensor x = random_tensor({1, k}, DType::f32, 3), w = random_tensor({n, k}, wt, 4);
  for (auto _ : state) benchmark::DoNotOptimize(unillm::ops::linear(x, w).raw_data());
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.nbytes()) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

void BM_GemvOpenBlasF32(benchmark::State& state) {  // the peer: OpenBLAS sgemv on the same shape
  const int64_t n = state.range(0), k = state.range(1);
  Tensor x = random_tensor({k}, DType::f32, 3), w = random_tensor({n, k}, DType::f32, 4);
  Tensor y = Tensor::empty({n}, DType::f32);
  for (auto _ : state)
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, w.data<float>(), k, x.data<float>(), 1,
                0.0f, y.data<float>(), 1);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.nbytes()) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_FmaPeak)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LinearF32)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvLinear, f32, DType::f32)->Args({768, 768})->Args({32000, 768})->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvLinear, bf16, DType::bf16)->Args({768, 768})->Args({32000, 768})->UseRealTime();
BENCHMARK(BM_GemvOpenBlasF32)->Args({768, 768})->Args({32000, 768})->UseRealTime();

}  // namespace

// Extra flag: --threads=N (default: the affinity cores), parsed before Google Benchmark's flags.
int main(int argc, char** argv) {
  int threads = 0;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      threads = std::atoi(argv[i] + 10);
      for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
      --argc;
      break;
    }
  unillm::cpu::register_cpu_backend();
  unillm::cpu::set_num_threads(threads);
  g_peak_flops = measure_peak_flops();
  std::printf("measured FMA peak: %.1f GFLOP/s on %d threads (of_peak = GEMM / this)\n",
              g_peak_flops / 1e9, unillm::num_threads());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
