// The ABI argument struct (include/unillm/kernel_args.h) of each op's internal kernel args, so
// KernelCall can run a plugin device's kernel. The op's .cpp includes this after its own header;
// a specialisation must be visible where KernelCall<Args>::run is instantiated. Pointers are
// already device pointers here (KernelCall bound them); dtypes share their codes.
#pragma once

#include "core/dtype.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/causal_attention.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gather.h"
#include "ops/kernel_call.h"
#include "ops/linear.h"
#include "ops/lora_linear.h"
#include "ops/optimizer.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/softmax.h"
#include "ops/swiglu.h"
#include "unillm/kernel_args.h"

namespace unillm::ops {

// Declares PluginArgs<Args> with C = the ABI struct and a convert() whose body fills it.
#define UNILLM_PLUGIN_ARGS(Args, CStruct)   \
  template <>                               \
  struct PluginArgs<Args> {                 \
    static constexpr bool available = true; \
    using C = CStruct;                      \
    static C convert(const Args& a);        \
  };                                        \
  inline CStruct PluginArgs<Args>::convert(const Args& a)

inline unillm_dtype code(DType t) { return dtype_code(t); }

UNILLM_PLUGIN_ARGS(LinearArgs, unillm_linear_args) {
  return {sizeof(C), a.x, a.w, a.bias, a.y, a.m, a.k, a.n, code(a.x_dtype), code(a.w_dtype)};
}
UNILLM_PLUGIN_ARGS(LinearBackwardArgs, unillm_linear_backward_args) {
  return {sizeof(C),       a.dy,           a.x, a.w, a.dx, a.dw, a.db, a.m, a.k, a.n,
          code(a.x_dtype), code(a.w_dtype)};
}
UNILLM_PLUGIN_ARGS(LoraGemmArgs, unillm_lora_gemm_args) {
  return {sizeof(C),
          a.a,
          a.b,
          a.c,
          a.m,
          a.n,
          a.k,
          a.lda,
          a.ldb,
          a.ldc,
          a.trans_a ? 1 : 0,
          a.trans_b ? 1 : 0,
          a.alpha,
          a.beta,
          code(a.dtype)};
}
UNILLM_PLUGIN_ARGS(EmbeddingArgs, unillm_embedding_args) {
  return {sizeof(C),        a.ids, a.table, a.out, a.n, a.vocab, a.dim, code(a.table_dtype),
          code(a.out_dtype)};
}
UNILLM_PLUGIN_ARGS(ScatterRowsArgs, unillm_scatter_rows_args) {
  return {sizeof(C), a.idx, a.src, a.dst, a.m, a.rows, a.dim, code(a.dtype)};
}
UNILLM_PLUGIN_ARGS(BinaryArgs, unillm_binary_args) {
  return {sizeof(C), a.a, a.b, a.out, a.n, code(a.dtype)};
}
UNILLM_PLUGIN_ARGS(CastArgs, unillm_cast_args) {
  return {sizeof(C), a.src, a.dst, a.n, code(a.src_dtype), code(a.dst_dtype)};
}
UNILLM_PLUGIN_ARGS(RmsNormArgs, unillm_rms_norm_args) {
  return {sizeof(C), a.x, a.w, a.y, a.rows, a.dim, a.eps, code(a.x_dtype), code(a.w_dtype)};
}
UNILLM_PLUGIN_ARGS(RmsNormBackwardArgs, unillm_rms_norm_backward_args) {
  return {sizeof(C),       a.dy,           a.x, a.w, a.dx, a.dw, a.rows, a.dim, a.eps,
          code(a.x_dtype), code(a.w_dtype)};
}
UNILLM_PLUGIN_ARGS(RopeArgs, unillm_rope_args) {
  return {sizeof(C), a.x,     a.out,      a.positions, a.inv_freq,
          a.n,       a.heads, a.head_dim, a.rot_dim,   code(a.dtype)};
}
UNILLM_PLUGIN_ARGS(SwigluArgs, unillm_swiglu_args) {
  return {sizeof(C), a.gate_up, a.out, a.rows, a.ffn, code(a.dtype)};
}
UNILLM_PLUGIN_ARGS(SwigluBackwardArgs, unillm_swiglu_backward_args) {
  return {sizeof(C), a.gate_up, a.dout, a.dgate_up, a.rows, a.ffn, code(a.dtype)};
}
UNILLM_PLUGIN_ARGS(SoftmaxArgs, unillm_softmax_args) {
  return {sizeof(C), a.x, a.y, a.rows, a.cols, code(a.dtype)};
}
UNILLM_PLUGIN_ARGS(SoftmaxBackwardArgs, unillm_softmax_backward_args) {
  return {sizeof(C), a.y, a.dy, a.dx, a.rows, a.cols, code(a.dtype)};
}
UNILLM_PLUGIN_ARGS(CausalAttentionArgs, unillm_causal_attention_args) {
  return {sizeof(C), a.q,      a.k,     a.v,        a.segment_ids, a.out,   a.lse,
          a.batch,   a.tokens, a.heads, a.kv_heads, a.head_dim,    a.scale, code(a.dtype)};
}
UNILLM_PLUGIN_ARGS(CausalAttentionBackwardArgs, unillm_causal_attention_backward_args) {
  return {sizeof(C),  a.q,           a.k,        a.v,        a.out,    a.lse,
          a.grad_out, a.segment_ids, a.grad_q,   a.grad_k,   a.grad_v, a.batch,
          a.tokens,   a.heads,       a.kv_heads, a.head_dim, a.scale,  code(a.dtype)};
}
UNILLM_PLUGIN_ARGS(AttentionArgs, unillm_paged_attention_args) {
  return {sizeof(C),  a.q,        a.k_cache,  a.v_cache,     a.block_table, a.q_start,
          a.kv_len,   a.out,      a.num_seqs, a.max_blocks,  a.block_size,  a.heads,
          a.kv_heads, a.head_dim, a.scale,    code(a.dtype), a.num_rows,    a.num_blocks};
}
UNILLM_PLUGIN_ARGS(KvCacheWriteArgs, unillm_kv_cache_write_args) {
  return {sizeof(C), a.kv, a.cache, a.slots, a.n, a.row, code(a.dtype)};
}
UNILLM_PLUGIN_ARGS(LinearCrossEntropyArgs, unillm_linear_cross_entropy_args) {
  return {sizeof(C), a.x, a.w, a.labels,     a.lse,           a.loss,
          a.n,       a.c, a.v, a.chunk_rows, code(a.x_dtype), code(a.w_dtype)};
}
UNILLM_PLUGIN_ARGS(LinearCrossEntropyBackwardArgs, unillm_linear_cross_entropy_backward_args) {
  return {sizeof(C), a.x, a.w, a.labels, a.lse,        a.grad_scale,    a.dx,
          a.dw,      a.n, a.c, a.v,      a.chunk_rows, code(a.x_dtype), code(a.w_dtype)};
}
UNILLM_PLUGIN_ARGS(AdamWArgs, unillm_adamw_args) {
  return {sizeof(C), a.p,       a.g,       a.m,           a.v,          a.n,
          a.s.decay, a.s.beta1, a.s.beta2, a.s.step_size, a.s.sqrt_bc2, a.s.eps};
}
UNILLM_PLUGIN_ARGS(SumSquaresArgs, unillm_sum_squares_args) {
  return {sizeof(C), a.x, a.partials, a.n, a.chunk};
}
UNILLM_PLUGIN_ARGS(ScaleArgs, unillm_scale_args) { return {sizeof(C), a.x, a.n, a.factor}; }

#undef UNILLM_PLUGIN_ARGS

}  // namespace unillm::ops
