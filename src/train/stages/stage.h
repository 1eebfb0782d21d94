// A training stage (docs/ARCHITECTURE.md, "Preference training"): what a stage owns of a run —
// its data, the loss of one micro-batch with its backward, evaluation and metrics. The trainer
// (trainer.cpp) keeps everything else: the step loop, accumulation, loss scaling, clipping, the
// optimizer, logging, checkpoints and resume. make_stage is the one place that compares stage
// names.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "data/batch_loader.h"
#include "data/sft.h"
#include "dist/process_group.h"
#include "io/tokenizer.h"
#include "models/causal_lm.h"
#include "train/args.h"
#include "train/memory_plan.h"

namespace unillm::train {

class ParamShards;

// Named figures of one micro-batch or evaluation batch, in the order they are logged.
using StageMetrics = std::vector<std::pair<std::string, double>>;
// A figure logged as a ratio of sums over the logging interval (or the evaluation): its sums and
// counts are added up over the micro-batches (batches), then Stage::summarize turns them into
// what is logged (by default Σsum / Σcount: rm's accuracy over every pair, KTO's per-split means).
struct SumMetric {
  std::string name;
  double sum = 0, count = 0;
};
using SumMetrics = std::vector<SumMetric>;
// Adds b's entries to a's by name, keeping first-seen order.
void add_sums(SumMetrics& a, const SumMetrics& b);

struct StageData {
  data::TokenizedDataset train, eval;
  int32_t pad_id = 0;
  std::optional<int32_t> mask_label_id;  // LoaderOptions::mask_label_id
  std::string description;  // for the log: "sft, template 'llama2'"
};

struct MicroOptions {
  // d(step loss)/d(this micro-batch's loss) × the fp16 loss scale: what backward is seeded with.
  double seed = 1;
  // The same for a term the step sums over its micro-batches, whatever their token counts
  // (MicroResult::aux_loss): the loss scale.
  double aux_seed = 1;
  bool recompute = true;
  Rng* rng = nullptr;  // dropout (checkpointed with the run)
  // ZeRO-3's stand-in micro-batch (a process short of micro-batches in the epoch's last group):
  // its result is dropped, and it takes part in a round's exchange (PrepareContext::exchange) as
  // having no micro-batch.
  bool stand_in = false;
  // Run backward even with a zero seed (which otherwise skips it): under expert parallelism a
  // stand-in's backward carries the gradients its experts get from the other processes' tokens.
  bool backward_always = false;

  // These options for a stand-in under expert parallelism: its loss and load-balancing term
  // seeded with zero, its backward still run (the gradients its experts get from the others).
  MicroOptions expert_stand_in() const {
    MicroOptions o = *this;
    o.stand_in = true;
    o.seed = o.aux_seed = 0;
    o.backward_always = true;
    return o;
  }
};

struct MicroResult {
  double loss = 0;  // this micro-batch's loss (its share of the step's is micro_weight × loss)
  // A term of the step's loss that is not weighted by micro_weight but summed over the step's
  // micro-batches, on every process (the router load-balancing loss of a mixture-of-experts model).
  double aux_loss = 0;
  StageMetrics metrics;  // averaged over the logging interval's micro-batches
  SumMetrics sums;       // summed over the interval, then summarize()d
};

// One evaluation batch: the loss summed over `count` units (tokens, or pairs) and its metrics:
// `metrics` are averaged over the evaluation's batches (LLaMA-Factory's stored metrics), `sums`
// added up over them and summarize()d (per-unit figures over every prediction, as HF's
// compute_metrics: the reward model's accuracy).
struct EvalPart {
  double loss_sum = 0;
  int64_t count = 0;
  StageMetrics metrics;
  SumMetrics sums;
};

// What a stage's prepare() may need beyond the model: where the base came from, whether the run
// resumes, how the trainer loads frozen weights, the data and the log.
struct PrepareContext {
  std::string model_dir;   // the resolved model_name_or_path
  std::string resume_dir;  // the checkpoint being resumed, "" for a fresh run
  std::string hf_cache_root;
  models::LoadOptions frozen_load;  // device and dtype of frozen weights (f32, or bf16/f16 mixed)
  const data::TokenizedDataset* train = nullptr;
  const data::TokenizedDataset* eval = nullptr;
  data::LoaderOptions loader;  // pad id (and batch size) of the run's batches
  std::function<void(const std::string&)> say;
  // Data parallelism: one value from every replica, in rank order (a replica without a
  // micro-batch in this round gives none), and this process's place in that order (its
  // replica's); null with one process. Rounds are the micro-batches that the data-parallel
  // replicas run side by side, replica r holding the round's r-th, so rank order is the order one
  // process would run them in (under tensor parallelism a replica is a tp group, whose processes
  // run the same micro-batch: each gets the group's value once).
  struct Round {
    std::vector<std::optional<double>> values;
    int64_t mine = 0;
  };
  using Exchange = std::function<Round(std::optional<double>)>;
  // ZeRO-3: a frozen model the stage loads (a reference copy) is sharded over these processes as
  // the policy is (train/param_shards.h). Null: it stays whole.
  dist::ProcessGroup* shard_frozen_over = nullptr;
  // Beside pipeline stages holding their own layers shard_frozen_over is the pipeline group and a
  // frozen model is kept by owner: layer i whole on stage frozen_layer_owners[i] (the policy's
  // split, which the pipeline's passes run), the embedding on the first stage, the final norm and
  // lm_head on the last (a tied embedding on both). Empty: equal pieces (ZeRO-3).
  std::vector<int> frozen_layer_owners;
  // Told of each frozen model's shards the stage makes (the trainer opens their whole-model
  // scopes around evaluation's whole forwards); may be empty.
  std::function<void(ParamShards*)> frozen_sharded;
  Exchange exchange;
  int64_t dp_size = 1;  // the data-parallel replicas (a step's group is their micro-batches)
  // The same over evaluation rounds, whose replicas are every process where each evaluates alone
  // with whole forwards, and the tp groups where evaluation runs split forwards
  // (Run::evaluates_split).
  Exchange eval_exchange;
};

class Stage {
 public:
  virtual ~Stage() = default;
  virtual std::string name() const = 0;
  // The training and evaluation rows (tok: the run's tokenizer, tokenizer_dir where it lives).
  virtual StageData load_data(const io::Tokenizer& tok, const std::string& tokenizer_dir) = 0;
  // The rows came from tokenized_path instead of load_data (train/tokenized_path.h): the stage
  // keeps what it would have kept of them (a precomputed reference table's size).
  virtual void adopt_data(const StageData& d) {}
  // Adds what the stage holds besides the policy (a reference model) to the memory plan's inputs;
  // limit: the memory available (0 = unknown), which a stage may choose by. Returns a sentence
  // for the trainer's refusal when the plan does not fit ("" = nothing stage-specific).
  virtual std::string plan_memory(MemoryPlanInputs& in, int64_t limit) { return ""; }
  // After the policy is loaded and set up for fine-tuning, before step 1 (or the resumed step).
  virtual void prepare(models::CausalLM& model, const PrepareContext& ctx) {}
  // True when prepare() changes which parameters train (a value head, a frozen lm_head): it then
  // runs before the arena is built. Otherwise ZeRO-3 runs it after the policy is sharded, so a
  // reference copy loads beside the policy's pieces rather than the whole policy.
  virtual bool prepare_changes_trainables() const { return false; }
  // Trainable modules the stage adds to the model's (the arena packs them after the model's).
  virtual std::vector<nn::Module*> extra_modules() { return {}; }
  // Writes the stage's own state into a dir being written: a checkpoint (prepare() reads it back
  // from PrepareContext::resume_dir) or, checkpoint false, the final output.
  virtual void save_extra(const std::string& dir, bool checkpoint) const {}
  // A token classifier's score head that the model or adapter is saved with in place of the
  // lm_head (models::SaveOptions::token_classification_head); empty for a causal LM.
  virtual nn::NamedTensors saved_head() const { return {}; }
  // The weight of each micro-batch's loss in the step's loss: the step loss is
  // Σ micro_weight · MicroResult::loss over the step's micro-batches.
  virtual double micro_weight(const std::vector<data::Batch>& group) const = 0;
  // Forward, loss and backward (seeded with o.seed) of one micro-batch.
  virtual MicroResult train_micro(models::CausalLM& model, const data::Batch& b, const MicroOptions& o) = 0;
  // Pipeline parallelism (train/pipeline.h), which every stage runs under. The batch the policy's pipelined forward runs for micro-batch b (micro: its dropout generator,
  // not advanced; o: the step's options): to_train_batch(b) by default.
  virtual models::TrainBatch pipeline_batch(models::CausalLM& model, const data::Batch& b, const Rng& micro,
                                            const MicroOptions& o) const;
  // A forward without gradients through the pipeline's stages (Pipeline::forward_only): `model`,
  // the batches, and what the last stage does with each batch's final hidden states.
  using PipelinePass = std::function<void(models::CausalLM& model, const std::vector<models::TrainBatch>& batches,
                                          const std::function<void(int, const Tensor&)>& last)>;
  // Before the step's pipelined forwards and backwards: the forward-only passes the head will need
  // (a reference's log-probs or hidden states, KTO's KL rows), run through `pass` on every
  // process of the pipeline; micros: this process's micro-batches of the step, in order, and
  // policy: their pipeline_batch()es.
  virtual void pipeline_prepare(models::CausalLM& model, const std::vector<const data::Batch*>& micros,
                                const std::vector<models::TrainBatch>& policy, const PipelinePass& pass) {}
  // The last pipeline stage's part of micro-batch `micro` (b, and tb as pipeline_batch made it,
  // its dropout generator at the state the stage's layers left it in): from the policy's final
  // hidden states x, the micro-batch's loss and metrics (as train_micro's) and the differentiable
  // root whose backward, seeded with grad × o.seed, gives its gradient (o.seed is also the hint
  // for an eager gradient).
  struct PipelineHead {
    Tensor root;
    std::vector<float> grad;
    MicroResult result;
  };
  virtual PipelineHead pipeline_head(models::CausalLM& model, const Tensor& x, int micro, const data::Batch& b,
                                     const models::TrainBatch& tb, const MicroOptions& o);
  // Pipeline parallelism: what the last stage's head carries from step to step (BCO's running
  // baseline), as text. After each step the trainer copies the last stage's to the other stages'
  // processes, so that every process evaluates, checkpoints and resumes with it.
  virtual bool keeps_head_state() const { return false; }
  virtual std::string head_state() const { return ""; }
  virtual void set_head_state(const std::string& text) {}
  // One evaluation batch, without gradients. stand_in: the batch only keeps ZeRO-3's gathers in
  // step with the other processes (its result is dropped; a stage exchanging per round takes
  // part with nothing, as in idle_round).
  virtual EvalPart eval_batch(models::CausalLM& model, const data::Batch& b, bool stand_in = false) = 0;
  // Evaluation through pipeline stages (Run::evaluate): whether a batch's evaluation is a function
  // of the policy's final hidden states of to_train_batch(b) alone, and that function, run on the
  // last stage. Elsewhere every process evaluates whole batches with eval_batch.
  virtual bool evaluates_from_hidden(const models::CausalLM& model) const { return false; }
  virtual EvalPart eval_from_hidden(models::CausalLM& model, const Tensor& hidden, const models::TrainBatch& tb);
  // Data parallelism: this process has no micro-batch (evaluation: no eval batch) in a round the
  // others run; a stage that exchanges per round (PrepareContext::exchange, eval_exchange) takes
  // part with nothing.
  virtual void idle_round(bool evaluation) {}
  // What is logged of an interval's (an evaluation's) added-up SumMetrics.
  virtual StageMetrics summarize(const SumMetrics& sums) const;
  // Whether the loss is a token cross-entropy (eval_perplexity = exp(eval_loss) is logged then).
  virtual bool token_loss() const { return false; }
  // Whether the loss is CausalLM::loss()'s plain token loss, which sequence parallelism splits by
  // tokens (nn/tensor_parallel.h): pt and sft without a loss variant.
  virtual bool model_token_loss() const { return false; }
  // The log keys plot_loss draws (LLaMA-Factory's workflow for the stage).
  virtual std::vector<std::string> plot_keys() const = 0;
};

// pt and sft (token cross-entropy), rm, dpo, kto. Throws NotImplemented for the others.
std::unique_ptr<Stage> make_stage(const TrainArgs& args);
// The units (one file each): lm_stage.cpp (pt, sft), reward_stage.cpp, dpo_stage.cpp,
// kto_stage.cpp.
std::unique_ptr<Stage> make_lm_stage(const TrainArgs& args);
std::unique_ptr<Stage> make_reward_stage(const TrainArgs& args);
std::unique_ptr<Stage> make_dpo_stage(const TrainArgs& args);
std::unique_ptr<Stage> make_kto_stage(const TrainArgs& args);

// Shared by the stages.
// The pad id: the tokenizer's pad token, else eos (LLaMA-Factory sets pad = eos).
int32_t pad_id_of(const io::Tokenizer& tok, int32_t eos);
// The model's view of a batch (positions 0.. per row unless the rows bring their own); shift_attn:
// through S²-Attn (set_shift_attn).
models::TrainBatch to_train_batch(const data::Batch& b, bool shift_attn = false);
// NEFTune on a training batch (alpha > 0): its noise seed is derived from the micro-batch's RNG
// without advancing it, so LoRA dropout draws what it draws without NEFTune, and the pipeline
// (which reseeds an RNG per micro-batch) gets the same noise as one process.
void set_neftune(models::TrainBatch& tb, double alpha, const Rng* micro_rng);
// shift_attn: S²-Attn on a training forward of pt / sft (models::TrainBatch::shift_attn_ratio).
void set_shift_attn(models::TrainBatch& tb, bool on);
// The preference stages' data set-up (rm, dpo, kto): the run's chat template (as training chooses
// it) into *tmpl, and the SFT options for `stage` with the pad id of that template's EOS.
data::SftOptions preference_data_options(const TrainArgs& a, const std::string& stage, const io::Tokenizer& tok,
                                         const std::string& tokenizer_dir,
                                         std::unique_ptr<data::ChatTemplate>* tmpl);
// A LLaMA-Factory v1 config's pairs (its dpo and rm: data::load_v1_pair_data over the config's
// train_dataset, cutoff_len and seed), the pad id the tokenizer's (else EOS); no evaluation set.
StageData v1_pair_data(const TrainArgs& a, const io::Tokenizer& tok, const std::string& tokenizer_dir,
                       std::string description);
// shift_attn's padding multiple: LLaMA-Factory's collators pad the preference stages' batches (and
// SFT's) to a multiple of 8, and S²-Attn's groups are a quarter of the padded length.
constexpr int64_t kShiftAttnMultiple = 8;
// b with its padding cut to its longest row rounded up to `multiple` (never longer than b's).
data::Batch trim_padding(const data::Batch& b, int64_t multiple);
// Labels scored by the model's shifted loss: positions 1.. of each row that are not ignored.
int64_t scored_labels(const data::Batch& b);

}  // namespace unillm::train
