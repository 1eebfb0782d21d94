// CPU linear_cross_entropy, _topk_entropy, _backward and _fused (fused linear + cross-entropy; the AVX2 row
// functions are in linear_cross_entropy_avx2.cpp). Only labelled rows are computed: they are
// gathered a chunk at a time into a contiguous buffer, the chunk's logits come from GEMMs against
// W split over the vocabulary (f32: VocabSplitGemm of gemm/cross_entropy_gemm.h, bf16/f16 W
// converted a sub-panel at a time; f64: one dgemm), and per-row work (logsumexp; softmax − onehot)
// runs in parallel over the chunk's rows. Backward recomputes each chunk's logits, turns them into
// dlogits in place, then dx rows = dlogits·W and dW += dlogitsᵀ·x_chunk. Sums shared between
// threads are added in a fixed order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "backends/cpu/gemm/cross_entropy_gemm.h"
#include "backends/cpu/gemm/gemm_backward.h"
#include "backends/cpu/kernels/linear_cross_entropy_avx2.h"
#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd/simd.h"
#include "core/registry.h"
#include "ops/asft_cross_entropy.h"
#include "ops/cross_entropy.h"
#include "ops/sequence_logprobs.h"

namespace unillm::cpu {
namespace {

template <typename T, bool kAvx2>
T row_logsumexp(const T* l, int64_t n) {
  if constexpr (kAvx2) return avx2::row_logsumexp(l, n);
  T mx = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, l[i]);
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(l[i] - mx);
  return mx + std::log(s);
}

template <typename T, bool kAvx2>
void row_softmax_scaled(T* l, int64_t n, T lse, T scale) {
  if constexpr (kAvx2) return avx2::row_softmax_scaled(l, n, lse, scale);
  for (int64_t i = 0; i < n; ++i) l[i] = std::exp(l[i] - lse) * scale;
}

std::vector<int64_t> labelled_rows(const int32_t* labels, int64_t n) {
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < n; ++i)
    if (labels[i] != ops::kIgnoreIndex) rows.push_back(i);
  return rows;
}

// The chunk GEMMs: VocabSplitGemm for f32, the plain helpers (one dgemm each) for f64.
template <typename T>
class ChunkGemm {
 public:
  template <typename Args>
  ChunkGemm(const Args& a, int64_t max_rows) : a_w_(a.w), wt_(a.w_dtype), v_(a.v), c_(a.c) {
    if constexpr (kF32) split_.emplace(a.w, a.w_dtype, a.v, a.c, max_rows);
  }
  void logits(const T* x, int64_t r, T* l) {
    if constexpr (kF32) split_->logits(x, r, l);
    else gemm_a_wt(x, a_w_, wt_, l, r, v_, c_, v_);
  }
  void dx(const T* dl, int64_t r, T* dx) {
    if constexpr (kF32) split_->dx(dl, r, dx);
    else gemm_a_w(dl, v_, a_w_, wt_, dx, r, v_, c_);
  }
  void dw(const T* dl, const T* x, int64_t r, T* dw, bool accumulate) {
    if constexpr (kF32) split_->dw(dl, x, r, dw, accumulate);
    else gemm_at_b(dl, x, dw, r, v_, c_, accumulate);
  }

 private:
  static constexpr bool kF32 = std::is_same_v<T, float>;
  const void* a_w_;
  DType wt_;
  int64_t v_, c_;
  std::optional<VocabSplitGemm> split_;
};

// One chunk of labelled rows: gathers their x rows into xbuf and computes logits = xbuf·Wᵀ.
template <typename T, typename Args>
void chunk_logits(const Args& a, ChunkGemm<T>& g, const int64_t* rows, int64_t r, T* xbuf,
                  T* logits) {
  const auto* x = static_cast<const T*>(a.x);
  for (int64_t i = 0; i < r; ++i)
    std::memcpy(xbuf + i * a.c, x + rows[i] * a.c, static_cast<size_t>(a.c) * sizeof(T));
  g.logits(xbuf, r, logits);
}

// The forward pass: per chunk of labelled rows the logits GEMM, then per row (in parallel) lse
// and loss, and row_extra(l, row, scratch) for what a variant reads from the same logits
// (scratch: one vector per thread range).
template <typename T, bool kAvx2, typename RowFn>
void forward_pass(const ops::LinearCrossEntropyArgs& a, RowFn row_extra) {
  auto* lse = static_cast<T*>(a.lse);
  std::fill(lse, lse + a.n, T(0));
  std::fill(a.loss, a.loss + a.n, 0.0);
  const std::vector<int64_t> rows = labelled_rows(a.labels, a.n);
  const int64_t total = static_cast<int64_t>(rows.size());
  const int64_t chunk = std::min<int64_t>(std::max<int64_t>(1, a.chunk_rows), total);
  if (total == 0) return;
  Scratch<T> xbuf(chunk * a.c), logits(chunk * a.v);
  ChunkGemm<T> g(a, chunk);
  for (int64_t s = 0; s < total; s += chunk) {
    const int64_t r = std::min(chunk, total - s);
    chunk_logits<T>(a, g, rows.data() + s, r, xbuf.data(), logits.data());
    parallel_for(r, 1, [&](int64_t lo, int64_t hi) {
      std::vector<double> scratch;
      for (int64_t i = lo; i < hi; ++i) {
        const T* l = logits.data() + i * a.v;
        const int64_t row = rows[s + i];
        const T m = row_logsumexp<T, kAvx2>(l, a.v);
        lse[row] = m;
        a.loss[row] = static_cast<double>(m) - static_cast<double>(l[a.labels[row]]);
        row_extra(l, row, scratch);
      }
    });
  }
}

template <typename T, bool kAvx2>
void cross_entropy_forward(const ops::LinearCrossEntropyArgs& a) {
  forward_pass<T, kAvx2>(a, [](const T*, int64_t, std::vector<double>&) {});
}

// The forward plus each labelled row's top-k entropy (EAFT's weight), from the same logits.
template <typename T, bool kAvx2>
void cross_entropy_topk_forward(const ops::LinearCrossEntropyTopkArgs& ta) {
  std::fill(ta.entropy, ta.entropy + ta.base.n, 0.0);
  forward_pass<T, kAvx2>(ta.base, [&](const T* l, int64_t row, std::vector<double>& heap) {
    ta.entropy[row] = ops::topk_entropy(l, ta.base.v, ta.top_k, heap);
  });
}

// The gradient pass shared by backward and the fused kernels: per chunk of labelled rows, the
// logits GEMM, on_chunk(rows, r) (what a variant computes per chunk besides), to_dlogits(l, row,
// i) turning the chunk's row i (x row `row`) into dlogits in place (in parallel over rows), then
// dx rows = dlogits·W and dW += dlogitsᵀ·x_chunk.
template <typename T, typename Args, typename RowFn, typename ChunkFn>
void gradient_pass(const Args& a, RowFn to_dlogits, ChunkFn on_chunk) {
  auto* dx = static_cast<T*>(a.dx);
  auto* dw = static_cast<T*>(a.dw);
  if (dx) std::fill(dx, dx + a.n * a.c, T(0));
  const std::vector<int64_t> rows = labelled_rows(a.labels, a.n);
  const int64_t total = static_cast<int64_t>(rows.size());
  if (total == 0) {
    if (dw) std::fill(dw, dw + a.v * a.c, T(0));
    return;
  }
  const int64_t chunk = std::min<int64_t>(std::max<int64_t>(1, a.chunk_rows), total);
  Scratch<T> xbuf(chunk * a.c), logits(chunk * a.v);
  Scratch<T> dxbuf(dx ? chunk * a.c : 0);
  ChunkGemm<T> g(a, chunk);
  for (int64_t s = 0; s < total; s += chunk) {
    const int64_t r = std::min(chunk, total - s);
    chunk_logits<T>(a, g, rows.data() + s, r, xbuf.data(), logits.data());
    on_chunk(rows.data() + s, r);
    parallel_for(r, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) to_dlogits(logits.data() + i * a.v, rows[s + i], i);
    });
    if (dx) {
      g.dx(logits.data(), r, dxbuf.data());
      for (int64_t i = 0; i < r; ++i)
        std::memcpy(dx + rows[s + i] * a.c, dxbuf.data() + i * a.c, static_cast<size_t>(a.c) * sizeof(T));
    }
    if (dw) g.dw(logits.data(), xbuf.data(), r, dw, s > 0);
  }
}

template <typename T, bool kAvx2>
void cross_entropy_backward(const ops::LinearCrossEntropyBackwardArgs& a) {
  const auto* lse = static_cast<const T*>(a.lse);
  const T scale = static_cast<T>(a.grad_scale);
  gradient_pass<T>(a, [&](T* l, int64_t row, int64_t) {
    row_softmax_scaled<T, kAvx2>(l, a.v, lse[row], scale);
    l[a.labels[row]] -= scale;
  }, [](const int64_t*, int64_t) {});
}

// The backward with one scale per row (sequence_logprobs: each sequence's own upstream gradient).
template <typename T, bool kAvx2>
void cross_entropy_backward_rows(const ops::LinearCrossEntropyRowsBackwardArgs& ra) {
  const auto& a = ra.base;
  const auto* lse = static_cast<const T*>(a.lse);
  gradient_pass<T>(a, [&](T* l, int64_t row, int64_t) {
    const T scale = static_cast<T>(ra.row_scale[row]);
    row_softmax_scaled<T, kAvx2>(l, a.v, lse[row], scale);
    l[a.labels[row]] -= scale;
  }, [](const int64_t*, int64_t) {});
}

// Forward and backward in one pass: each chunk's logits give lse/loss, then become dlogits in
// place. The same arithmetic as forward + backward, minus one GEMM.
template <typename T, bool kAvx2>
void cross_entropy_fused(const ops::LinearCrossEntropyFusedArgs& a) {
  auto* lse = static_cast<T*>(a.lse);
  std::fill(lse, lse + a.n, T(0));
  std::fill(a.loss, a.loss + a.n, 0.0);
  const T scale = static_cast<T>(a.grad_scale);
  gradient_pass<T>(a, [&](T* l, int64_t row, int64_t) {
    const T m = row_logsumexp<T, kAvx2>(l, a.v);
    lse[row] = m;
    a.loss[row] = static_cast<double>(m) - static_cast<double>(l[a.labels[row]]);
    row_softmax_scaled<T, kAvx2>(l, a.v, m, scale);
    l[a.labels[row]] -= scale;
  }, [](const int64_t*, int64_t) {});
}

// The lm_head of the ASFT reference, in the shape ChunkGemm reads.
struct RefHead {
  const void* w;
  DType w_dtype;
  int64_t v, c;
};

// ASFT (ops/asft_cross_entropy.h): per chunk the policy's logits (gradient_pass) and the
// reference's (a second ChunkGemm over x_ref rows); per row CE, KL(q ‖ p) and, in place,
// dlogits = grad_scale·(exp(−CE)·(p − onehot) + alpha·(p − q)).
template <typename T, bool kAvx2>
void asft_fused(const ops::AsftCrossEntropyArgs& a) {
  std::fill(a.ce, a.ce + a.n, 0.0);
  std::fill(a.kl, a.kl + a.n, 0.0);
  const int64_t chunk = std::max<int64_t>(1, std::min(a.chunk_rows, a.n));
  const RefHead head{a.w_ref, a.w_ref_dtype, a.v, a.c};
  ChunkGemm<T> gref(head, chunk);
  Scratch<T> xref(chunk * a.c), lref(chunk * a.v);
  const auto* xr = static_cast<const T*>(a.x_ref);
  gradient_pass<T>(a, [&](T* l, int64_t row, int64_t i) {
    T* q = lref.data() + i * a.v;  // reference logits, then log q
    const double lse_p = row_logsumexp<T, kAvx2>(l, a.v), lse_q = row_logsumexp<T, kAvx2>(q, a.v);
    const double ce = lse_p - static_cast<double>(l[a.labels[row]]);
    double kl = 0;
    const double dft = a.grad_scale * std::exp(-ce), kls = a.grad_scale * a.alpha;
    for (int64_t j = 0; j < a.v; ++j) {
      const double lq = static_cast<double>(q[j]) - lse_q, lp = static_cast<double>(l[j]) - lse_p;
      const double pq = std::exp(lq);
      kl += pq * (lq - lp);
      l[j] = static_cast<T>((dft + kls) * std::exp(lp) - kls * pq);
    }
    l[a.labels[row]] -= static_cast<T>(dft);
    a.ce[row] = ce;
    a.kl[row] = kl;
  }, [&](const int64_t* rows, int64_t r) {
    for (int64_t i = 0; i < r; ++i)
      std::memcpy(xref.data() + i * a.c, xr + rows[i] * a.c, static_cast<size_t>(a.c) * sizeof(T));
    gref.logits(xref.data(), r, lref.data());
  });
}

}  // namespace

void register_linear_cross_entropy() {
  auto& reg = kernel_registry();
  const bool v = has_avx2();
  for (DType w : {DType::f32, DType::bf16, DType::f16}) {
    reg.add<ops::LinearCrossEntropyKernel>(
        "linear_cross_entropy", DeviceKind::cpu, w,
        v ? &cross_entropy_forward<float, true> : &cross_entropy_forward<float, false>, "",
        avx2_or_portable());
    reg.add<ops::LinearCrossEntropyBackwardKernel>(
        "linear_cross_entropy_backward", DeviceKind::cpu, w,
        v ? &cross_entropy_backward<float, true> : &cross_entropy_backward<float, false>, "",
        avx2_or_portable());
    reg.add<ops::LinearCrossEntropyRowsBackwardKernel>(
        "linear_cross_entropy_backward_rows", DeviceKind::cpu, w,
        v ? &cross_entropy_backward_rows<float, true> : &cross_entropy_backward_rows<float, false>, "",
        avx2_or_portable());
    reg.add<ops::LinearCrossEntropyTopkKernel>(
        "linear_cross_entropy_topk_entropy", DeviceKind::cpu, w,
        v ? &cross_entropy_topk_forward<float, true> : &cross_entropy_topk_forward<float, false>, "",
        avx2_or_portable());
    reg.add<ops::AsftCrossEntropyKernel>(
        "asft_cross_entropy", DeviceKind::cpu, w,
        v ? &asft_fused<float, true> : &asft_fused<float, false>, "", avx2_or_portable());
    reg.add<ops::LinearCrossEntropyFusedKernel>(
        "linear_cross_entropy_fused", DeviceKind::cpu, w,
        v ? &cross_entropy_fused<float, true> : &cross_entropy_fused<float, false>, "",
        avx2_or_portable());
  }
  reg.add<ops::LinearCrossEntropyKernel>("linear_cross_entropy", DeviceKind::cpu, DType::f64,
                                         &cross_entropy_forward<double, false>, "", kPortable);
  reg.add<ops::LinearCrossEntropyBackwardKernel>("linear_cross_entropy_backward", DeviceKind::cpu,
                                                 DType::f64, &cross_entropy_backward<double, false>,
                                                 "", kPortable);
  reg.add<ops::AsftCrossEntropyKernel>("asft_cross_entropy", DeviceKind::cpu, DType::f64,
                                       &asft_fused<double, false>, "", kPortable);
  reg.add<ops::LinearCrossEntropyTopkKernel>("linear_cross_entropy_topk_entropy", DeviceKind::cpu,
                                             DType::f64, &cross_entropy_topk_forward<double, false>,
                                             "", kPortable);
  reg.add<ops::LinearCrossEntropyRowsBackwardKernel>("linear_cross_entropy_backward_rows",
                                                     DeviceKind::cpu, DType::f64,
                                                     &cross_entropy_backward_rows<double, false>, "",
                                                     kPortable);
}

}  // namespace unillm::cpu
