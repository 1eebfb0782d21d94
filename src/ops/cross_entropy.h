// linear_cross_entropy: the fused lm_head + cross-entropy loss. For x [N, C] and the lm_head
// W [V, C], loss_sum = Σ over labelled rows i of (logsumexp(x_i·Wᵀ) − x_i·w_{label_i}); rows with
// label −100 are ignored. The [N, V] logits and their gradient never exist at once: both directions
// work on row chunks (only labelled rows are computed) and save only the per-row logsumexp.
// Shifting labels for next-token prediction is the caller's job.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace unillm::autograd {
class Node;
}

namespace unillm::ops {

constexpr int32_t kIgnoreIndex = -100;

struct CrossEntropyResult {
  Tensor loss_sum;  // scalar (shape []) f32 (f64 for f64 x), with grad_fn when x or W needs grad
  int64_t count = 0;  // labelled rows (the mean's denominator is the caller's choice)
  bool eager = false;  // linear_cross_entropy_eager_grad's fused path: backward reads neither x nor W
};

// x f32 [N, C] with W f32/bf16/f16, or x f64 with W f64; labels i32 [N] on the CPU, each −100 or in
// [0, V) (else ShapeError naming the row). chunk_rows: rows per chunk (0: auto, so a chunk's
// logits take about 32 MB at most). Backward (only the needed gradients): dx [N, C] in x's dtype
// (zero rows for ignored labels), dW [V, C] in f32 (f64 for f64 W; master gradient for bf16/f16).
// The loss is accumulated in double in row order; results are deterministic for a thread count.
CrossEntropyResult linear_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& labels,
                                        int64_t chunk_rows = 0);

// The forward of linear_cross_entropy without the autograd record (sequence_logprobs and
// weighted_cross_entropy build their own): the checked, contiguous inputs, each row's loss in
// double (0 for ignored rows, on the host) and the per-row logsumexp on x's device (what the
// backward kernels read). top_k > 0 also gives each labelled row the entropy of the softmax over
// its min(top_k, V) largest logits (EAFT's weight), from the same chunked pass.
struct CrossEntropyRows {
  Tensor x, w, labels, lse;
  std::vector<double> loss;
  std::vector<double> topk_entropy;  // [N] when top_k > 0 (0 for ignored rows), else empty
  int64_t count = 0, chunk_rows = 0;
};
CrossEntropyRows linear_cross_entropy_rows(const Tensor& x, const Tensor& w, const Tensor& labels,
                                           int64_t chunk_rows = 0, int64_t top_k = 0);

// The same loss, with the gradients computed eagerly in the forward pass, assuming backward will
// receive d(loss_sum) = grad_scale (a trainer knows 1 / scored tokens before the forward). Each
// chunk's logits are then computed once instead of twice. Backward scales the stored gradients
// by (actual / assumed), so any other grad_out stays exact (and equal when it is the assumed one).
// Falls back to linear_cross_entropy when no fused kernel exists for the device/dtype.
CrossEntropyResult linear_cross_entropy_eager_grad(const Tensor& x, const Tensor& w,
                                                   const Tensor& labels, double grad_scale,
                                                   int64_t chunk_rows = 0);

// The backward node of an eager-gradient loss: holds dx and dw computed in the forward for an
// assumed d(loss_sum) and gives them scaled to the actual one (inputs x, w; also the
// vocabulary-parallel cross-entropy's, ops/vocab_parallel_cross_entropy.h).
std::shared_ptr<autograd::Node> eager_grad_node(Tensor dx, Tensor dw, double assumed);

// Fused kernel: forward outputs as LinearCrossEntropyArgs plus dx/dw as the backward kernel
// would produce them for grad_scale. Kernel key "linear_cross_entropy_fused" by w's dtype.
struct LinearCrossEntropyFusedArgs {
  const void* x;  // [n, c], x_dtype
  const void* w;  // [v, c], w_dtype
  const int32_t* labels;  // [n]
  void* lse;  // [n], x_dtype (written)
  double* loss;  // [n] (written)
  double grad_scale;
  void* dx;  // [n, c], x_dtype, or nullptr
  void* dw;  // [v, c], f32 (f64 for f64 w), or nullptr
  int64_t n, c, v, chunk_rows;
  DType x_dtype, w_dtype;
};
using LinearCrossEntropyFusedKernel = void(const LinearCrossEntropyFusedArgs&);

// Forward kernel: per row, lse[i] (x_dtype) and loss[i] = lse[i] − x_i·w_{label_i} (double); both 0
// for ignored rows. Kernel key "linear_cross_entropy" by w's dtype.
struct LinearCrossEntropyArgs {
  const void* x;  // [n, c], x_dtype
  const void* w;  // [v, c], w_dtype
  const int32_t* labels;  // [n], checked by the op
  void* lse;  // [n], x_dtype (written)
  double* loss;  // [n] (written)
  int64_t n, c, v, chunk_rows;
  DType x_dtype, w_dtype;
};
using LinearCrossEntropyKernel = void(const LinearCrossEntropyArgs&);

// Backward kernel: with dlogits = (softmax(x_i·Wᵀ) − onehot(label_i))·grad_scale for labelled rows
// (0 for ignored ones), dx = dlogits·W and dw = dlogitsᵀ·x. dx / dw may be nullptr (not needed);
// both are overwritten. Kernel key "linear_cross_entropy_backward" by w's dtype.
struct LinearCrossEntropyBackwardArgs {
  const void* x;  // [n, c], x_dtype
  const void* w;  // [v, c], w_dtype
  const int32_t* labels;  // [n]
  const void* lse;  // [n], x_dtype (from the forward)
  double grad_scale;  // d(loss_sum)
  void* dx;  // [n, c], x_dtype
  void* dw;  // [v, c], f32 (f64 when w_dtype is f64)
  int64_t n, c, v, chunk_rows;
  DType x_dtype, w_dtype;
};
using LinearCrossEntropyBackwardKernel = void(const LinearCrossEntropyBackwardArgs&);

// Forward kernel with a top-k entropy: base as the forward kernel writes it, and per labelled row
// entropy[i] = H(softmax over the row's top_k largest logits) in double (0 for ignored rows).
// Kernel key "linear_cross_entropy_topk_entropy" by w's dtype.
struct LinearCrossEntropyTopkArgs {
  LinearCrossEntropyArgs base;
  int64_t top_k;  // in [1, v], checked by the op
  double* entropy;  // [n] (written)
};
using LinearCrossEntropyTopkKernel = void(const LinearCrossEntropyTopkArgs&);

// Naive per-row references (double accumulation; chunk_rows is ignored): the CPU fallback.
void linear_cross_entropy_reference(const LinearCrossEntropyArgs& a);
void linear_cross_entropy_backward_reference(const LinearCrossEntropyBackwardArgs& a);
void linear_cross_entropy_topk_reference(const LinearCrossEntropyTopkArgs& a);
// The entropy of the softmax over the k largest of l[0, v) (1 ≤ k ≤ v), in double; equal values
// tie-break any way (the entropy does not depend on which). heap: the caller's scratch. What the
// kernels and the reference compute per row.
double topk_entropy(const float* l, int64_t v, int64_t k, std::vector<double>& heap);
double topk_entropy(const double* l, int64_t v, int64_t k, std::vector<double>& heap);
// Rows per chunk for chunk_rows = 0: logits of about 32 MB (at least 1 row).
int64_t cross_entropy_auto_chunk(int64_t vocab, DType x_dtype);

}  // namespace unillm::ops
