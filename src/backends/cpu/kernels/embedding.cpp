// CPU embedding kernel: each id's row is copied (f32/f64) or converted to f32 (bf16/f16, vectorised
// through to_f32), parallel over ids. Ids were range-checked by the op.
#include "ops/embedding.h"

#include <cstring>

#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/simd/convert.h"
#include "backends/cpu/simd/simd.h"
#include "core/parallel.h"
#include "core/registry.h"

namespace unillm::cpu {
namespace {

void embedding_rows(const ops::EmbeddingArgs& a) {
  const size_t es = dtype_size(a.table_dtype), os = dtype_size(a.out_dtype);
  const auto* table = static_cast<const char*>(a.table);
  auto* out = static_cast<char*>(a.out);
  parallel_for(a.n, std::max<int64_t>(1, 16384 / a.dim), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const char* src = table + int64_t{a.ids[i]} * a.dim * static_cast<int64_t>(es);
      char* dst = out + i * a.dim * static_cast<int64_t>(os);
      if (a.table_dtype == a.out_dtype)
        std::memcpy(dst, src, static_cast<size_t>(a.dim) * es);
      else
        to_f32(src, a.table_dtype, reinterpret_cast<float*>(dst), a.dim);
    }
  });
}

}  // namespace

void register_embedding() {
  // bf16/f16 rows go through convert.h's conversions (AVX2 when chosen); f32/f64 rows are copies.
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f64})
    kernel_registry().add<ops::EmbeddingKernel>(
        "embedding", DeviceKind::cpu, t, &embedding_rows, "",
        t == DType::bf16 || t == DType::f16 ? avx2_or_portable() : kPortable);
}

}  // namespace unillm::cpu
