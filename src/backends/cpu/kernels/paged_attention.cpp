// CPU paged_attention: tiling of the batch (attention_tiles, declared in attention/attention_tile.h)
// and the portable (scalar) instantiation of the shared flash-style loop for f32/f64; the f32 AVX2
// and AVX-512 instantiations live in paged_attention_avx2.cpp and paged_attention_avx512.cpp.
#include <type_traits>

#include "backends/cpu/attention/attention_tile.h"
#include "backends/cpu/kernels/paged_attention_avx2.h"
#include "backends/cpu/kernels/paged_attention_avx512.h"
#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/simd/convert.h"
#include "backends/cpu/simd/simd.h"
#include "core/parallel.h"
#include "core/registry.h"

namespace unillm::cpu {

std::vector<AttnTile> attention_tiles(const ops::AttentionArgs& a, int64_t rows_per_tile) {
  // Enough tiles for every thread, each taking as many adjacent kv heads as that allows.
  const int64_t per_seq = std::max<int64_t>(1, num_threads() / std::max<int64_t>(1, a.num_seqs));
  const int64_t group = a.num_seqs >= 2 * num_threads() ? a.kv_heads : std::max<int64_t>(1, (a.kv_heads + per_seq - 1) / per_seq);
  std::vector<AttnTile> tiles;
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const int64_t q_len = a.q_start[s + 1] - a.q_start[s];
    for (int64_t g = 0; g < a.kv_heads; g += group)
      for (int64_t r = 0; r < q_len; r += rows_per_tile)
        tiles.push_back({static_cast<int32_t>(s), static_cast<int32_t>(g), static_cast<int32_t>(r),
                         static_cast<int32_t>(std::min(rows_per_tile, q_len - r)),
                         static_cast<int32_t>(std::min(group, a.kv_heads - g))});
  }
  return tiles;
}

namespace {

template <typename T>
struct ScalarOps {
  template <typename C>
  static T dot(const T* a, const C* b, int64_t n) {
    T s = 0;
    for (int64_t i = 0; i < n; ++i) s += a[i] * static_cast<T>(cache_to_f32(b[i]));
    return s;
  }
  template <typename C>
  static void axpy(T* acc, T p, const C* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) acc[i] += p * static_cast<T>(cache_to_f32(x[i]));
  }
  static void scale(T* acc, T c, int64_t n) {
    for (int64_t i = 0; i < n; ++i) acc[i] *= c;
  }
  static T exp_shift(T* s, int64_t n, T m) {
    T sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (s[i] = std::exp(s[i] - m));
    return sum;
  }
};

template <typename T>
void attention_portable(const ops::AttentionArgs& a) {
  if constexpr (std::is_same_v<T, float>) {
    attention_run_f32<ScalarOps<float>>(a);
  } else {
    attention_run<T, ScalarOps<T>>(a);
  }
}

// A 16-bit cache takes f32 rows through the vectorised conversion (the reference converts one
// element at a time through load/store_scalar: 2 % of a stories110M decode step with an f16 cache).
void kv_cache_write_16(const ops::KvCacheWriteArgs& a) {
  if (a.kv_dtype != DType::f32) return ops::kv_cache_write_reference(a);
  const auto* src = static_cast<const float*>(a.kv);
  auto* dst = static_cast<uint16_t*>(a.cache);
  for (int64_t i = 0; i < a.n; ++i)
    if (a.slots[i] >= 0) from_f32(src + i * a.row, a.dtype, dst + a.slots[i] * a.row, a.row);
}

}  // namespace

void register_paged_attention() {
  auto& reg = kernel_registry();
  reg.add<ops::AttentionKernel>("paged_attention", DeviceKind::cpu, DType::f32,
                                by_level(&attention_portable<float>, &avx2::attention_f32,
                                         &avx512::attention_f32),
                                "", level_label());
  reg.add<ops::AttentionKernel>("paged_attention", DeviceKind::cpu, DType::f64,
                                &attention_portable<double>, "", kPortable);
  for (DType t : {DType::f16, DType::bf16})
    reg.add<ops::KvCacheWriteKernel>("kv_cache_write", DeviceKind::cpu, t, &kv_cache_write_16, "", level_label());
}

}  // namespace unillm::cpu
