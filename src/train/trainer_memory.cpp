// The run's memory plan: built once the data (and so the micro-batch shape) is known and before
// any weight is allocated, printed, checked against the limit the CLI found, and compared with
// the measured peak at the end.
#include <algorithm>
#include <filesystem>
#include <tuple>

#include "core/device.h"
#include "core/parallel.h"
#include "dist/gather_strings.h"
#include "io/checkpoint.h"
#include "train/finetune.h"
#include "train/trainer_run.h"
#include "train/vocab.h"

namespace unillm::train::detail {

namespace fs = std::filesystem;

namespace {

// Bytes of the largest tensor in the checkpoint (its file pages are resident while it is copied).
int64_t largest_tensor_bytes(const std::string& dir) {
  const auto ckpt = io::CheckpointReader::open(dir);  // headers only: no tensor page is touched
  int64_t n = 0;
  for (const auto& name : ckpt.names()) n = std::max(n, static_cast<int64_t>(ckpt.info(name).nbytes()));
  return n;
}

// The longest row the loader can put in a micro-batch (rows are padded to the batch's longest).
int64_t longest_row(const data::TokenizedDataset& d) {
  int64_t t = 1;
  for (int64_t r = 0; r < d.num_rows(); ++r) t = std::max(t, d.row_length(r));
  return t;
}

}  // namespace

void Run::plan_owned_layers(MemoryPlanInputs& in) const {
  const models::ModelConfig& c = in.model;
  const int pp = model_mesh_->shape().pp, rank = model_mesh_->coord().pp;
  const std::vector<int> owners = pipeline_layer_owners(c, pp, static_cast<int>(a_.virtual_pp_degree));
  const auto mine = static_cast<int64_t>(std::count(owners.begin(), owners.end(), rank));
  const int64_t vc = c.vocab_size * c.hidden_size, L = std::max<int64_t>(1, c.num_layers);
  const int64_t layer = std::max<int64_t>(0, in.params.base - vc * (c.tie_word_embeddings ? 1 : 2) - c.hidden_size) / L;
  // (a tied embedding is the last stage's, and the first stage holds a copy)
  const int64_t held = mine * layer + (rank == 0 ? vc : 0) + (rank == pp - 1 ? (c.tie_word_embeddings ? vc : vc + c.hidden_size) : 0) -
                       (rank == 0 && rank == pp - 1 && c.tie_word_embeddings ? vc : 0);
  in.owned_weights = std::min(1.0, static_cast<double>(held) / static_cast<double>(std::max<int64_t>(1, in.params.base)));
  // Adapters and freeze's layers train inside the layers; full fine-tuning trains what is held.
  const bool outside = in.params.embed_trainable || in.params.lm_head_trainable || in.params.final_norm_trainable;
  in.owned_trainable = outside ? in.owned_weights : static_cast<double>(mine) / static_cast<double>(L);
  in.largest_unit = std::max(layer, vc);
}

void Run::plan_memory_and_check(const std::string& from) {
  MemoryPlanInputs in;
  // A full-model checkpoint is loaded from `from`; its config is the base's.
  const bool lora = a_.adapter_tuning();  // lora or oft
  const std::string weights_dir = from.empty() || lora ? model_dir_ : from;
  in.model = models::load_model_config((fs::path(model_dir_) / "config.json").string());
  if (!a_.mixture_of_depths.empty()) in.model.mixture_of_depths = true;  // convert's routed layers
  in.params = summarize_params(in.model, a_);
  // A micro-batch holds batch-size examples of `group` rows each (a preference pair: 2).
  auto rows_for = [this](int64_t batch) {
    return std::max<int64_t>(1, std::min<int64_t>(batch, train_.num_rows() / train_.group)) * train_.group;
  };
  in.seq_len = longest_row(train_);
  in.recompute = !a_.disable_gradient_checkpointing;
  const bool low = low_precision_dtype(a_) != DType::f32;
  in.act_bytes = low ? 2 : 4;
  // LoRA loads its frozen base in the low dtype; freeze casts after loading (f32 while loading).
  in.frozen_weight_bytes = low ? 2 : 4;
  // Counted whether or not this CPU has bf16 arithmetic: an upper bound where it has not.
  in.bf16_compute = a_.bf16 && a_.bf16_compute;
  // From scratch nothing is read from a file (a LoRA resume reads only the adapter).
  const bool scratch = a_.train_from_scratch && (from.empty() || lora);
  in.largest_tensor_bytes = scratch ? 0 : largest_tensor_bytes(weights_dir);
  in.frozen_loaded_f32 = low && a_.finetuning_type == "freeze";
  in.baseline_bytes = read_process_memory().rss;
  in.threads = num_threads();
  in.optimizer = optimizer_config(a_).kind;
  // Pipeline stages holding their own layers split their state over the stage's replicas.
  const bool owned = stages_own_layers();
  // (a stage's processes: its dp × tp ranks)
  const int64_t stage_processes = model_mesh_ ? world_size() / model_mesh_->shape().pp : 1;
  if (owned && a_.zero_stage > 0)
    in.zero_shards = stage_processes;
  else if (a_.zero_stage > 0)  // over the sharding group (PaddleNLP's degree)
    in.zero_shards = sharding_degree() > 1 ? sharding_degree() : sharding_degree() == 1 ? 1 : world_size();
  // ZeRO-2 and -3 through ParamShards' units (Run::load): over Run::shard_groups' group.
  const int64_t unit_group = model_mesh_ && a_.pipeline_degree > 1 ? model_mesh_->shape().dp
                             : sharding_degree() > 1                ? sharding_degree()
                                                                    : world_size();
  if (a_.zero_stage == 2 && world_size() > 1 && zero3_fallback().empty() && !owned) in.grad_shards = unit_group;
  // Beside pipeline stages the units' optimizer state is split by range over the stages too
  // (Run::load's split_state), and a checkpoint gathers the part's whole state.
  if ((a_.zero_stage == 2 || a_.zero_stage == 3) && world_size() > 1 && zero3_fallback().empty() && model_mesh_ &&
      a_.pipeline_degree > 1 && !owned)
    in.state_gathered_at_save = model_mesh_->shape().pp;
  if (owned) {
    if (a_.zero_stage > 0) in.state_gathered_at_save = stage_processes;  // a save gathers the stage's state
    plan_owned_layers(in);
    in.reference_owned = true;  // (a reference copy, where the stage holds one: PrepareContext::frozen_layer_owners)
    in.policy_loaded_whole = !policy_whole_load_reason(from).empty();
  }
  if (a_.zero_stage == 3 && world_size() > 1 && zero3_fallback().empty()) {
    in.param_shards = unit_group;
    in.policy_loaded_whole = !policy_whole_load_reason(from).empty();
    in.saves_whole_model = a_.adapter_tuning() && (a_.pissa_convert || a_.resize_vocab);  // Run::SaveScope
  }
  if (model_mesh_ && a_.pipeline_degree > 1) {  // this stage's layers, as many micro-batches as its schedule holds at once
    const int rank = model_mesh_->coord().pp, pp = model_mesh_->shape().pp;
    in.pipeline_live = pipeline_live_per_layer(in.model.num_layers, pp, static_cast<int>(a_.virtual_pp_degree),
                                               static_cast<int>(a_.gradient_accumulation_steps), rank,
                                               loss_head_layers(in.model));
    in.pipeline_loss = rank == pp - 1;
  }
  if (model_mesh_ && (a_.tensor_degree > 1 || a_.context_degree > 1)) {
    MemoryPlanInputs::TensorSplit& ts = in.tensor_split;
    ts.degree = a_.context_degree * a_.tensor_degree;
    ts.sequence = a_.context_degree > 1 || a_.sequence_parallel;
    ts.mlp_degree = a_.tensor_degree;
    ts.lm_head = splits_lm_head(in.model.tie_word_embeddings && in.params.lm_head_trainable);
    if (tp_blocks_fallback().empty() && in.param_shards == 1) {  // Run::setup_tp_blocks
      in.tp_frozen_blocks = {ts.degree, ts.mlp_degree};
      in.frozen_cut_on_load = cuts_blocks_on_load(from);
    }
  }
  // The phases that gather them (Run::SaveScope writes frozen weights unless checkpoint_is_trainable_only).
  const bool saves_frozen = !a_.adapter_tuning() || a_.pissa_convert || wants_resize(a_);
  in.frozen_gathered = a_.load_best_model_at_end || (saves_frozen && !streams_blocks_on_save());
  in.frozen_streamed = saves_frozen && streams_blocks_on_save();
  // Evaluation and predict gather them a layer at a time unless they run split forwards.
  in.frozen_evaluated = (a_.do_eval && eval_.num_rows() > 0 && !evaluates_split(evaluates_accuracy())) ||
                        (loss_predict() && !evaluates_split(false));
  in.experts_evaluated = a_.do_eval && eval_.num_rows() > 0 && evaluates_accuracy();
  // Their batches: per_device_eval_batch_size examples padded to the longest row (of either set),
  // split as training's only where both run split forwards.
  const bool evaluates = a_.do_eval && eval_.num_rows() > 0, predicts = loss_predict() && test_.num_rows() > 0;
  for (const auto& [on, set, split] : {std::tuple{evaluates, &eval_, evaluates_split(evaluates_accuracy())},
                                       std::tuple{predicts, &test_, evaluates_split(false)}}) {
    if (!on) continue;
    const int64_t rows = std::max<int64_t>(1, std::min(a_.per_device_eval_batch_size, set->num_rows() / set->group)) * set->group;
    in.eval_split = (in.eval_rows == 0 || in.eval_split) && split;
    in.eval_rows = std::max(in.eval_rows, rows);
    in.eval_seq_len = std::max(in.eval_seq_len, longest_row(*set));
    in.eval_group = set->group;
  }
  // Through pipeline stages a pass holds up to 2·pp batches' final activations in flight (at most
  // the evaluation's batches).
  if (in.eval_rows > 0 && model_mesh_ && a_.pipeline_degree > 1) {
    const int64_t examples = std::max(evaluates ? eval_.num_rows() / eval_.group : 0,
                                      predicts ? test_.num_rows() / test_.group : 0);
    const int64_t batches = (examples + a_.per_device_eval_batch_size - 1) / a_.per_device_eval_batch_size;
    in.eval_in_flight = std::min(2 * a_.pipeline_degree, batches);
  }
  if (a_.expert_degree > 1 && !a_.use_badam && in.param_shards == 1) {  // Run::holds_own_experts_only
    in.expert_shares = a_.expert_degree;
    in.frozen_cut_on_load = in.frozen_cut_on_load || drops_experts_on_load(from);
  }
  const MemoryPlanInputs base = in;  // before the stage adds its own (a reference model)
  const int64_t limit = h_.memory_limit;
  std::string stage_advice;
  auto plan_for = [&](int64_t batch) {  // the stage's share depends on the rows (and may choose by them)
    in = base;
    in.rows = rows_for(batch);
    stage_advice = stage_->plan_memory(in, limit);
    plan_ = plan_memory(in);
  };
  plan_for(a_.per_device_train_batch_size);
  // HF's auto_find_batch_size (accelerate's find_executable_batch_size): on an out-of-memory
  // error it retries with int(0.9 × the batch size) until one runs. Here the memory plan says
  // which one fits before anything is allocated; a resume keeps the checkpoint's (check_resume).
  if (a_.auto_find_batch_size && from.empty() && limit > 0) {
    int64_t batch = a_.per_device_train_batch_size;
    const int64_t configured = batch;
    while (plan_.peak > limit && batch > 1) {
      batch = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(batch) * 0.9));
      plan_for(batch);
    }
    if (world_size() > 1) {  // every process steps with one batch size: the smallest that fits
      const int64_t mine = batch;
      for (const std::string& s : dist::allgather_strings(*h_.dp, std::to_string(batch)))
        batch = std::min<int64_t>(batch, std::stoll(s));
      if (batch != mine) plan_for(batch);
    }
    if (batch != configured) {
      say(UNILLM_MSG("auto_find_batch_size: per_device_train_batch_size ", configured, " -> ", batch,
                     " (the memory plan's peak ", format_bytes(plan_.peak), plan_.peak <= limit ? " fits " : " still exceeds ",
                     format_bytes(limit), ")"));
      a_.per_device_train_batch_size = batch;
      rebuild_loader();
    }
  }
  say(format_plan(plan_));
  if (limit <= 0 || plan_.peak <= limit) return;
  std::string advice = stage_advice.empty() ? memory_fit_advice(in, a_, limit) : stage_advice;
  if (advice.empty()) advice = "no single knob brings it under; use a smaller model or a larger machine";
  UNILLM_THROW(ConfigError, "[train] ", a_.config_path, ": the expected memory peak ", format_bytes(plan_.peak),
               " (weights ", format_bytes(plan_.weights), ", gradients + optimizer ",
               format_bytes(plan_.gradients + plan_.optimizer), ", activations ", format_bytes(plan_.activations()),
               " for ", in.rows, " x ", in.seq_len, " tokens) exceeds the ", format_bytes(limit), " available (",
               h_.memory_limit_source.empty() ? "limit" : h_.memory_limit_source, "); ", advice);
}

void Run::report_memory() const {
  const ProcessMemory m = read_process_memory();
  Allocator& a = backend_for(a_.device).allocator(a_.device.index);
  const auto alloc = static_cast<int64_t>(std::max(run_alloc_peak_, a.peak_bytes()));
  const double ratio = plan_.peak > 0 ? static_cast<double>(m.peak_rss) / static_cast<double>(plan_.peak) : 0.0;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", ratio);
  say("memory: predicted peak " + format_bytes(plan_.peak) + ", measured " + format_bytes(m.peak_rss) +
      " (measured/predicted " + buf + "; allocator peak " + format_bytes(alloc) + ", in the training steps " +
      format_bytes(static_cast<int64_t>(steps_alloc_peak_)) + ")");
}

}  // namespace unillm::train::detail
