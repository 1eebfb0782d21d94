// CPU causal_attention and causal_attention_backward (training): segment index and tiling
// (declared in attention/attention_train_tile.h), the portable instantiation of the flash-style
// forward/backward loops for f32 and f64, and their registration (the AVX2 f32 instantiation lives
// in causal_attention_avx2.cpp). Forward and backward share this file's vector-ops policy.
#include <unordered_map>

#include "backends/cpu/attention/attention_train_backward.h"
#include "backends/cpu/kernels/causal_attention_avx2.h"
#include "backends/cpu/kernels/causal_attention_avx512.h"
#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/simd/simd.h"
#include "core/registry.h"

namespace unillm::cpu {

SegmentIndex segment_index(const int32_t* seg, int64_t batch, int64_t tokens) {
  SegmentIndex x;
  const size_t n = static_cast<size_t>(batch * tokens);
  x.first.resize(n);
  x.last.resize(n);
  x.run_lo.resize(n);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t base = b * tokens;
    if (!seg) {
      for (int64_t t = 0; t < tokens; ++t) {
        x.first[base + t] = x.run_lo[base + t] = 0;
        x.last[base + t] = static_cast<int32_t>(tokens - 1);
      }
      continue;
    }
    std::unordered_map<int32_t, int32_t> first, last;
    for (int64_t t = 0; t < tokens; ++t) {
      const int32_t id = seg[base + t];
      first.try_emplace(id, static_cast<int32_t>(t));
      last[id] = static_cast<int32_t>(t);
      const bool cont = t > 0 && seg[base + t - 1] == id;
      x.run_lo[base + t] = cont ? x.run_lo[base + t - 1] : static_cast<int32_t>(t);
    }
    for (int64_t t = 0; t < tokens; ++t) {
      x.first[base + t] = first[seg[base + t]];
      x.last[base + t] = last[seg[base + t]];
    }
  }
  return x;
}

std::vector<TrainTile> train_tiles(int64_t batch, int64_t kv_heads, int64_t tokens, int64_t step) {
  std::vector<TrainTile> tiles;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t g = 0; g < kv_heads; ++g)
      for (int64_t r = 0; r < tokens; r += step)
        tiles.push_back({static_cast<int32_t>(b), static_cast<int32_t>(g), static_cast<int32_t>(r),
                         static_cast<int32_t>(std::min(step, tokens - r))});
  return tiles;
}

namespace {

template <typename F>
struct PortableOps {
  static void gemm(const Gemm<F>& g) {
    for (int64_t i = 0; i < g.m; ++i) {
      F* c = g.c + i * g.ldc;
      if (!g.accumulate) std::fill(c, c + g.n, F(0));
      for (int64_t p = 0; p < g.k; ++p) {
        const F a = g.a_trans ? g.a[p * g.lda + i] : g.a[i * g.lda + p];
        const F* b = g.b + p * g.ldb;
        for (int64_t j = 0; j < g.n; ++j) c[j] += a * b[j];
      }
    }
  }
  static F exp_shift(F* s, int64_t n, F m) {
    F sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (s[i] = std::exp(s[i] - m));
    return sum;
  }
  static F max(const F* s, int64_t n) {
    F m = s[0];
    for (int64_t j = 1; j < n; ++j) m = std::max(m, s[j]);
    return m;
  }
  static void scale_to(F* dst, const F* src, F c, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * c;
  }
  static void ds_row(F* ds, const F* p, F dr, int64_t n) {
    for (int64_t j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - dr);
  }
  static void transpose(const F* x, int64_t ldx, int64_t rows, int64_t cols, F* xt, int64_t ldt) {
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t d = 0; d < cols; ++d) xt[d * ldt + t] = x[t * ldx + d];
  }
};

template <typename F>
void forward_portable(const ops::CausalAttentionArgs& a) {
  causal_attention_run<F, PortableOps<F>>(a);
}

template <typename F>
void backward_portable(const ops::CausalAttentionBackwardArgs& a) {
  causal_attention_backward_run<F, PortableOps<F>>(a);
}

}  // namespace

void register_causal_attention() {
  auto& reg = kernel_registry();
  reg.add<ops::CausalAttentionKernel>(
      "causal_attention", DeviceKind::cpu, DType::f32,
      by_level(&forward_portable<float>, &avx2::causal_attention_f32, &avx512::causal_attention_f32),
      "", level_label());
  reg.add<ops::CausalAttentionKernel>("causal_attention", DeviceKind::cpu, DType::f64,
                                      &forward_portable<double>, "", kPortable);
  reg.add<ops::CausalAttentionBackwardKernel>(
      "causal_attention_backward", DeviceKind::cpu, DType::f32,
      by_level(&backward_portable<float>, &avx2::causal_attention_backward_f32,
               &avx512::causal_attention_backward_f32),
      "", level_label());
  reg.add<ops::CausalAttentionBackwardKernel>("causal_attention_backward", DeviceKind::cpu,
                                              DType::f64, &backward_portable<double>, "",
                                              kPortable);
}

}  // namespace unillm::cpu
