// The reward model's scores (stage rm, `unillm eval reward`): the value head on the final hidden
// state of each row's last real token (LLaMA-Factory's attention_mask.sum(-1) − 1).
#pragma once

#include "data/batch_loader.h"
#include "models/causal_lm.h"
#include "models/value_head.h"

namespace unillm::train {

// Scores of every row of a batch of pairs (chosen rows, then rejected: Batch::group 2), [rows],
// differentiable unless under NoGradGuard. rng: dropout (LoRA's as configured, 0.1 on the head's
// input) in training; nullptr in evaluation. shift_attn: S²-Attn (a training forward of a run with
// shift_attn).
Tensor reward_scores(models::CausalLM& model, const models::ValueHead& head, const data::Batch& b,
                     bool recompute, Rng* rng, bool shift_attn = false);
// The same from the model's final hidden states x [rows · T, C] (a pipeline's last stage).
Tensor reward_scores_from_hidden(const models::ValueHead& head, const Tensor& x, const data::Batch& b, Rng* rng);

}  // namespace unillm::train
