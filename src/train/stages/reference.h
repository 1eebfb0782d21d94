// The reference model of the preference stages (docs/ARCHITECTURE.md, "The reference"): per-row
// summed log-probs of a batch's response tokens under the frozen initial policy, without
// gradients. Three kinds:
//   adapters_off — LoRA without ref_model: the policy itself with its adapters switched off (PEFT's
//                  disable_adapter(); earlier adapters were merged into the base). No memory.
//   copy         — a frozen second model loaded from the reference's source (model_name_or_path,
//                  or ref_model + ref_model_adapters merged), all its parameters frozen.
//   precomputed  — one no-grad pass over every train and eval row before step 1, looked up by the
//                  batch's row indices; saved into each checkpoint (reference_logps.json), since
//                  the initial policy is gone when a run resumes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/batch_loader.h"
#include "models/causal_lm.h"
#include "train/args.h"
#include "train/memory_plan.h"
#include "train/stages/stage.h"

namespace unillm::train {

enum class RefKind { adapters_off, copy, precomputed };
const char* ref_kind_name(RefKind k);

// Summed log-probs of every row of b (labels shifted, −100 not scored), no gradient; the
// adapters of `adapters` (unset: the model's active set, {}: none); shift_attn: through S²-Attn
// (a training forward of a run with shift_attn).
std::vector<double> row_logps(models::CausalLM& model, const data::Batch& b,
                              const std::optional<std::vector<std::string>>& adapters, bool shift_attn = false);

class Reference {
 public:
  static std::unique_ptr<Reference> adapters_off();
  // placement: what keeps the copy's parameters where they live (ZeRO-3's shards of them), held
  // as long as the model.
  static std::unique_ptr<Reference> copy(std::unique_ptr<models::CausalLM> model,
                                         std::shared_ptr<void> placement = nullptr);
  // The log-probs of every row of train and eval under `initial` (the policy before step 1),
  // batch_examples examples per forward.
  static std::unique_ptr<Reference> precompute(models::CausalLM& initial, const data::TokenizedDataset& train,
                                               const data::TokenizedDataset& eval,
                                               const data::LoaderOptions& lo, int64_t batch_examples);
  // A precomputed table saved by save() into a checkpoint dir; IoError/DataError naming the file
  // when it is missing or does not fit the datasets' row counts.
  static std::unique_ptr<Reference> load(const std::string& dir, const data::TokenizedDataset& train,
                                         const data::TokenizedDataset& eval);

  RefKind kind() const { return kind_; }
  // copy: the frozen model (ASFT's loss reads its hidden states and lm_head); else nullptr.
  models::CausalLM* model() const { return model_.get(); }
  // The reference log-probs of b's rows (eval: b comes from the evaluation rows). shift_attn: a
  // training step of a run with shift_attn — the policy with its adapters off attends through
  // S²-Attn as the policy does (LLaMA-Factory's patched attention applies in training mode, and
  // PEFT's disable_adapter() leaves the model in it); a frozen copy attends fully (LLaMA-Factory
  // loads its reference model for inference, without the shift).
  std::vector<double> logps(models::CausalLM& policy, const data::Batch& b, bool eval, bool shift_attn = false);
  // precomputed: writes dir/reference_logps.json; the other kinds hold nothing to save.
  void save(const std::string& dir) const;

 private:
  explicit Reference(RefKind k) : kind_(k) {}
  RefKind kind_;
  std::unique_ptr<models::CausalLM> model_;  // copy
  std::shared_ptr<void> placement_;          // copy: ZeRO-3's shards of model_'s parameters
  std::vector<double> train_, eval_;         // precomputed, by dataset row
};

// The reference a stage holds (dpo with a reference loss, kto): LoRA without ref_model switches
// the adapters off (ref_mode precompute excepted); otherwise a frozen copy when ref_mode is model,
// or auto and the plan with the copy fits `limit` (0 = unknown: fits), else precomputed log-probs
// of `rows` rows. Sets kind and in's reference fields; returns the advice for a refusal when a
// forced copy does not fit ("" otherwise).
std::string plan_reference(const TrainArgs& a, MemoryPlanInputs& in, int64_t limit, int64_t rows, RefKind& kind);
// Builds the reference of `kind` for `policy`: a precomputed table is read from ctx.resume_dir when
// the run resumes, else computed with the initial policy (the policy itself before step 1 when it
// is the reference's source, otherwise a loaded copy, freed afterwards).
std::unique_ptr<Reference> make_reference(RefKind kind, const TrainArgs& a, models::CausalLM& policy,
                                          const PrepareContext& ctx);

}  // namespace unillm::train
