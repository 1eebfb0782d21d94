// ops::linear_q (weight-only int8 / int4) at stories110M's shapes: decode GEMV (M = 1) in GB/s of
// weight bytes (codes + scales), with the activations quantised to int8 (the default; int4 codes
// then meet them in VNNI dot products where the CPU has them) or kept f32
// (ops::set_linear_q_int8_activations(false)); and the prefill product (M = 256) in rows/s.
// Profiling aid for the kernels; the peer comparison is decode_bench.py.
#include <benchmark/benchmark.h>

#include <vector>

#include "autograd/grad_mode.h"
#include "core/rng.h"
#include "ops/quant.h"
#include "bench_common.h"

namespace {

using unillm::DType;
using unillm::Tensor;
using unillm::ops::QuantType;
using unillm::ops::QuantizedWeight;

int64_t weight_bytes(const QuantizedWeight& q) {
  return q.data.nbytes() + q.scales.nbytes() + (q.mins.defined() ? q.mins.nbytes() : 0);
}

// Args: {M, N, K, type (0 int8, 1 int4 g32 asymmetric, 2 int4 g32 symmetric), int8 activations}.
void BM_LinearQ(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2), type = state.range(3);
  const QuantizedWeight q = unillm::ops::quantize_weight(random_tensor({n, k}, 1, 0.05),
                                                         type == 0 ? QuantType::int8 : QuantType::int4, 32,
                                                         type != 1, type == 0 ? DType::f32 : DType::f16);
  const Tensor x = random_tensor({m, k}, 2, 1.0);
  unillm::ops::set_linear_q_int8_activations(state.range(4) != 0);
  // Inference runs without grad; under grad mode linear_q keeps exact activations (a QLoRA base
  // trains on the product its backward differentiates), so the int8 path would never be timed.
  unillm::autograd::NoGradGuard no_grad;
  for (auto _ : state) {
    Tensor y = unillm::ops::linear_q(x, q);
    benchmark::DoNotOptimize(y.raw_data());
  }
  unillm::ops::set_linear_q_int8_activations(true);
  if (m == 1)
    state.counters["GB/s"] = benchmark::Counter(static_cast<double>(weight_bytes(q)) / 1e9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  else
    state.counters["rows/s"] = benchmark::Counter(static_cast<double>(m), benchmark::Counter::kIsIterationInvariantRate);
}

// q/k/v fused, gate/up fused, down, the vocabulary head; decode and a 256-token prefill. The
// 128000-row head (Llama 3's vocabulary) streams from DRAM where the smaller shapes stay in cache:
// kernels that win in cache can lose there (bench/quant.md, fourth run).
BENCHMARK(BM_LinearQ)
    ->ArgsProduct({{1}, {2304, 4096}, {768}, {0, 1, 2}, {0, 1}})
    ->ArgsProduct({{1}, {768}, {2048}, {0, 1, 2}, {0, 1}})
    ->ArgsProduct({{1}, {32000, 128000}, {768}, {0, 1}, {0, 1}})
    ->ArgsProduct({{256}, {2304}, {768}, {0, 1, 2}, {0, 1}})
    ->UseRealTime();

}  // namespace

// Flags: --threads=N (default: the affinity cores), then Google Benchmark's.
int main(int argc, char** argv) {
  start_cpu(argc, argv);
  return run_benchmarks(argc, argv);
}
