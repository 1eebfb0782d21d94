// LLaMA-Factory's preference losses (pref_loss: sigmoid, hinge, ipo, kto_pair, orpo, simpo) as host
// math in double on per-sequence log-probs, with closed-form gradients w.r.t. the summed policy
// log-probs, and the metrics CustomDPOTrainer.get_batch_loss_metrics logs (docs/ARCHITECTURE.md,
// "Preference training (issue 17)").
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace unillm::train {

enum class PrefLoss { sigmoid, hinge, ipo, kto_pair, orpo, simpo };

// "sigmoid" → PrefLoss::sigmoid, ...; anything else: ConfigError naming the spelling and the
// choices.
PrefLoss pref_loss_from_name(const std::string& name);
const char* pref_loss_name(PrefLoss loss);

// pref_beta, dpo_label_smoothing, pref_ftx, simpo_gamma, pref_bco_weight. Checked by pref_loss():
// beta > 0; 0 ≤ label_smoothing ≤ 0.5 and > 0 only with sigmoid; ftx ≥ 0 and bco_weight ≥ 0, and
// neither with kto_pair (its 2B losses do not add to B per-pair terms in LLaMA-Factory either);
// bco_weight only with a reference. As LLaMA-Factory, the sft term is added only when ftx > 1e-6
// and the BCO term only when bco_weight > 1e-6.
struct PrefLossConfig {
  PrefLoss loss = PrefLoss::sigmoid;
  double beta = 0.1, label_smoothing = 0, ftx = 0, simpo_gamma = 0.5, bco_weight = 0;
};

bool pref_loss_uses_bco(const PrefLossConfig& cfg);  // bco_weight > 1e-6

// BCO's reward baseline: TRL's RunningMoments as LLaMA-Factory's bco_loss feeds it — one scalar per
// call (the micro-batch's mean reward), so its mean is the running average of those scalars
// (count starts at 1e-24, as TRL's). Every loss evaluation updates it, evaluation batches too,
// as there. Checkpointed by the dpo stage so that a resumed run continues exactly.
struct BcoRunning {
  double mean = 0, var = 1, count = 1e-24;
  void update(double x);
};

bool pref_loss_uses_reference(PrefLoss loss);  // false for orpo and simpo
bool pref_loss_averages(PrefLoss loss);        // true for ipo, orpo, simpo (log-probs / length)

// One micro-batch of B pairs. All log-probs are SUMMED over the row's scored response tokens;
// pref_loss divides them (policy and reference) by the row's length itself when the loss
// averages.
struct PrefLossInput {
  std::vector<double> policy_chosen, policy_rejected;        // [B]
  std::vector<double> reference_chosen, reference_rejected;  // [B]; empty when !uses_reference
  std::vector<double> chosen_len, rejected_len;              // [B] scored tokens per row, > 0
  double bco_delta = 0;  // BCO's baseline (BcoRunning::mean after this batch's update)
};

struct PrefLossOutput {
  // losses.mean() of LLaMA-Factory (mean over the B pairs, over the 2B terms for kto_pair),
  // the ftx·sft term included.
  double loss = 0;
  // d loss / d summed policy log-prob, [B] each (new vectors; the caller scales and accumulates).
  std::vector<double> d_policy_chosen, d_policy_rejected;
  // LLaMA-Factory's names and order, without the eval_ prefix: rewards/chosen, rewards/rejected,
  // rewards/accuracies, rewards/margins, logps/chosen, logps/rejected (the log-probs as the loss
  // saw them: averaged for ipo/orpo/simpo), and for orpo sft_loss, odds_ratio_loss. Means over
  // the micro-batch. logits/chosen|rejected come from the stage, not from here.
  std::vector<std::pair<std::string, double>> metrics;
};

// BCO's per-call input to BcoRunning::update: the mean of β·(policy − reference) log-ratios over
// the batch's 2B rows, as the loss sees the log-probs (averaged for ipo).
double bco_batch_reward(const PrefLossConfig& cfg, const PrefLossInput& in);

// Throws ConfigError for a bad config, ShapeError when the vectors' sizes differ from B, a
// reference is missing (or given to orpo/simpo), B is 0 or a length is not positive.
PrefLossOutput pref_loss(const PrefLossConfig& cfg, const PrefLossInput& in);

}  // namespace unillm::train
