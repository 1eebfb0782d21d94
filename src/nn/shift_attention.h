// LongLoRA's shifted sparse attention (S²-Attn, LLaMA-Factory's `shift_attn`), a training-only
// form of causal attention: each row of T tokens is cut into groups of G = ⌊T · ratio⌋ tokens
// (ratio 1/4, so 4 groups) and every token attends causally within its group only. The first
// half of the heads groups the tokens as they are; the second half groups them shifted by
// S = ⌈G / 2⌉ (token t sits at slot (t − S) mod T: the last group holds tokens T − G + S … T − 1
// followed by the row's first S tokens), and each head's output goes back to its token.
//
// LLaMA-Factory's patched LlamaAttention (longlora.py) differs in its shift back: the reshape
// that should undo the grouping is not assigned, so its roll runs within each group and puts the
// output computed for token t + G at position t for the first S slots of every group (future
// tokens leak into those predictions). unillm returns every output to its own token, as the
// LongLoRA paper and its reference code do. Padding is never attended by a real token (that
// eager mask reuses the first group's block for every group).
//
// Implemented with differentiable row gathers around the causal kernel: q/k/v [N, H, D] are seen
// as [2N, H/2 · D] (row 2n + j = token n's half j), gathered into [2B, T] rows — half 0's rows,
// then half 1's rolled ones — attended with segment ids = (group, segment or padding), and the
// output gathered back.
#pragma once

#include <memory>
#include <vector>

#include "core/tensor.h"

namespace unillm::nn {

struct ShiftedGroups {
  int64_t rows = 0, tokens = 0, group = 0, shift = 0;
  Tensor order;    // [2N] i32 (CPU): gathered row r comes from row order[r] of the [2N, ·] view
  Tensor inverse;  // [2N] i32 (CPU): the gather back
  Tensor segment_ids;  // [2B, T] i32 on the model's device
};

// The layout of one training call's B × T tokens. segment_ids [B, T] (packed samples; undefined:
// one per row) and lengths (real tokens per row, the rest padding; empty: no padding) on the
// host. Throws ConfigError when T · ratio < 1 or T is not a multiple of the group.
std::shared_ptr<const ShiftedGroups> make_shifted_groups(int64_t rows, int64_t tokens, double ratio,
                                                         const Tensor& segment_ids,
                                                         const std::vector<int32_t>& lengths, Device device);

// q [N, H, D], k and v [N, Hkv, D] (N = B·T) → [N, H, D]. H must be even. GQA: when the kv heads
// cannot be halved with their query heads, they are repeated to H first (LLaMA-Factory repeats
// them before shifting).
Tensor shifted_group_attention(const Tensor& q, const Tensor& k, const Tensor& v, const ShiftedGroups& g,
                               float scale);

// The same for a block of the model's heads (tensor parallelism: a rank's heads): q [N, h, D] holds
// heads [first, first + h) of the model's `total` (k and v their key/value heads), the shift
// applying to heads total/2 and up, wherever that falls in the block. Each head is laid out as a
// row of its own (its half's order) around the causal kernel, so the block may hold unshifted heads,
// shifted ones or both; concatenated over the blocks it is shifted_group_attention of all heads.
Tensor shifted_group_attention_part(const Tensor& q, const Tensor& k, const Tensor& v, const ShiftedGroups& g,
                                    float scale, int64_t first, int64_t total);

}  // namespace unillm::nn
