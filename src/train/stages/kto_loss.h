// LLaMA-Factory's KTO loss (stage kto: CustomKTOTrainer.get_batch_loss_metrics over TRL 0.8's
// KTOTrainer.kto_loss) as host math in double on per-sequence log-probs, with the closed-form
// gradient w.r.t. the summed policy target log-probs, and the metrics it stores for its log
// (docs/ARCHITECTURE.md, "Preference training (issue 17)").
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace unillm::train {

// pref_beta, kto_chosen_weight, kto_rejected_weight, pref_ftx. Checked by kto_loss(): beta > 0,
// weights ≥ 0 and finite, ftx ≥ 0. As LLaMA-Factory, the sft term is added only when
// ftx > 1e-6 and the micro-batch holds a desirable example.
struct KtoLossConfig {
  double beta = 0.1;
  double desirable_weight = 1.0;    // kto_chosen_weight
  double undesirable_weight = 1.0;  // kto_rejected_weight
  double ftx = 0;                   // pref_ftx
};

// One micro-batch of B examples, in the batch's example order (data::Batch::tags). Log-probs are
// SUMMED over the row's scored response tokens (get_batch_logps). The KL log-probs come from the
// KL rows (each example's prompt with another example's response); the policy's KL forward runs
// without gradient in LLaMA-Factory, so KL is a constant here and no gradient flows to
// policy_kl.
struct KtoLossInput {
  std::vector<double> policy, reference;        // [B] target rows
  std::vector<double> policy_kl, reference_kl;  // [B] KL rows
  std::vector<double> length;                   // [B] scored tokens of the target rows, > 0
  std::vector<uint8_t> desirable;               // [B] kto_tag: 1 desirable (chosen), 0 not
};

// A figure LLaMA-Factory logs as a ratio of sums: at log time it adds `sum` and `count` over
// every micro-batch of the interval (and across processes) and logs Σsum / Σcount under `key`
// (CustomKTOTrainer.log; stored as "<key>_sum" and "count/<split>").
struct KtoRatioMetric {
  std::string key;  // "rewards/chosen", "logps/chosen", "rewards/rejected", "logps/rejected"
  double sum = 0;
  double count = 0;  // desirable (chosen) or undesirable (rejected) examples of the micro-batch
};

struct KtoLossOutput {
  // losses.nanmean() over the B concatenated weighted terms (desirable first, then
  // undesirable: the order does not change the mean), + ftx·mean_c(−π/len)·B/n_c when
  // ftx > 1e-6 and n_c > 0 (LLaMA-Factory's "rescale": the mean over the n_c desirable examples
  // divided by n_c and multiplied by B).
  double loss = 0;
  // d loss / d summed policy target log-prob, [B] (a new vector; the caller scales and
  // accumulates).
  std::vector<double> d_policy;
  // KL = max(0, mean over the B KL rows of (policy_kl − reference_kl)), the estimate both terms
  // use; LLaMA-Factory stores it as "kl" and its log SUMS it over the interval's micro-batches
  // (every stored metric is summed there; TRL 0.8's own log averaged it).
  double kl = 0;
  // LLaMA-Factory's stored sums, in its order: rewards/chosen (Σ β(π−ρ) over desirable
  // examples), logps/chosen (Σ π), then rewards/rejected, logps/rejected; a split with no example
  // in the micro-batch has no entries (as LLaMA-Factory's `if num_chosen > 0`). logits/chosen|
  // rejected come from the stage: LLaMA-Factory's logits/<split>_sum is the sum of every logit
  // of the split's target rows ([n, T, V], padding included), divided by count/<split> at log.
  std::vector<KtoRatioMetric> metrics;
};

// Throws ConfigError for a bad config, ShapeError when a vector's size differs from B, B is 0 or a
// length is not positive.
KtoLossOutput kto_loss(const KtoLossConfig& cfg, const KtoLossInput& in);

// CustomKTOTrainer.log over one logging interval: `summed` holds each key's sum and count added
// up over the interval's micro-batches (one entry per key; the stage's logits/* included),
// kl_sum the interval's Σ kl. Returns, in LLaMA-Factory's order: for chosen then rejected, when
// that split's count > 0, rewards/<split>, logps/<split>, logits/<split> (each that is present)
// = sum / count; rewards/margins = rewards/chosen − rewards/rejected when both exist; kl = kl_sum.
// Names carry no eval_ prefix.
std::vector<std::pair<std::string, double>> kto_log_metrics(
    const std::vector<KtoRatioMetric>& summed, double kl_sum);

}  // namespace unillm::train
