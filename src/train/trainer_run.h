// Internal to the trainer: the state of one training run and its steps (trainer.cpp sets up
// and drives it, trainer_steps.cpp holds the step, checkpoints and logging, trainer_eval.cpp the
// evaluation, the best checkpoint and do_predict).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/rng.h"
#include "dist/mesh.h"
#include "data/batch_loader.h"
#include "io/safetensors_writer.h"
#include "models/causal_lm.h"
#include "train/adamw.h"
#include "train/grad_buckets.h"
#include "train/optimizer.h"
#include "train/param_shards.h"
#include "train/pipeline.h"
#include "train/checkpoint.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/memory_plan.h"
#include "train/stages/stage.h"
#include "train/trainer.h"
#include "train/trainer_log.h"
#include "train/tp_blocks.h"
#include "train/expert_shares.h"

namespace unillm::train::detail {

using Clock = std::chrono::steady_clock;
inline double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int64_t real_tokens(const data::Batch& b);
// Token accuracy counts (right, scored) of one batch, as PaddleNLP's compute_metrics with
// eval_with_do_generation false and LLaMA-Factory's ComputeAccuracy: position t of a row predicts
// token t + 1 and counts when that label is scored (not kIgnoreIndex, not padding); it is right
// when the first maximum of its logits is the label. Plain rows only (positions 0.., no segment
// ids): each row runs the model's inference forward over one KV cache, a chunk of positions at a
// time (at most 64 MiB of logits).
std::pair<int64_t, int64_t> token_accuracy_counts(models::CausalLM& model, const data::Batch& b);
// How many forwards token_accuracy_counts runs for b; and `forwards` one-token forwards whose
// results are dropped. Where every forward communicates (ZeRO-3's per-layer gathers, expert
// parallelism), each process of an evaluation round tops its batch's count up with stand-ins to
// the round's largest, so every process runs the same number of forwards.
int64_t token_accuracy_forwards(const models::ModelConfig& c, const data::Batch& b);
void token_accuracy_stand_ins(models::CausalLM& model, int64_t forwards);

// One evaluation: the loss (weighted by the stage's units: tokens or pairs), token accuracy when
// asked (else -1), and the stage's metrics as means over the evaluation batches.
struct EvalResult {
  double loss = 0;
  double accuracy = -1;
  StageMetrics metrics;
};
// Adds a batch's metrics to running (name, sum, count) entries, keeping first-seen order.
void accumulate_metrics(std::vector<std::tuple<std::string, double, int64_t>>& acc, const StageMetrics& m);

class Run {
 public:
  Run(const TrainArgs& a, const TrainerHooks& h) : a_(a), h_(h) {}
  TrainResult go();

 private:
  void setup_data();
  void load_tokenizer();
  // The memory plan (memory_plan.h): printed, and checked against TrainerHooks::memory_limit
  // before the weights are allocated (ConfigError naming the knob that would fit).
  void plan_memory_and_check(const std::string& from);
  // auto_find_batch_size: the batch size the memory plan fits (see trainer_memory.cpp).
  void rebuild_loader();
  bool checkpoint_is_trainable_only() const;
  // Whether saving writes tensor parallelism's blocked weights a weight at a time
  // (TpBlocks::Streamed: a model dir, with no ZeRO-2/3 units' own streaming beside) or gathers
  // them all for its duration (TpBlocks::Whole).
  bool streams_blocks_on_save() const { return !a_.adapter_tuning() && a_.zero_stage < 2; }
  // ZeRO-3 while the model is written (trainer_steps.cpp): on the writer, what save_trained's
  // before_read asks for; on the others, the same gathers, served from the constructor.
  class SaveScope {
   public:
    explicit SaveScope(Run& run);
    io::BeforeRead before_read();

   private:
    std::optional<ParamShards::Whole> whole_;
    std::optional<ParamShards::Streamed> streamed_;
    std::optional<TpBlocks::Whole> blocks_;
    std::optional<TpBlocks::Streamed> streamed_blocks_;
    std::optional<ExpertShares::Whole> experts_;
  };
  // enable_jit_checkpoint: every process agrees (one allreduce) whether any was asked to stop;
  // then this step is checkpointed (unless it just was) and the run ends interrupted.
  bool jit_stop_requested();
  TrainResult jit_checkpoint();
  int64_t last_saved_step_ = -1;
  void report_memory() const;
  void setup_schedule();
  void setup_annealing();
  void restore(const std::string& dir);
  void maybe_eval_and_save();
  void save_now();
  void run_eval();
  void step_plateau();  // reduce_lr_on_plateau after an evaluation in training
  // metric_for_best_model: compares this step's evaluation with the best so far; `dir` holds
  // the weights of this step (the checkpoint being written, or output_dir at the end).
  void update_best(const std::string& dir);
  // load_best_model_at_end: reloads the best checkpoint's weights (and evaluates them again).
  void load_best_at_end();
  void predict();
  // do_predict on an input_dir corpus: the test loss (predict_with_generate is the CLI's: predict.h).
  bool loss_predict() const { return a_.do_predict && !a_.predict_with_generate; }
  void say(const std::string& s) const {
    if (h_.info) h_.info(s);
  }
  void prepare_output_dir();
  void check_resume(const std::string& from);
  nlohmann::json run_settings() const;
  std::string resume_dir() const;
  void load(const std::string& from);
  // The stage's set-up after the policy is loaded (a preference stage's reference).
  void prepare_stage(const std::string& from);
  double train_step();
  // The run's processes (TrainerHooks::dp): this process's place, and rank 0 as the one writer.
  int64_t world_size() const;
  int64_t world_rank() const;
  // Data parallelism: the replicas (world / pipeline_parallel_degree) and this process's one.
  int64_t dp_size() const;
  int64_t dp_rank() const;
  void check_zero() const;
  // ZeRO's sharding group size as TrainArgs::sharding_degree says it (-1: every process); under
  // pipeline or tensor parallelism always every process (setup_model_mesh says why).
  // Why ZeRO stage 3 with several processes runs as stage 2 here ("" when it shards the
  // parameters: train/param_shards.h).
  std::string zero3_fallback() const;
  // Pipeline stages holding only their own layers (ParamShards by owner): "" where they do, else
  // why every stage holds the whole model (trainer_zero.cpp). Not asked outside pipeline runs.
  std::string own_layers_fallback() const;
  bool stages_own_layers() const;
  // load()'s arena, shards and optimizer for stages holding only their own layers.
  // place: the policy into the shards, as ZeroOptimizer's before_state; then `placed`.
  void setup_owned_layers(const std::vector<nn::Module*>& trainable, const OptimizerConfig& oc,
                          const std::function<void(ParamArena& shard)>& place, const std::function<void()>& placed);
  void plan_owned_layers(MemoryPlanInputs& in) const;  // the memory plan's shares for them
  // Why a ZeRO-3 policy is loaded whole on every process and then sharded ("" when it loads
  // straight into its shards, one layer whole at a time: ParamShards::begin_load): something
  // reads or rewrites whole weights between loading and sharding.
  // casts_as_read: the load casts each frozen linear it cuts to the mixed-precision dtype as it
  // reads it (cut_on_load), so that cast is no reason.
  std::string policy_whole_load_reason(const std::string& from, bool casts_as_read = false) const;
  int64_t sharding_degree() const { return model_mesh_ && a_.sharding_degree > 1 ? -1 : a_.sharding_degree; }
  // ZeRO's sharding group and the group of the ranks holding this rank's part in the other
  // sharding groups (null when one group spans every process): sharding_degree() below the
  // process count (mesh_, made on first use, collective), or ZeRO-3 under pipeline parallelism
  // (each stage's data-parallel replicas shard among themselves; the stages hold the same parts).
  std::pair<dist::ProcessGroup*, dist::ProcessGroup*> shard_groups(bool zero3);
  // Whether this process's sharding group is the checkpoint writer's (the one that serves its
  // ZeRO-3 gathers and sends its optimizer state; the other groups hold the same parts).
  bool in_writer_group() const { return !shard_replicas_ || shard_replicas_->rank() == 0; }
  void gather_eval_parts(std::vector<EvalPart>& parts, std::vector<std::pair<int64_t, int64_t>>& acc,
                         int64_t first, int64_t stride, bool contributes);
  bool writer() const { return world_rank() == 0; }
  // Pipeline and tensor parallelism (trainer_pipeline.cpp): the mesh (collective, before anything
  // is loaded), the pipeline once the model is, and a step's micro-batches through it.
  void setup_model_mesh();
  void setup_pipeline();
  // This process's share of the step's loss sum and aux sum (MicroResult's), on the loss's stage.
  std::pair<double, double> pipeline_micros(const std::vector<data::Batch>& group, const MicroOptions& mo,
                                            uint64_t step_seed);
  void dp_barrier();
  // The logging interval's metrics summed over the group (rank order, first-seen names).
  void merge_interval_metrics();
  // Throws NumericError naming the step (what: "the loss", "the gradient norm").
  [[noreturn]] void stop_non_finite(const std::string& what, double value) const;
  // Throws NumericError when the trainable weights hold NaN/inf; dir: what would be written.
  void check_weights_finite(const std::string& dir) const;
  // Whether evaluation (and do_predict's loss) runs training's split forwards, a tp group's
  // processes (under context parallelism the cp·T group's) evaluating the same batches together:
  // under tensor or context parallelism without pipeline or expert parallelism, where token
  // accuracy (inference forwards, never split) is not asked for; elsewhere each process runs whole
  // forwards, tensor parallelism's blocks gathered a layer at a time (TpBlocks::PerLayer).
  bool evaluates_split(bool accuracy) const;
  // Whether evaluation (and do_predict's loss) runs forward-only through the pipeline's stages,
  // each replica's batches, the last stage computing each batch's part from its hidden states
  // (Stage::evaluates_from_hidden): under pipeline parallelism where nothing gathers layers for
  // a whole forward (stage 3's pieces over a stage's replicas) or communicates per forward
  // (expert parallelism), and no token accuracy. Elsewhere each process runs whole forwards (stages
  // owning their layers broadcast each foreign layer around its forward).
  bool evaluates_through_pipeline(bool accuracy) const;
  // Whether the evaluation computes token accuracy (it decides the best checkpoint).
  bool evaluates_accuracy() const;
  // The examples [first, end) of ds (end -1: to the last).
  EvalResult evaluate(const data::TokenizedDataset& ds, bool accuracy, int64_t first = 0, int64_t end = -1);
  // Evaluation batch i of the dataset (evaluate's), and the two ways its batches are run, each
  // filling the parts of every batch on every process (trainer_eval.cpp).
  using EvalBatches = std::function<data::Batch(int64_t)>;
  void evaluate_through_pipeline(int64_t batches, const EvalBatches& batch, std::vector<EvalPart>& parts,
                                 std::vector<std::pair<int64_t, int64_t>>& acc);
  void evaluate_batches(int64_t batches, const EvalBatches& batch, bool accuracy, bool split,
                        std::vector<EvalPart>& parts, std::vector<std::pair<int64_t, int64_t>>& acc);
  // An evaluation's figures as logged and written: PREFIX_loss (_perplexity, _accuracy, the
  // stage's metrics), PREFIX "eval" or "eval_<name>" per dataset.
  nlohmann::json eval_keys(const std::string& prefix, const EvalResult& r) const;
  // Logs one evaluation under `prefix` ("eval", or "eval_<name>" per dataset).
  void log_eval(const std::string& prefix, const EvalResult& r, double runtime);
  // eval_on_each_dataset: each eval_dataset name's examples of eval_ and its last evaluation.
  struct EvalSplit {
    std::string name;
    int64_t first = 0, end = 0;
    EvalResult last{-1, -1, {}};
  };
  std::vector<EvalSplit> eval_splits_;
  // Replaces d.eval by the eval_dataset names loaded one by one (eval_splits_ their ranges).
  void compose_eval_splits(StageData& d);
  // metric_for_best_model's base metric (loss, accuracy, ...) and, per dataset, its split.
  std::pair<std::string, const EvalSplit*> best_metric_target() const;
  void log_step(double loss, double grad_norm, double lr);
  void write_results(const std::string& dir, const TrainResult& r, double runtime);
  TrainResult finish(double train_loss_sum, int64_t steps_this_run);
  // do_train: false: evaluate and/or predict the loaded model, write the metrics, train nothing
  // (trainer_eval_only.cpp).
  TrainResult evaluate_only();
  EvalResult last_eval_{-1, -1, {}};
  int64_t last_eval_step_ = -1;
  bool evaluating_split_ = false;  // inside an evaluation of split forwards (evaluate)
  // The shards of the frozen models the stage holds (a reference copy; PrepareContext::frozen_sharded).
  std::vector<ParamShards*> frozen_shards_;
  bool stop_early_ = false;  // HF's EarlyStoppingCallback ran out of patience (run_eval)
  // The last evaluation's metric_for_best_model, if it had one.
  std::optional<double> eval_metric();
  // v strictly better than the best so far (or no best yet), by greater_is_better: HF's
  // _determine_best_metric and EarlyStoppingCallback compare the same way.
  bool beats_best(double v) const;
  std::optional<double> test_loss_;  // do_predict
  std::string last_checkpoint_;  // the newest checkpoint of this run (or the resumed one)

  // A copy: auto_find_batch_size lowers per_device_train_batch_size before the loader is final.
  TrainArgs a_;
  const TrainerHooks& h_;
  std::string model_dir_;
  std::string tokenizer_dir_;  // model_dir_ unless tokenizer_name_or_path
  std::unique_ptr<io::Tokenizer> tok_;
  std::unique_ptr<Stage> stage_;  // the loss, data and metrics of a.stage
  std::unique_ptr<models::CausalLM> model_;
  std::unique_ptr<ParamArena> arena_;
  std::unique_ptr<ParamShards> shards_;
  size_t run_alloc_peak_ = 0, steps_alloc_peak_ = 0;  // the allocator's peak: the run's, the steps' only  // ZeRO-3: the parameters' units (null otherwise)
  std::unique_ptr<dist::DeviceMesh> mesh_;  // ZeRO's sharding and replica groups (before opt_: outlives it)
  dist::ProcessGroup* shard_replicas_ = nullptr;  // shard_groups()
  // Pipeline or tensor parallelism: the pp × dp × tp mesh (tp fastest).
  std::unique_ptr<dist::DeviceMesh> model_mesh_;
  // Stages holding their own layers beside tensor/context parallelism: the processes of this
  // process's stage (its dp × tp ranks), which sum the stage's gradients (setup_owned_layers).
  std::unique_ptr<dist::ProcessGroup> stage_group_;
  // Tensor parallelism (trainer_tensor_parallel.cpp): the mesh's tp group as the model sees it,
  // and the trainable parameters every rank of it computes whole (their gradients counted once:
  // from tp rank 0).
  std::unique_ptr<nn::Collective> tp_group_;
  std::vector<const Tensor*> tp_replicated_;
  void setup_tensor_parallel();
  // Frozen split weights held as this process's blocks (train/tp_blocks.h) where nothing else
  // owns the parameters' layout (null otherwise, or when nothing split is frozen);
  // tp_blocks_fallback() says why they stay whole ("" where blocks apply).
  std::unique_ptr<TpBlocks> tp_blocks_;
  std::string tp_blocks_fallback() const;
  void setup_tp_blocks();
  // The start-up line's clause on what each process of the group holds (blocks, or why whole).
  std::string held_weights() const;
  // The tp axis's groups (tp_group_, and mlp_group_ under context × tensor parallelism), made
  // once; split_model hands them to a model as setup_tensor_parallel does.
  void make_tp_groups();
  void split_model(models::CausalLM& m);
  // Where the frozen split weights are cut to their blocks as the model is read (LoRA's base),
  // so no process holds the whole model even while loading: blocks_on_load_fallback says why
  // not ("" where it applies, given tp_blocks_fallback() is ""); cut_on_load sets the load's
  // hooks.
  std::string blocks_on_load_fallback(const std::string& from) const;
  bool cuts_blocks_on_load(const std::string& from) const;
  // The same for expert parallelism's other processes' frozen experts (let go as read).
  bool drops_experts_on_load(const std::string& from) const;
  void cut_on_load(models::LoadOptions& lo, bool blocks, bool experts);
  std::string blocks_read_whole_;  // why the model was read whole before being cut ("": cut as read)
  // load_best_at_end's reload: the model is read whole (its blocks and expert shares are not made again).
  bool reloading_best_ = false;
  // tensor_parallel_output's split of the lm_head: pt and sft's token loss, no pipeline stages,
  // and not a trained embedding tied to it without sequence parallelism (whose lookup gradient
  // each process computes whole).
  bool splits_lm_head(bool tied_trained_embedding) const;
  // Context parallelism: the same group as sequence-parallel attention-only tensor parallelism;
  // beside tensor parallelism, the MLPs' group (a run of tensor_degree processes of it).
  void setup_context_parallel();
  std::unique_ptr<dist::ProcessGroup> mlp_process_group_;
  std::unique_ptr<nn::Collective> mlp_group_;
  // Expert parallelism (trainer_tensor_parallel.cpp): groups of expert_degree consecutive
  // data-parallel processes, as the model's sparse layers see them. Nothing else in the run
  // changes: every gradient is already the share the data-parallel sum expects.
  std::unique_ptr<dist::ProcessGroup> ep_process_group_;
  std::unique_ptr<nn::Collective> ep_group_;
  void setup_expert_parallel();
  // The other processes' experts' frozen weights let go (train/expert_shares.h) where nothing else
  // lays the parameters out (null otherwise, or when no expert weight is frozen).
  std::unique_ptr<ExpertShares> expert_shares_;
  bool holds_own_experts_only() const;
  bool expert_parallel() const { return ep_group_ != nullptr; }
  int64_t tp_rank() const { return model_mesh_ ? model_mesh_->coord().tp : 0; }
  // Each rank of a tensor-parallel group computes the same loss; rank 0's alone is counted (under
  // sequence parallelism each computes its tokens' share, and all are).
  bool counts_loss() const { return tp_rank() == 0 || model_->sequence_parallel(); }
  // Zeroes, on tp ranks other than 0, the gradients of the whole-computed parameters within arena
  // elements [lo, hi).
  void drop_replicated_grads(int64_t lo, int64_t hi);
  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<GradBuckets> buckets_;  // plain data parallelism: the gradient sum in buckets
  void setup_grad_buckets();
  std::unique_ptr<Optimizer> opt_;
  data::TokenizedDataset train_, eval_, test_;  // test_: do_predict
  std::unique_ptr<data::BatchLoader> loader_;
  data::LoaderOptions loader_opts_;
  ScheduleConfig sched_;
  TrainerState state_;
  std::unique_ptr<TrainerLog> log_;
  MemoryPlan plan_;
  std::optional<LossScaler> scaler_;  // fp16
  Rng rng_;
  int64_t total_steps_ = 0, log_every_ = 0, save_every_ = 0, eval_every_ = 0;
  bool eval_enabled_ = false, eval_by_epoch_ = false, save_by_epoch_ = false;
  // The current logging interval.
  double interval_loss_ = 0, interval_seconds_ = 0;
  int64_t interval_steps_ = 0, interval_tokens_ = 0;
  // The stage's metrics of the interval's micro-batches: (name, sum, count), in first-seen order
  // (logged as means, as LLaMA-Factory's stored metrics).
  std::vector<std::tuple<std::string, double, int64_t>> interval_metrics_;
  SumMetrics interval_sums_;  // the stage's ratio figures of the interval (Stage::summarize)
  Clock::time_point start_ = Clock::now();
};

}  // namespace unillm::train::detail
