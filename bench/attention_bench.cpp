// causal_attention (training) forward and backward at the stories15M training shape B=8, T=256,
// H=6, D=48 (MHA and GQA 3:1, plain causal and packed segments) and the stories110M one B=4,
// H=12, D=64 (MHA), in ms per call and GFLOP/s of useful work (forward 4·B·H·D·T(T+1)/2,
// backward 2.5× that); the paged inference kernel on the 15M problem (one block of T slots per
// sequence) is the peer for the forward. Args of the training benchmarks: {Hkv, packed, B, H, D}.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdlib>

#include "backends/cpu/register.h"
#include "backends/cpu/simd/isa.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "ops/attention.h"
#include "ops/causal_attention.h"
#include "bench_common.h"

namespace {

using unillm::DType;
using unillm::Tensor;

constexpr int64_t kB = 8, kT = 256, kH = 6, kD = 48;

// Packed rows: samples of 100, 60, 1 and the rest of the row.
Tensor packed_segments(int64_t B) {
  std::vector<int32_t> s;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < kT; ++t) s.push_back(t < 100 ? 1 : t < 160 ? 2 : t < 161 ? 3 : 4);
  return Tensor::from_ints(s, {B, kT});
}

void set_counters(benchmark::State& state, int64_t B, int64_t H, int64_t D, double factor) {
  const double flops = 4.0 * B * H * D * kT * (kT + 1) / 2 * factor;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// The training benchmarks' problem: state.range = {Hkv, packed, B, H, D}.
struct Problem {
  int64_t hkv, B, H, D;
  Tensor q, k, v, seg;
  float scale;
  explicit Problem(const benchmark::State& state)
      : hkv(state.range(0)), B(state.range(2)), H(state.range(3)), D(state.range(4)),
        q(random_tensor({B, kT, H, D}, 1)), k(random_tensor({B, kT, hkv, D}, 2)),
        v(random_tensor({B, kT, hkv, D}, 3)), seg(state.range(1) ? packed_segments(B) : Tensor()),
        scale(1.0f / std::sqrt(static_cast<float>(D))) {}
};

void BM_CausalAttentionFwd(benchmark::State& state) {
  Problem p(state);
  for (auto _ : state)
    benchmark::DoNotOptimize(unillm::ops::causal_attention(p.q, p.k, p.v, p.seg, p.scale));
  set_counters(state, p.B, p.H, p.D, 1.0);
}

void BM_CausalAttentionBwd(benchmark::State& state) {
  Problem p(state);
  Tensor go = random_tensor({p.B, kT, p.H, p.D}, 4);
  auto saved = unillm::ops::causal_attention_forward(p.q, p.k, p.v, p.seg, p.scale);
  for (auto _ : state) benchmark::DoNotOptimize(unillm::ops::causal_attention_backward(saved, go));
  set_counters(state, p.B, p.H, p.D, 2.5);
}

// The same causal problem through paged_attention (one block of T slots per sequence).
void BM_PagedAttentionFwdPeer(benchmark::State& state) {
  const int64_t hkv = state.range(0);
  Tensor q = random_tensor({kB * kT, kH, kD}, 1), k = random_tensor({kB, kT, hkv, kD}, 2);
  Tensor v = random_tensor({kB, kT, hkv, kD}, 3);
  std::vector<int32_t> table, starts{0}, lens;
  for (int32_t b = 0; b < kB; ++b) {
    table.push_back(b);
    starts.push_back(static_cast<int32_t>((b + 1) * kT));
    lens.push_back(static_cast<int32_t>(kT));
  }
  unillm::ops::AttentionBatch batch{Tensor::from_ints(table, {kB, 1}),
                                    Tensor::from_ints(starts, {kB + 1}),
                                    Tensor::from_ints(lens, {kB})};
  const float scale = 1.0f / std::sqrt(static_cast<float>(kD));
  for (auto _ : state)
    benchmark::DoNotOptimize(unillm::ops::paged_attention(q, k, v, batch, scale));
  set_counters(state, kB, kH, kD, 1.0);
}

BENCHMARK(BM_CausalAttentionFwd)
    ->Args({6, 0, kB, kH, kD})
    ->Args({2, 0, kB, kH, kD})
    ->Args({6, 1, kB, kH, kD})
    ->Args({12, 0, 4, 12, 64})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_CausalAttentionBwd)
    ->Args({6, 0, kB, kH, kD})
    ->Args({2, 0, kB, kH, kD})
    ->Args({6, 1, kB, kH, kD})
    ->Args({12, 0, 4, 12, 64})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_PagedAttentionFwdPeer)->Arg(6)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// One decode step's attention over stories110M's 12 layers (H = 12, D = 64, blocks of 16): one
// query row per layer against a context of `ctx` cached tokens, each layer its own cache, so
// the step streams the K and V of all layers as a decode step does (12 · 2 · ctx · 768 elements:
// 37.7 MB in f32 at ctx 512, more than this VM's L3). Args {ctx, cache dtype 0 f32 / 1 f16 /
// 2 bf16}; GB/s counts the cache bytes read.
void BM_PagedDecodeStep(benchmark::State& state) {
  constexpr int64_t kLayers = 12, kHeads = 12, kDim = 64, kBs = 16;
  const int64_t ctx = state.range(0), blocks = ctx / kBs;
  const DType dt = state.range(1) == 0 ? DType::f32 : state.range(1) == 1 ? DType::f16 : DType::bf16;
  std::vector<Tensor> ks, vs;
  for (int64_t l = 0; l < kLayers; ++l) {
    ks.push_back(random_tensor({blocks, kBs, kHeads, kDim}, 10 + l, 1.0, dt));
    vs.push_back(random_tensor({blocks, kBs, kHeads, kDim}, 40 + l, 1.0, dt));
  }
  Tensor q = random_tensor({1, kHeads, kDim}, 1);
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int32_t b = 0; b < blocks; ++b) table[static_cast<size_t>(b)] = b;
  unillm::ops::AttentionBatch batch{Tensor::from_ints(table, {1, blocks}), Tensor::from_ints({0, 1}, {2}),
                                    Tensor::from_ints({static_cast<int32_t>(ctx)}, {1})};
  for (auto _ : state)
    for (int64_t l = 0; l < kLayers; ++l)
      benchmark::DoNotOptimize(unillm::ops::paged_attention(q, ks[l], vs[l], batch, 0.125f));
  state.counters["GB/s"] = benchmark::Counter(2.0 * kLayers * ctx * kHeads * kDim * dtype_size(dt) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PagedDecodeStep)->ArgsProduct({{128, 512}, {0, 1, 2}})->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

// Extra flags, parsed before Google Benchmark's: --threads=N (default: the affinity cores) and
// --isa=LEVEL (default auto; e.g. avx2 to time that level's kernels on an AVX-512 CPU).
int main(int argc, char** argv) {
  const char* t = take_flag(argc, argv, "--threads=");
  const char* isa = take_flag(argc, argv, "--isa=");
  unillm::cpu::IsaLevel cap = unillm::cpu::detected_isa();
  if (isa && !unillm::cpu::parse_isa(isa, &cap)) {
    std::fprintf(stderr, "attention_bench: unknown --isa=%s\n", isa);
    return 2;
  }
  unillm::cpu::register_cpu_backend(cap);
  unillm::cpu::set_num_threads(t ? std::atoi(t) : 0);
  std::printf("threads: %d, isa: %s\n", unillm::num_threads(), unillm::cpu::isa_name(unillm::cpu::chosen_isa()));
  return run_benchmarks(argc, argv);
}
