// VocabSplitGemm: see cross_entropy_gemm.h. The sgemm calls run inside our parallel region, where
// both GEMM providers (OpenMP builds of OpenBLAS and oneDNN) run each one on the calling thread.
#include "backends/cpu/gemm/cross_entropy_gemm.h"

#include <algorithm>

#include "backends/cpu/gemm/bf16_compute.h"
#include "backends/cpu/gemm/gemm_backward.h"
#include "backends/cpu/gemm/provider.h"
#include "backends/cpu/simd/convert.h"

namespace unillm::cpu {
namespace {

// Sub-panel rows of a bf16/f16 W: about 1 MiB of f32 (the L2 of one core here), a multiple of 16.
int64_t half_sub_panel_rows(int64_t c) {
  const int64_t rows = (int64_t{1} << 18) / std::max<int64_t>(1, c) / 16 * 16;
  return std::max<int64_t>(16, rows);
}

}  // namespace

VocabSplitGemm::VocabSplitGemm(const void* w, DType wt, int64_t v, int64_t c, int64_t max_rows)
    : w_(w),
      wt_(wt),
      bf16_(bf16_compute_for(wt)),
      v_(v),
      c_(c),
      parts_(bf16_ ? 1 : parts_for(v, 64)),
      panel_rows_(wt == DType::f32 ? v : std::min(v, half_sub_panel_rows(c))),
      panels_(wt == DType::f32 || bf16_ ? 0 : parts_ * panel_rows_ * c),
      partial_(parts_ > 1 ? parts_ * max_rows * c : 0) {
  if (bf16_) wb_ = as_bf16(w, wt, v, c, w16_);
}

const uint16_t* VocabSplitGemm::dl_bf16(const float* dl, int64_t r) {
  if (dl16_of_ != dl || dl16_.size() != r * v_) {
    dl16_.resize(r * v_);
    rows_to_bf16(dl, r, v_, v_, dl16_.data());
    dl16_of_ = dl;
  }
  return dl16_.data();
}

template <typename Fn>
void VocabSplitGemm::each_part(Fn&& fn) const {
  for_parts(v_, parts_, fn);
}

const float* VocabSplitGemm::rows_f32(int64_t p, int64_t s, int64_t rows) {
  if (wt_ == DType::f32) return static_cast<const float*>(w_) + s * c_;
  float* buf = panels_.data() + p * panel_rows_ * c_;
  const auto* base = static_cast<const char*>(w_);
  const int64_t es = static_cast<int64_t>(dtype_size(wt_));
  to_f32(base + s * c_ * es, wt_, buf, rows * c_);  // the rows are contiguous
  return buf;
}

void VocabSplitGemm::logits(const float* x, int64_t r, float* logits) {
  dl16_of_ = nullptr;  // a new chunk: the caller rewrites its dl buffer
  if (bf16_) {
    gemm_bf16(false, true, r, v_, c_, as_bf16(x, DType::f32, r, c_, x16_), c_, wb_, c_, 0.0f,
              logits, v_);
    return;
  }
  each_part([&](int64_t p, int64_t lo, int64_t hi) {
    for (int64_t s = lo; s < hi; s += panel_rows_) {
      const int64_t rows = std::min(panel_rows_, hi - s);
      sgemm(false, true, r, rows, c_, 1.0f, x, c_, rows_f32(p, s, rows), c_, 0.0f, logits + s, v_);
    }
  });
}

void VocabSplitGemm::dx(const float* dl, int64_t r, float* dx) {
  if (bf16_) {
    gemm_bf16(false, false, r, c_, v_, dl_bf16(dl, r), v_, wb_, c_, 0.0f, dx, c_);
    return;
  }
  each_part([&](int64_t p, int64_t lo, int64_t hi) {
    float* out = parts_ > 1 ? partial_.data() + p * r * c_ : dx;
    for (int64_t s = lo; s < hi; s += panel_rows_) {
      const int64_t rows = std::min(panel_rows_, hi - s);
      sgemm(false, false, r, c_, rows, 1.0f, dl + s, v_, rows_f32(p, s, rows), c_,
            s == lo ? 0.0f : 1.0f, out, c_);
    }
  });
  if (parts_ == 1) return;
  const float* part = partial_.data();
  const int64_t n = r * c_;
  parallel_for(n, 4096, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float sum = part[i];
      for (int64_t p = 1; p < parts_; ++p) sum += part[p * n + i];
      dx[i] = sum;
    }
  });
}

void VocabSplitGemm::dw(const float* dl, const float* x, int64_t r, float* dw,
                        bool accumulate) {
  if (bf16_) {
    gemm_bf16(true, false, v_, c_, r, dl_bf16(dl, r), v_, as_bf16(x, DType::f32, r, c_, x16_), c_,
              accumulate ? 1.0f : 0.0f, dw, c_);
    return;
  }
  each_part([&](int64_t, int64_t lo, int64_t hi) {
    sgemm(true, false, hi - lo, c_, r, 1.0f, dl + lo, v_, x, c_, accumulate ? 1.0f : 0.0f,
          dw + lo * c_, c_);
  });
}

}  // namespace unillm::cpu
