// vocab_parallel_cross_entropy: Megatron's parallel cross-entropy over an lm_head split by
// vocabulary rows (PaddleNLP's tensor_parallel_output). Each rank of a tensor-parallel group holds
// rows [vocab_begin, vocab_begin + V_r) of the lm_head and every token's hidden state; per row it
// computes its logits' max, then Σ exp(logit − max), and its share of the target logit, and the
// group combines them (reduce: one max and one sum over the group, of per-row values), so
// lse = max + log Σ and loss_i = lse_i − z_{label_i} are one process's. The [N, V_r] logits exist one
// row chunk at a time: the gradients are computed eagerly in the forward (as
// linear_cross_entropy_eager_grad: assuming d(loss_sum) = grad_scale, rescaled in backward), dx
// [N, C] being this rank's share of the whole dx (summed over the group by the caller's collective)
// and dW [V_r, C] its rows' whole gradient.
#pragma once

#include <functional>
#include <vector>

#include "ops/cross_entropy.h"

namespace unillm::ops {

// Over the group, element by element, in place: the max (max = true) or the sum of every rank's
// values. Every rank calls it the same number of times with the same sizes.
using GroupReduce = std::function<void(std::vector<double>& values, bool max)>;

// x f32 [N, C] (every token's hidden state), w_part [V_r, C] f32/bf16/f16 (this rank's lm_head
// rows), labels i32 [N] in the whole vocabulary (−100: ignored; else in [0, vocab)). The result's
// loss_sum holds Σ loss_i over rows [value_begin, value_end) (−1: N) — the rows this rank
// accounts for — while its gradient is that of every row's loss (what this rank's share of dx
// and its dW need); count likewise counts those rows' labels. CPU tensors.
CrossEntropyResult vocab_parallel_cross_entropy(const Tensor& x, const Tensor& w_part, const Tensor& labels,
                                                int64_t vocab_begin, int64_t vocab, const GroupReduce& reduce,
                                                double grad_scale, int64_t value_begin = 0,
                                                int64_t value_end = -1);

}  // namespace unillm::ops
