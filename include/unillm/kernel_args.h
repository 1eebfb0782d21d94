/* Argument structs of the kernels a unillm device plugin may provide (device_plugin.h). Each
 * starts with its size; every pointer is a device pointer; strides and offsets count elements.
 * An op a plugin device has no kernel for runs on the CPU with copies in and out (the host
 * fallback); docs/devices.md says more. */
#ifndef UNILLM_KERNEL_ARGS_H
#define UNILLM_KERNEL_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "unillm/device_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define UNILLM_MAX_DIMS 8

/* op "copy" (key: dst_dtype): dst[i] = convert(src[i]) over a strided view of up to 8 dims
 * (both sides the same shape; src and dst never overlap). Every Tensor copy, cast and
 * .contiguous() on a device is this op. */
typedef struct {
  size_t size;
  const void* src;
  void* dst;
  int32_t ndim;
  int64_t shape[UNILLM_MAX_DIMS];
  int64_t src_strides[UNILLM_MAX_DIMS];
  int64_t dst_strides[UNILLM_MAX_DIMS];
  unillm_dtype src_dtype, dst_dtype;
} unillm_copy_args;

/* op "accumulate" (key: dtype, f32 or f64): dst[i] += src[i] for n contiguous elements, in
 * index order per element (the gradient sums of the backward engine). */
typedef struct {
  size_t size;
  const void* src;
  void* dst;
  int64_t n;
  unillm_dtype dtype;
} unillm_accumulate_args;

/* The model's ops. Each struct mirrors what the op's CPU kernel takes (src/ops/<op>.h states the
 * math); the key dtype of each is named. Outputs are overwritten (never accumulated into) and an
 * optional output left NULL is not computed. Row-major, contiguous. Accumulation is at least f32
 * (the CPU uses f32 for f32 data and f64 for f64 data). */

/* "linear" (key: w_dtype): y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]); bias may be NULL.
 * x, bias, y in x_dtype (f32/f64); w in w_dtype (f32/bf16/f16; f64 only with f64 x). */
typedef struct {
  size_t size;
  const void* x;
  const void* w;
  const void* bias;
  void* y;
  int64_t m, k, n;
  unillm_dtype x_dtype, w_dtype;
} unillm_linear_args;

/* "linear_backward" (key: w_dtype): dx = dy·w [m, k] (x_dtype), dw = dyᵀ·x [n, k] (f32; f64 for
 * an f64 w), db = Σ_rows dy [n] (x_dtype). Each of dx, dw, db may be NULL. */
typedef struct {
  size_t size;
  const void* dy;
  const void* x;
  const void* w;
  void* dx;
  void* dw;
  void* db;
  int64_t m, k, n;
  unillm_dtype x_dtype, w_dtype;
} unillm_linear_backward_args;

/* "lora_gemm" (key: dtype, f32/f64): c[m, n] (ldc) = alpha · op(a) · op(b) + beta · c, where
 * op(a) = a [m, k] (lda) or, with trans_a, aᵀ of a stored [k, m]; op(b) = b [k, n] (ldb) or, with
 * trans_b, bᵀ of b stored [n, k]. beta 0 never reads c. */
typedef struct {
  size_t size;
  const void* a;
  const void* b;
  void* c;
  int64_t m, n, k, lda, ldb, ldc;
  int32_t trans_a, trans_b;
  double alpha, beta;
  unillm_dtype dtype;
} unillm_lora_gemm_args;

/* "embedding" (key: table_dtype): out[i] = table[ids[i]] converted to out_dtype (f32; f64 for
 * an f64 table). ids are in [0, vocab) (checked by the host). */
typedef struct {
  size_t size;
  const int32_t* ids;
  const void* table;
  void* out;
  int64_t n, vocab, dim;
  unillm_dtype table_dtype, out_dtype;
} unillm_embedding_args;

/* "scatter_add_rows" (key: dtype, f32/f64): dst[r] = Σ_{i: idx[i] = r} src[i] for every r < rows,
 * summed in increasing i (rows never indexed are zero). */
typedef struct {
  size_t size;
  const int32_t* idx;
  const void* src;
  void* dst;
  int64_t m, rows, dim;
  unillm_dtype dtype;
} unillm_scatter_rows_args;

/* "add", "mul" (key: dtype, f32/f64): out[i] = a[i] + b[i] (or ·), n elements. */
typedef struct {
  size_t size;
  const void* a;
  const void* b;
  void* out;
  int64_t n;
  unillm_dtype dtype;
} unillm_binary_args;

/* "cast" (key: the 2-byte dtype of the pair, bf16 or f16): dst[i] = convert(src[i]) between f32
 * and bf16/f16, either way; rounding to nearest even (f16 overflows to ±inf). */
typedef struct {
  size_t size;
  const void* src;
  void* dst;
  int64_t n;
  unillm_dtype src_dtype, dst_dtype;
} unillm_cast_args;

/* "rms_norm" (key: w_dtype): y = x / sqrt(mean(x²) + eps) · w per row of x [rows, dim] (x_dtype
 * f32/f64; w [dim] in w_dtype). */
typedef struct {
  size_t size;
  const void* x;
  const void* w;
  void* y;
  int64_t rows, dim;
  float eps;
  unillm_dtype x_dtype, w_dtype;
} unillm_rms_norm_args;

/* "rms_norm_backward" (key: w_dtype): with r = 1/rms(x), g = dy:
 * dx = r·(g∘w) − x·r³/dim·Σ(g∘w∘x) (x_dtype), dw = Σ_rows g∘x·r [dim] (f32; f64 for f64 w).
 * dx or dw may be NULL. */
typedef struct {
  size_t size;
  const void* dy;
  const void* x;
  const void* w;
  void* dx;
  void* dw;
  int64_t rows, dim;
  float eps;
  unillm_dtype x_dtype, w_dtype;
} unillm_rms_norm_backward_args;

/* "rope" (key: dtype, f32/f64): HF rotate_half rotation of the first rot_dim elements of every
 * head vector of x [n, heads, head_dim] by angle positions[i]·inv_freq[j] (h = rot_dim/2, j < h):
 * out[j] = x[j]·cos − x[j+h]·sin, out[j+h] = x[j+h]·cos + x[j]·sin; the rest is copied. For f32
 * the angle is float(p)·f rounded to f32 and cos/sin are f32; for f64 all in double. The
 * backward is this op on negated positions. */
typedef struct {
  size_t size;
  const void* x;
  void* out;
  const int32_t* positions;
  const float* inv_freq;
  int64_t n, heads, head_dim, rot_dim;
  unillm_dtype dtype;
} unillm_rope_args;

/* "swiglu" (key: dtype, f32/f64): out[r, j] = silu(g)·u with g = gate_up[r, j],
 * u = gate_up[r, ffn + j]; gate_up [rows, 2·ffn], out [rows, ffn]. */
typedef struct {
  size_t size;
  const void* gate_up;
  void* out;
  int64_t rows, ffn;
  unillm_dtype dtype;
} unillm_swiglu_args;

/* "swiglu_backward" (key: dtype): s = sigmoid(g): d_gate = dout·u·s·(1 + g·(1 − s)),
 * d_up = dout·g·s, written to dgate_up [rows, 2·ffn]. */
typedef struct {
  size_t size;
  const void* gate_up;
  const void* dout;
  void* dgate_up;
  int64_t rows, ffn;
  unillm_dtype dtype;
} unillm_swiglu_backward_args;

/* "softmax" (key: dtype, f32/f64): y = softmax of each row of x [rows, cols] (max subtracted). */
typedef struct {
  size_t size;
  const void* x;
  void* y;
  int64_t rows, cols;
  unillm_dtype dtype;
} unillm_softmax_args;

/* "softmax_backward" (key: dtype): dx = y ∘ (dy − Σ_row(dy ∘ y)). */
typedef struct {
  size_t size;
  const void* y;
  const void* dy;
  void* dx;
  int64_t rows, cols;
  unillm_dtype dtype;
} unillm_softmax_backward_args;

/* "causal_attention" (key: dtype, f32/f64): q [batch, tokens, heads, head_dim], k, v
 * [batch, tokens, kv_heads, head_dim]; head h reads kv head h / (heads / kv_heads). Row t attends to
 * rows j <= t whose segment_ids[b][j] equals its own (segment_ids [batch, tokens] or NULL: plain
 * causal). out = softmax(q·kᵀ·scale, masked)·v [batch, tokens, heads, head_dim]; lse
 * [batch, tokens, heads] = the log-sum-exp of each row's scaled, masked scores (dtype). */
typedef struct {
  size_t size;
  const void* q;
  const void* k;
  const void* v;
  const int32_t* segment_ids;
  void* out;
  void* lse;
  int64_t batch, tokens, heads, kv_heads, head_dim;
  float scale;
  unillm_dtype dtype;
} unillm_causal_attention_args;

/* "causal_attention_backward" (key: dtype): the gradients of causal_attention from its out and
 * lse and grad_out; grad_q, grad_k, grad_v (shapes of q, k, v) may each be NULL. */
typedef struct {
  size_t size;
  const void* q;
  const void* k;
  const void* v;
  const void* out;
  const void* lse;
  const void* grad_out;
  const int32_t* segment_ids;
  void* grad_q;
  void* grad_k;
  void* grad_v;
  int64_t batch, tokens, heads, kv_heads, head_dim;
  float scale;
  unillm_dtype dtype;
} unillm_causal_attention_backward_args;

/* "paged_attention" (key: dtype, f32/f64): q [N, heads, head_dim] holds the query rows of
 * num_seqs sequences (rows q_start[s] .. q_start[s+1]-1); the caches are [blocks, block_size,
 * kv_heads, head_dim]; block_table [num_seqs, max_blocks]. Query row j of sequence s (q_len rows)
 * sits at position kv_len[s] − q_len + j and attends to positions 0 ..= it; position p lives in
 * block block_table[s][p / block_size], slot p % block_size. out [N, heads, head_dim].
 * num_rows = N and num_blocks (the caches' first dimension) bound q, out and the caches. */
typedef struct {
  size_t size;
  const void* q;
  const void* k_cache;
  const void* v_cache;
  const int32_t* block_table;
  const int32_t* q_start;
  const int32_t* kv_len;
  void* out;
  int64_t num_seqs, max_blocks, block_size, heads, kv_heads, head_dim;
  float scale;
  unillm_dtype dtype;
  int64_t num_rows, num_blocks;
} unillm_paged_attention_args;

/* "kv_cache_write" (key: dtype): row i of kv [n, row] goes to slot slots[i] of cache
 * [slots, row] (a negative slot is padding, skipped). */
typedef struct {
  size_t size;
  const void* kv;
  void* cache;
  const int32_t* slots;
  int64_t n, row;
  unillm_dtype dtype;
} unillm_kv_cache_write_args;

/* "linear_cross_entropy" (key: w_dtype): per row i of x [n, c] (x_dtype f32/f64) with the head
 * w [v, c]: lse[i] = logsumexp(x_i·wᵀ) (x_dtype) and loss[i] = lse[i] − x_i·w_{labels[i]}
 * (double); both 0 for rows labelled −100. chunk_rows is a hint (rows per chunk of logits). */
typedef struct {
  size_t size;
  const void* x;
  const void* w;
  const int32_t* labels;
  void* lse;
  double* loss;
  int64_t n, c, v, chunk_rows;
  unillm_dtype x_dtype, w_dtype;
} unillm_linear_cross_entropy_args;

/* "linear_cross_entropy_backward" (key: w_dtype): dlogits = (softmax(x_i·wᵀ) − onehot(label))
 * · grad_scale for labelled rows (0 for −100), dx = dlogits·w [n, c] (x_dtype), dw = dlogitsᵀ·x
 * [v, c] (f32; f64 for f64 w); dx or dw may be NULL. lse is the forward's. */
typedef struct {
  size_t size;
  const void* x;
  const void* w;
  const int32_t* labels;
  const void* lse;
  double grad_scale;
  void* dx;
  void* dw;
  int64_t n, c, v, chunk_rows;
  unillm_dtype x_dtype, w_dtype;
} unillm_linear_cross_entropy_backward_args;

/* "adamw" (key: f32): over n elements, in f32 with each operation rounded in this order (so a
 * device can match the CPU bit for bit): m = b1·m + (1 − b1)·g; v = b2·v + ((1 − b2)·g)·g;
 * p = (p·decay) − step_size · m / (sqrt(v) / sqrt_bc2 + eps). */
typedef struct {
  size_t size;
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t n;
  float decay, beta1, beta2, step_size, sqrt_bc2, eps;
} unillm_adamw_args;

/* "sum_squares" (key: f32): partials[c] = Σ x[i]² in double, summed in increasing i, over chunk
 * c = [c·chunk, (c+1)·chunk) ∩ [0, n), for every chunk (the host adds them in chunk order). */
typedef struct {
  size_t size;
  const float* x;
  double* partials;
  int64_t n, chunk;
} unillm_sum_squares_args;

/* "scale" (key: f32): x[i] *= factor in place. */
typedef struct {
  size_t size;
  float* x;
  int64_t n;
  float factor;
} unillm_scale_args;

#ifdef __cplusplus
}
#endif

#endif /* UNILLM_KERNEL_ARGS_H */
