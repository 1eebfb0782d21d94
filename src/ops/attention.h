// Causal attention with GQA over a paged KV cache (flash-style: tiled, online softmax, no [T, T]
// score matrix). A contiguous cache is the one-block case, so training and serving share it.
//
// Layout (S sequences in the batch, N query tokens in all):
//   q            [N, H, D]           f32/f64 query rows of all sequences, concatenated
//   k_cache      [NB, BS, Hkv, D]    NB blocks of BS token slots
//   v_cache      [NB, BS, Hkv, D]
//   block_table  [S, MB] i32         block ids of each sequence, in order
//   q_start      [S + 1] i32         query rows of sequence s are q_start[s] .. q_start[s+1]-1
//   kv_len       [S] i32             tokens in the cache for s (its new tokens included)
// Query row j of sequence s (0-based within s, q_len = q_start[s+1] - q_start[s]) sits at
// position kv_len[s] - q_len + j and attends to cache positions 0 ..= that position. Position p
// of sequence s lives in block block_table[s][p / BS], slot p % BS. Head h uses kv head
// h / (H / Hkv). out [N, H, D] = softmax(q·kᵀ · scale) · v. Kernel key dtype = q's dtype.
// When the metadata is on the CPU the op checks it (q_start from 0 to N, q_len <= kv_len <=
// MB·BS, used block ids in [0, NB)); unused block-table entries are never read.
#pragma once

#include "core/tensor.h"
#include "ops/causal_attention.h"  // the training attention (contiguous, segments, autograd)

namespace unillm::ops {

struct AttentionArgs {
  const void* q;
  const void* k_cache;
  const void* v_cache;
  const int32_t* block_table;
  const int32_t* q_start;
  const int32_t* kv_len;
  void* out;
  int64_t num_seqs, max_blocks, block_size, heads, kv_heads, head_dim;
  float scale;
  DType dtype;
  int64_t num_rows, num_blocks;  // N and NB: extents a device checks its pointers against
  // The caches' dtype: dtype, or bf16/f16 under f32 queries on the CPU (--kv-cache-dtype).
  DType cache_dtype = DType::f32;
};
using AttentionKernel = void(const AttentionArgs&);

struct AttentionBatch {
  Tensor block_table;  // [S, MB] i32
  Tensor q_start;  // [S + 1] i32
  Tensor kv_len;  // [S] i32
};

Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const AttentionBatch& batch, float scale);

// Where one attention call's keys and values live: the model's attention calls only
// ops::attention with one of these, so inference and training share every line above it.
struct AttentionLayout {
  // Inference (a KV view): the new k/v rows are written into the caches at slot_mapping and the
  // queries attend through batch's block tables (paged_attention). Not differentiable.
  Tensor* k_cache = nullptr;
  Tensor* v_cache = nullptr;
  Tensor slot_mapping;  // [N] i32
  const AttentionBatch* batch = nullptr;
  // Training (no cache): the N tokens are `rows` rows of `tokens` tokens (causal_attention);
  // segment_ids [rows, tokens] i32 keep packed samples apart (undefined: plain causal).
  int64_t rows = 0, tokens = 0;
  Tensor segment_ids;
  bool paged() const { return k_cache != nullptr; }
};

// What a training call keeps for a recompute re-run (ignored with a KV view): kRecord fills out
// and lse; kReplay takes them (from a kRecord call on the same q, k, v) and skips the kernel.
struct AttentionSaves {
  enum Mode { kRecord, kReplay } mode = kRecord;
  Tensor out, lse;
};

// The one attention op: q [N, H, D], k and v [N, Hkv, D] (the new tokens') → out [N, H, D].
// With a KV view it runs kv_cache_write + paged_attention; without, causal_attention (recording
// its autograd node), or causal_attention_replay when saves says kReplay.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayout& layout,
                 float scale, AttentionSaves* saves = nullptr);
// Straightforward per-query loop (full softmax in double): the fallback.
void attention_reference(const AttentionArgs& a);

// Writes new keys/values into cache slots: cache[slot / BS][slot % BS] = kv[i] for
// slot = slot_mapping[i]. kv [N, Hkv, D], cache [NB, BS, Hkv, D], slot_mapping i32 [N].
// The cache is written in place (it is state, never a saved tensor).
// A negative slot skips that row (padding). On the CPU kv may be converted to the cache dtype.
void kv_cache_write(const Tensor& kv, Tensor& cache, const Tensor& slot_mapping);

// kv_cache_write's kernel (key: the cache's dtype): row i of kv [n, row] to row slots[i] of cache
// [NB·BS, row]; slots are checked by the op (< NB·BS; negative = skip). kv_dtype differs from
// dtype only on the CPU (the reference converts).
struct KvCacheWriteArgs {
  const void* kv;
  void* cache;
  const int32_t* slots;
  int64_t n, row;
  DType kv_dtype, dtype;
};
using KvCacheWriteKernel = void(const KvCacheWriteArgs&);
void kv_cache_write_reference(const KvCacheWriteArgs& a);

}  // namespace unillm::ops
