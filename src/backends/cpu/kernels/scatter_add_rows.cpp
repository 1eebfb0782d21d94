// CPU scatter_add_rows (embedding and gather_rows backward): destination rows are partitioned among
// threads, each thread zeroes its rows and adds the sources that land in them in increasing source
// order, so no two threads touch a row and the sums are deterministic.
#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/simd/simd.h"
#include "core/parallel.h"
#include "core/registry.h"
#include "ops/gather.h"

namespace unillm::cpu {
namespace {

template <typename T>
void scatter_add_rows(const ops::ScatterRowsArgs& a) {
  const auto* src = static_cast<const T*>(a.src);
  auto* dst = static_cast<T*>(a.dst);
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, a.dim));
  parallel_for(a.rows, grain, [&](int64_t lo, int64_t hi) {
    std::memset(dst + lo * a.dim, 0, static_cast<size_t>((hi - lo) * a.dim) * sizeof(T));
    for (int64_t i = 0; i < a.m; ++i) {
      const int64_t r = a.idx[i];
      if (r < lo || r >= hi) continue;
      T* d = dst + r * a.dim;
      const T* s = src + i * a.dim;
      for (int64_t c = 0; c < a.dim; ++c) d[c] += s[c];
    }
  });
}

}  // namespace

void register_scatter_add_rows() {
  auto& reg = kernel_registry();
  reg.add<ops::ScatterRowsKernel>("scatter_add_rows", DeviceKind::cpu, DType::f32,
                                  &scatter_add_rows<float>, "", kPortable);
  reg.add<ops::ScatterRowsKernel>("scatter_add_rows", DeviceKind::cpu, DType::f64,
                                  &scatter_add_rows<double>, "", kPortable);
}

}  // namespace unillm::cpu
