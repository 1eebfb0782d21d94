// The training loop (see trainer.h). Steps group gradient_accumulation_steps micro-batches
// within an epoch (an epoch's last group may be shorter); the loss of a step is token-weighted
// over all its micro-batches (HF's num_items_in_batch).
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include "dist/counting_group.h"
#include "dist/gather_strings.h"
#include "dist/hosts.h"
#include "dist/mesh.h"
#include "data/error.h"
#include "models/adapter.h"
#include "models/inference_bundle.h"
#include "models/save.h"
#include "ops/matmul_compute.h"
#include "ops/quant.h"
#include "io/json_file.h"
#include "train/finetune.h"
#include "train/output_dir.h"
#include "train/resume_settings.h"
#include "train/rope_scaling.h"
#include "train/mixture_of_depths_config.h"
#include "train/trainer_run.h"
#include "train/zero.h"
#include "train/vocab.h"

namespace unillm::train {

namespace fs = std::filesystem;

namespace detail {

// Nothing is deleted: overwrite_output_dir only allows writing into a non-empty dir (as HF and
// LLaMA-Factory); the dirs the run reads are refused as output_dir (output_dir.h).
void Run::prepare_output_dir() {
  if (!writer()) return;  // data parallelism: rank 0 owns output_dir
  OutputDirRules r;
  r.output_dir = a_.output_dir;
  r.config_path = a_.config_path;
  r.overwrite = a_.overwrite_output_dir;
  r.resuming = a_.resume_from_checkpoint.kind != ResumeFrom::Kind::kNone;
  r.inputs = {{"model_name_or_path", model_dir_}, {"tokenizer_name_or_path", tokenizer_dir_}};
  for (const auto& d : a_.adapter_name_or_path) r.inputs.emplace_back("adapter_name_or_path", d);
  train::prepare_output_dir(r);
}

// A checkpoint's recorded settings against this run's, before anything is loaded.
void Run::check_resume(const std::string& from) {
  if (from.empty()) return;
  const std::string path = (fs::path(from) / "trainer_state.json").string();
  const nlohmann::json j = io::read_json_file(path);
  nlohmann::json recorded;
  if (j.is_object() && j.contains("unillm") && j["unillm"].is_object() && j["unillm"].contains("settings"))
    recorded = j["unillm"]["settings"];
  else
    say("note: " + path + " predates recorded settings; they are not compared");
  // HF's auto_find_batch_size resumes with the batch size the checkpoint trained with (the
  // recorded settings hold the one the run chose).
  const nlohmann::json* trained = nullptr;
  if (recorded.is_object() && recorded.contains("must_match") && recorded["must_match"].is_object() &&
      recorded["must_match"].contains("per_device_train_batch_size"))
    trained = &recorded["must_match"]["per_device_train_batch_size"];
  if (a_.auto_find_batch_size && trained && trained->is_number_integer() &&
      trained->get<int64_t>() != a_.per_device_train_batch_size) {
    say(UNILLM_MSG("auto_find_batch_size: per_device_train_batch_size ", trained->get<int64_t>(), " as ", from,
                   " trained (configured: ", a_.per_device_train_batch_size, ")"));
    a_.per_device_train_batch_size = trained->get<int64_t>();
  }
  for (const auto& w : check_resume_settings(recorded, run_settings(), from)) say("warning: " + w);
}

// The settings an exact resume needs: gradient_accumulation_steps counts the micro-batches of a
// step over all data-parallel processes, so a checkpoint of 2 processes × 1 resumes as 1 × 2.
nlohmann::json Run::run_settings() const {
  nlohmann::json s = resume_settings(a_);
  s["must_match"]["gradient_accumulation_steps"] = a_.gradient_accumulation_steps * dp_size();
  return s;
}

std::string Run::resume_dir() const {
  switch (a_.resume_from_checkpoint.kind) {
    case ResumeFrom::Kind::kNone: return "";
    case ResumeFrom::Kind::kPath:
      if (!fs::exists(fs::path(a_.resume_from_checkpoint.path) / "trainer_state.json"))
        UNILLM_THROW(ConfigError, "[train] resume_from_checkpoint '", a_.resume_from_checkpoint.path,
                     "' is not a checkpoint dir (no trainer_state.json)");
      return a_.resume_from_checkpoint.path;
    case ResumeFrom::Kind::kLatest: {
      std::string d = latest_checkpoint(a_.output_dir);
      if (d.empty())
        UNILLM_THROW(ConfigError, "[train] resume_from_checkpoint: true but ", a_.output_dir, " has no checkpoint-N");
      return d;
    }
  }
  return "";
}

// The tokenizer comes first: the data (and so the micro-batch shape of the memory plan) needs it
// before the weights are loaded. tokenizer_name_or_path (run_pretrain.py) names another dir; the
// model must then have an embedding row for every id of that tokenizer.
void Run::load_tokenizer() {
  model_dir_ = resolve_model_path(a_.model_name_or_path, h_.hf_cache_root);
  tokenizer_dir_ = a_.tokenizer_name_or_path.empty()
                       ? model_dir_
                       : resolve_model_path(a_.tokenizer_name_or_path, h_.hf_cache_root);
  const std::string config_path = (fs::path(model_dir_) / "config.json").string();
  models::ModelConfig cfg = models::load_model_config(config_path);
  if (!a_.rope_scaling.empty()) say(apply_rope_scaling(cfg, a_.rope_scaling, a_.cutoff_len, config_path));
  TrainingTokenizer tt = load_training_tokenizer(tokenizer_dir_, a_, cfg, config_path);  // vocab.h
  tok_ = std::move(tt.tokenizer);
  for (const auto& note : tt.notes) say(note);
  // Rows longer than the model's window train positions it never saw (RoPE extrapolates badly);
  // LLaMA-Factory trains them anyway, so this is a warning, not a refusal.
  const int64_t longest = a_.dataset_name_or_path.empty() ? a_.cutoff_len : a_.max_length;
  if (cfg.max_position_embeddings > 0 && longest > cfg.max_position_embeddings)
    say(UNILLM_MSG("warning: ", a_.dataset_name_or_path.empty() ? "cutoff_len " : "max_length ", longest,
                   " is beyond the model's max_position_embeddings ", cfg.max_position_embeddings, " (",
                   config_path, "): rows longer than that train positions the model was never trained on"));
}

void Run::load(const std::string& from) {
  models::LoadOptions lo;
  // A LoRA checkpoint holds only the adapter: the base comes from model_name_or_path.
  const bool lora = a_.adapter_tuning();  // lora or oft
  // Mixed precision keeps frozen matrices in bf16/f16. LoRA's base is all frozen, so it loads in
  // that dtype directly; freeze loads f32 (its trainable layers, and a resumed checkpoint's, stay
  // exact) and casts the frozen ones after choosing them.
  const DType low = low_precision_dtype(a_);
  lo.weight_dtype = lora && low != DType::f32 ? dtype_name(low) : "f32";
  lo.device = a_.device;
  if (!a_.rope_scaling.empty() || a_.moe_aux_loss_coef > 0 || !a_.mixture_of_depths.empty())
    lo.adjust_config = [this, from](models::ModelConfig& c) {
      if (!a_.rope_scaling.empty())  // said by load_tokenizer
        apply_rope_scaling(c, a_.rope_scaling, a_.cutoff_len, (fs::path(model_dir_) / "config.json").string());
      models::set_router_aux_loss(c, a_.moe_aux_loss_coef);
      apply_mixture_of_depths(a_, c, model_dir_, !from.empty());
    };
  // Stage 3 shards the parameters where it can (elsewhere it runs as stage 2, said below); its
  // gradients live in its units and shard, so the arena gets no whole gradient buffer. Its policy
  // is built lazy and read straight into the shards where nothing needs the whole weights first.
  const bool zero3 = a_.do_train && a_.zero_stage == 3 && world_size() > 1 && zero3_fallback().empty();
  // Stage 2 shards the gradients through the same units where stage 3 could shard the parameters
  // (ParamShards' keep_whole: each layer's gradients reduce-scattered as backward leaves it, the
  // parameters whole); elsewhere the arena's whole gradients are reduce-scattered after backward.
  // Pipeline stages hold only their own layers where they can (ParamShards by owner): the arena
  // has no whole gradient buffer either (each stage's gradients are views of its shard).
  const bool owned = stages_own_layers();
  const bool zero2_units = a_.do_train && a_.zero_stage == 2 && world_size() > 1 && zero3_fallback().empty() && !owned;
  const std::string whole_load = zero3 || owned ? policy_whole_load_reason(from) : "";
  const bool streamed = (zero3 || owned) && whole_load.empty();
  const std::string weights_dir = from.empty() || lora ? model_dir_ : from;
  if (zero3)
    say(streamed ? "ZeRO stage 3: the model is read straight into this process's shards, one layer whole at a time"
                 : "ZeRO stage 3: the model loads whole on every process before it is sharded (" + whole_load + ")");
  if (owned)
    say(streamed ? "pipeline parallel: each stage keeps only its own layers as the model is read, one layer whole at a time"
                 : "pipeline parallel: the model loads whole on every process before each stage keeps its own layers (" +
                       whole_load + ")");
  blocks_read_whole_ = blocks_on_load_fallback(from);
  if (a_.train_from_scratch && (from.empty() || lora)) {
    // The architecture from config.json and HF's initialisation from `seed`; no weights are read.
    // A LoRA resume rebuilds the same random base from the same seed.
    auto cfg = models::load_model_config((fs::path(model_dir_) / "config.json").string());
    if (lo.adjust_config) lo.adjust_config(cfg);
    model_ = models::build_causal_lm(cfg, DType::f32, a_.device);
    models::init_weights(*model_, cfg.initializer_range, static_cast<uint64_t>(a_.seed), cfg.pad_token_id);
    say("model: initialised from " + model_dir_ + "/config.json (train_from_scratch, seed " +
        std::to_string(a_.seed) + ")");
  } else if (streamed) {
    lo.lazy = true;
    model_ = models::build_for_load(weights_dir, lo);  // read by the ZeroOptimizer's before_state below
  } else {
    if (a_.quantization_bit > 0 && lora) lo.on_linear_loaded = qlora_load_hook(a_);
    // Frozen weights cut as they are read: tensor or context parallelism's blocks, others' experts
    const bool blocks = cuts_blocks_on_load(from), experts = drops_experts_on_load(from);
    if (blocks || experts) cut_on_load(lo, blocks, experts);
    model_ = models::load_causal_lm(weights_dir, lo);
  }
  if (model_->config().mixture_of_depths) {
    std::string routed;
    for (int64_t l = 1; l < model_->config().num_layers; l += 2) routed += (routed.empty() ? "" : ", ") + std::to_string(l);
    say("mixture_of_depths: layers " + routed + " route each row's top tokens through themselves (the "
        "mixture-of-depth package's rule: capacity 0.125 + 0.875 / training forwards so far)" +
        (model_->config().mod_convert ? "; new routers drawn from seed " + std::to_string(a_.seed) : ""));
  }
  // A token classifier (LLaMA-Factory v1's reward model) has a score head and no lm_head: only
  // v1's rm trains one on.
  const bool v1_rm = a_.stage == "rm" && !a_.v1_train_dataset.empty();
  if (model_->config().token_classification && !v1_rm)
    UNILLM_THROW(NotImplemented, "[train] ", a_.config_path, ": ", weights_dir, " is a token classifier (",
                 model_->config().architecture, ", LLaMA-Factory v1's reward model: no lm_head); stage ", a_.stage,
                 " needs a causal language model (a v1 config with stage=rm trains a token classifier on)");
  for (const auto& d : a_.adapter_name_or_path)
    if (models::is_token_classification_adapter(d) && !v1_rm)
      UNILLM_THROW(NotImplemented, "[train] ", a_.config_path, ": adapter ", d, " is a token classifier's "
                   "(TOKEN_CLS, LLaMA-Factory v1's reward model); stage ", a_.stage, " needs a causal language model's");
  // A full/freeze checkpoint already holds the grown, trained rows; a LoRA one's base does not.
  if ((from.empty() || lora) && !streamed)
    if (const std::string grown = grow_vocab(*model_, *tok_, a_); !grown.empty()) say(grown);
  if (a_.moe_aux_loss_coef > 0 && model_->config().num_experts == 0)
    say("moe_aux_loss_coef: ignored, " + model_dir_ + " is not a mixture-of-experts model (as LLaMA-Factory)");
  else if (model_->config().num_experts > 0 && model_->config().output_router_logits && a_.do_train)
    say(a_.stage == "pt" || a_.stage == "sft"
            ? UNILLM_MSG("router load-balancing loss: router_aux_loss_coef ", model_->config().router_aux_loss_coef,
                         " x the loss over ", model_->config().num_experts, " experts, added to the token loss")
            : "router load-balancing loss: not added in stage " + a_.stage +
                  ", as in LLaMA-Factory, whose rm/dpo/kto trainers read only the model's logits or values");
  prepare_finetuning(*model_, a_, lora ? from : "");
  if (const std::string note = oft_adjustment_note(*model_, a_); !note.empty()) say(note);
  if (low != DType::f32) cast_frozen_matrices(*model_, low);
  // A reference copy loads after the policy is sharded, and is sharded itself (prepare_stage).
  const bool prepare_later = (zero3 || (owned && streamed)) && !stage_->prepare_changes_trainables();
  if (!prepare_later) prepare_stage(from);  // a reference model, a value head
  if (!a_.do_train) return;  // evaluation only: no arena, no optimizer state
  std::vector<nn::Module*> trainable{&model_->module()};
  for (nn::Module* m : stage_->extra_modules()) trainable.push_back(m);
  arena_ = std::make_unique<ParamArena>(trainable, /*with_grads=*/!zero3 && !zero2_units && !owned, /*lazy=*/streamed);
  if (arena_->numel() == 0)
    UNILLM_THROW(ConfigError, "[train] ", a_.config_path, ": finetuning_type ", a_.finetuning_type,
                 " leaves no trainable parameter (check the freeze_* / lora_* keys)");
  if (a_.decay_all_params) decay_every_segment(*arena_);  // LLaMA-Factory v1: torch AdamW's one group
  if (a_.loraplus_lr_ratio) {
    apply_loraplus(*arena_, *a_.loraplus_lr_ratio, a_.loraplus_lr_embedding, a_.learning_rate);
    say("LoRA+: lora_B learning rate x " + std::to_string(*a_.loraplus_lr_ratio));
  }
  OptimizerConfig oc = optimizer_config(a_);
  const models::ModelConfig& mc = model_->config();  // Adam-mini's head blocks
  oc.hidden_size = mc.hidden_size, oc.num_heads = mc.num_heads, oc.num_kv_heads = mc.num_kv_heads;
  // Stage 3 where it cannot shard the parameters runs as stage 2, said here (the memory plan then
  // counts whole parameters on each process).
  const int64_t stage = zero3 ? 3 : std::min<int64_t>(a_.zero_stage, 2);
  if (a_.zero_stage == 3 && world_size() > 1 && !zero3 && owned)
    say("ZeRO stage 3 from " + a_.zero_from + ": the parameters are not sharded further " + zero3_fallback() +
        ": each stage holds only its own layers' weights, gradients and optimizer state");
  else if (a_.zero_stage == 3 && world_size() > 1 && !zero3)
    say("ZeRO stage 3 from " + a_.zero_from + ": the parameters are not sharded " + zero3_fallback() +
        "; this run shards the optimizer state and gradients as stage 2 does, and each process holds the whole "
        "model (the memory plan counts it)");
  if (model_mesh_ && a_.pipeline_degree > 1 && !owned && !zero3)
    say("pipeline parallel: every stage holds the whole model " + own_layers_fallback());
  // The policy into ParamShards' units, between copying this rank's pieces and making the
  // optimizer state: read straight into them, or cut from the whole model (the whole arena goes);
  // then a reference copy loads beside the pieces alone.
  auto place = [&](ParamArena& shard) {
    ParamShards* s = shards_.get();
    if (streamed) {
      s->begin_load(*arena_, shard);
      models::LoadOptions read = lo;
      read.before_copy = [s](const Tensor& t) { s->before_copy(t); };
      models::read_weights(*model_, weights_dir, read);
      s->loaded();
    } else {
      s->shard(*arena_, shard);
    }
    model_->set_layer_hooks({[s](int64_t l) { s->before_forward(l); }, [s](int64_t l) { s->after_forward(l); },
                             [s](int64_t l) { s->before_backward(l); }});
    model_->set_layer_backward_hook([s](int64_t l) { s->after_backward(l); });
  };
  auto prepare_placed = [&] {
    if (!prepare_later) return;
    const ParamShards::Root root(shards_.get());  // a precomputed reference's pass reads the policy as evaluation does
    prepare_stage(from);
  };
  if (owned) {
    setup_owned_layers(trainable, oc, place, prepare_placed);
  } else if (zero3 || zero2_units) {
    // PaddleNLP's sharding_parallel_degree (HF fsdp's hybrid_shard: a host's processes) below the
    // process count: each sharding group gathers its own units, and the groups' shards are summed
    // across them at each step (the replicas hold the same pieces).
    // Under pipeline stages the replicas are the other stages, which hold the same pieces of every
    // layer: they split the optimizer state too (each steps its range of the shard), so the state
    // is divided by every process, as stage 2 divides it.
    const auto [group, replicas] = shard_groups(true);
    const bool pipeline_stages = model_mesh_ && a_.pipeline_degree > 1;
    shards_ = std::make_unique<ParamShards>(trainable, model_->config().tie_word_embeddings, *arena_, *group,
                                            /*keep_whole=*/zero2_units);
    auto sharded = [&](ParamArena& shard) {
      place(shard);
      const std::string groups =
          replicas ? UNILLM_MSG(" (sharding groups of ", group->size(), ", ", replicas->size(), " replicas",
                                pipeline_stages ? ", one per stage, which split the optimizer state by range" : "", ")")
                   : std::string();
      if (zero2_units)
        say("ZeRO stage 2 from " + a_.zero_from + ": gradients and optimizer state sharded over " +
            std::to_string(group->size()) + " processes, each layer's gradients reduce-scattered as backward leaves it, in " +
            shards_->describe_gradients() + "; the parameters stay whole" + groups);
      else
        say("ZeRO stage 3 from " + a_.zero_from + ": parameters, gradients and optimizer state sharded over " +
            std::to_string(group->size()) + " processes in " + shards_->describe() + groups);
      prepare_placed();
    };
    opt_ = std::make_unique<ZeroOptimizer>(*arena_, *group, shards_->pieces(),
                                           [&oc](ParamArena& shard) { return make_optimizer(shard, oc); }, sharded,
                                           replicas, /*split_state=*/pipeline_stages);
  } else if ((stage == 1 || stage == 2) && world_size() > 1 && sharding_degree() == 1) {
    say("sharding_parallel_degree 1: no sharding group, the optimizer state is not sharded (plain data parallelism)");
    opt_ = make_optimizer(*arena_, oc);
  } else if ((stage == 1 || stage == 2) && world_size() > 1) {
    // PaddleNLP's sharding_parallel_degree below the process count: sharding groups of that size,
    // replicated across the rest (the mesh's sharding and dp groups).
    const int world = static_cast<int>(world_size());
    const int degree = sharding_degree() > 1 ? static_cast<int>(sharding_degree()) : world;
    const auto [group, replicas] = shard_groups(false);
    opt_ = std::make_unique<ZeroOptimizer>(*arena_, *group, static_cast<int>(stage),
                                           [&oc](ParamArena& shard) { return make_optimizer(shard, oc); }, replicas);
    const auto [lo, hi] = zero_range(arena_->numel(), group->size(), group->rank());
    say(UNILLM_MSG("ZeRO stage ", stage, ": this process keeps the optimizer state of elements [", lo, ", ",
                   hi, ") of ", arena_->numel(),
                   stage == 2 ? " and reduces only their gradients, after backward (the gradients are held whole " +
                                    zero3_fallback() + ")"
                              : "",
                   degree < world ? UNILLM_MSG(" (sharding groups of ", degree, ", ", world / degree, " replicas)")
                                  : std::string()));
  } else {
    opt_ = make_optimizer(*arena_, oc);
  }
}

void Run::prepare_stage(const std::string& from) {
  PrepareContext ctx;
  ctx.model_dir = model_dir_;
  ctx.resume_dir = from;
  ctx.hf_cache_root = h_.hf_cache_root;
  const DType low = low_precision_dtype(a_);
  ctx.frozen_load.weight_dtype = dtype_name(low);
  ctx.frozen_load.device = a_.device;
  ctx.train = &train_;
  ctx.eval = &eval_;
  ctx.loader = loader_opts_;
  ctx.say = [this](const std::string& s) { say(s); };
  ctx.dp_size = dp_size();
  // A stage's per-round values (BCO's batch rewards) through one allgather: training rounds over
  // the data-parallel replicas (under tensor parallelism those of this tp rank, whose peers run
  // the same micro-batch), evaluation rounds over every process where each evaluates alone, and
  // as training's where evaluation runs split forwards (evaluating_split_).
  auto exchange_over = [](dist::ProcessGroup& group) -> PrepareContext::Exchange {
    return [&group](std::optional<double> mine) {
      PrepareContext::Round out;
      out.mine = group.rank();
      for (const std::string& text : dist::allgather_strings(group, nlohmann::json(mine ? nlohmann::json(*mine) : nlohmann::json()).dump())) {
        const nlohmann::json v = nlohmann::json::parse(text);
        out.values.push_back(v.is_null() ? std::nullopt : std::optional<double>(v.get<double>()));
      }
      return out;
    };
  };
  if (shards_ && !shards_->keeps_whole() && !shards_->by_owner()) ctx.shard_frozen_over = shard_groups(true).first;  // (ZeRO-2: whole)
  if (stages_own_layers()) {  // a reference copy keeps the stage's layers, as the policy
    ctx.shard_frozen_over = &model_mesh_->pp();
    ctx.frozen_layer_owners = pipeline_layer_owners(model_->config(), static_cast<int>(a_.pipeline_degree),
                                                    static_cast<int>(a_.virtual_pp_degree));
  }
  frozen_shards_.clear();  // (a stage prepared again drops its models)
  ctx.frozen_sharded = [this](ParamShards* s) { frozen_shards_.push_back(s); };
  if (world_size() > 1) {
    dist::ProcessGroup& replicas = model_mesh_ ? model_mesh_->dp() : *h_.dp;
    ctx.eval_exchange = [this, whole = exchange_over(*h_.dp), split = exchange_over(replicas)](std::optional<double> v) {
      return evaluating_split_ ? split(v) : whole(v);
    };
    if (dp_size() > 1) ctx.exchange = exchange_over(replicas);
  }
  stage_->prepare(*model_, ctx);
}

// A run id only needs to differ between runs that share an output_dir.
static std::string new_run_id() {
  std::random_device rd;
  const auto now = std::chrono::system_clock::now().time_since_epoch().count();
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08x%016llx", rd(), static_cast<unsigned long long>(now));
  return buf;
}

void Run::restore(const std::string& dir) {
  state_ = load_checkpoint(dir, *opt_, *arena_);
  loader_->restore({state_.loader_epoch, a_.ignore_data_skip ? 0 : state_.loader_batch});
  if (!a_.restore_callback_states_from_checkpoint) state_.early_stopping_counter = 0;  // HF's default
  state_.early_stopping_patience = a_.early_stopping_steps.value_or(0);
  rng_.set_state(state_.rng);
  sched_.plateau_scale = state_.plateau.scale;  // reduce_lr_on_plateau resumes at its reduced rate
  last_checkpoint_ = dir;
  say("resumed from " + dir + " at step " + std::to_string(state_.global_step) +
      (a_.ignore_data_skip && state_.loader_batch > 0
           ? " (ignore_data_skip: epoch " + std::to_string(state_.loader_epoch) + "'s batches from its first, not its " +
                 std::to_string(state_.loader_batch + 1) + "th)"
           : ""));
}

// ZeRO with several processes: what is built (stages 1 and 2 of elementwise optimisers over the
// whole data-parallel group) or a clear refusal.
void Run::check_zero() const {
  if (a_.zero_stage == 0) return;
  const std::string from = " (" + a_.zero_from + ")";
  const std::string kind = optimizer_config(a_).kind;
  if (!zero_shardable(kind))
    UNILLM_THROW(NotImplemented, "[train] ZeRO stage ", a_.zero_stage, from, " with optimizer ", kind,
                 " is not implemented yet: its update reads whole matrices; AdamW and SGD are sharded");
  if (sharding_degree() > 1 && (sharding_degree() > world_size() || world_size() % sharding_degree() != 0))
    UNILLM_THROW(ConfigError, "[train] sharding_parallel_degree ", sharding_degree(), " does not divide the ",
                 world_size(), " data-parallel processes; give a divisor, or -1 for all of them");
}

TrainResult Run::go() {
  if (a_.parallelism && a_.parallelism->processes() != world_size()) {
    const auto& p = *a_.parallelism;
    UNILLM_THROW(ConfigError, "[train] ", p.where, ": parallelism_config asks for ", p.processes(),
                 " processes (dp_replicate_size ", p.dp_replicate, " × dp_shard_size ", p.dp_shard, " × tp_size ", p.tp,
                 " × cp_size ", p.cp, ") but the job has ", world_size(),
                 " (accelerate's rule; run it under mpirun -np ", p.processes(), " or unillm launch --nproc ",
                 p.processes(), ")");
  }
  if (a_.sharding_per_host && world_size() > 1) {  // fsdp hybrid_shard[_zero2]: a host's processes shard
    a_.sharding_degree = dist::processes_per_host(*h_.dp);
    say(UNILLM_MSG("ZeRO stage ", a_.zero_stage, " from ", a_.zero_from, ": sharding groups of each host's ",
                   a_.sharding_degree, " processes, replicated over ", world_size() / a_.sharding_degree,
                   world_size() == a_.sharding_degree ? " host" : " hosts"));
  }
  setup_model_mesh();
  if (a_.split_batches && dp_size() > 1) {  // accelerate's split_batches: the given sizes are global
    for (auto [size, key] : {std::pair{&a_.per_device_train_batch_size, "per_device_train_batch_size"},
                             std::pair{&a_.per_device_eval_batch_size, "per_device_eval_batch_size"}}) {
      if (*size % dp_size() != 0)
        UNILLM_THROW(ConfigError, "[train] ", a_.config_path, ": split_batches: ", key, " ", *size,
                     " is the global batch and must be a multiple of the ", dp_size(),
                     " data-parallel processes (accelerate's rule)");
      *size /= dp_size();
    }
    say(UNILLM_MSG("split_batches: each of the ", dp_size(), " data-parallel processes takes ",
                   a_.per_device_train_batch_size, " rows of each training batch and ", a_.per_device_eval_batch_size,
                   " of each evaluation batch"));
  }
  if (a_.v1_global_batch_size) {  // LLaMA-Factory v1: accumulation = global / (dp · micro), its BatchGenerator's rule
    const int64_t per_step = dp_size() * a_.per_device_train_batch_size, global = *a_.v1_global_batch_size;
    if (global % per_step != 0)
      UNILLM_THROW(ConfigError, "[train] ", a_.config_path, ": global_batch_size ", global, " must be a multiple of ",
                   dp_size(), " data-parallel processes × micro_batch_size ", a_.per_device_train_batch_size,
                   " (LLaMA-Factory v1's rule)");
    a_.gradient_accumulation_steps = global / per_step;
  }
  if (world_size() > 1) {
    check_zero();
    if (dp_size() > 1)
      say("data parallel: " + std::to_string(dp_size()) + (model_mesh_ ? " replicas" : " processes") + ", each step " +
          std::to_string(a_.gradient_accumulation_steps) + " micro-batches on each (" +
          std::to_string(a_.gradient_accumulation_steps * dp_size()) +
          " in all), gradients summed over them, evaluation split");
  }
  if (world_size() == 1 && a_.zero_stage > 0)
    say(UNILLM_MSG("ZeRO stage ", a_.zero_stage, " from ", a_.zero_from,
                   ": one process holds everything (there is nothing to shard); run it under mpirun -np N "
                   "or unillm launch --nproc N to shard"));
  if (a_.zero_offload) {
    if (!a_.device.is_cpu())
      UNILLM_THROW(NotImplemented, "[train] ", a_.zero_from, ": CPU offload of optimizer state with --device ",
                   device_name(a_.device), " is not implemented yet");
    say("ZeRO offload: the optimizer state and parameters are in host memory already (--device cpu)");
  }
  const std::string from = resume_dir();
  check_resume(from);
  load_tokenizer();
  setup_data();
  if (h_.plan_only) {  // --plan-only: the plan, even one over the limit (plan_ is set before that check)
    try {
      plan_memory_and_check(from);
    } catch (const ConfigError&) {
      if (plan_.peak == 0) throw;
    }
    h_.plan_only(plan_);
    return {};
  }
  plan_memory_and_check(from);  // before the output dir is touched and the weights allocated
  prepare_output_dir();
  dp_barrier();  // output_dir is ready (or rank 0 has refused it and aborted the run)
  load(from);
  if (!a_.do_train) return evaluate_only();
  setup_tensor_parallel();
  setup_expert_parallel();
  setup_pipeline();
  setup_grad_buckets();
  setup_schedule();
  rng_.reseed(static_cast<uint64_t>(a_.seed));
  state_.early_stopping_patience = a_.early_stopping_steps.value_or(0);
  if (a_.fp16) scaler_.emplace();
  if (!from.empty()) restore(from);
  {  // an optimiser that picks the trainable layers (BAdam) sets them now, after any resume
    std::vector<nn::Module*> trained{&model_->module()};
    for (nn::Module* m : stage_->extra_modules()) trained.push_back(m);
    opt_->attach(trained, [this](const std::string& s) { say(s); });
  }
  if (from.empty()) state_.run_id = new_run_id();  // a resume keeps its checkpoint's
  state_.settings = run_settings();
  model_->set_mod_calls(state_.mod_calls);
  if (scaler_ && state_.loss_scale > 0) {
    scaler_->scale = state_.loss_scale;
    scaler_->growth_tracker = state_.loss_scale_growth_tracker;
  }
  if (writer()) log_ = std::make_unique<TrainerLog>(a_.output_dir, state_.global_step);
  // bf16 GEMMs for the whole run (a device without bf16 arithmetic keeps f32; `unillm env` says).
  const ops::MatmulComputeScope compute(a_.bf16 && a_.bf16_compute ? ops::MatmulCompute::bf16
                                                                     : ops::MatmulCompute::f32);
  say("training " + std::to_string(arena_->numel()) + " parameters (" + a_.finetuning_type + ") for " + std::to_string(total_steps_) +
      " steps (recompute " + (a_.disable_gradient_checkpointing ? "off" : "on") +
      (a_.bf16 ? (a_.bf16_compute ? ", bf16 mixed precision, bf16 GEMMs" : ", bf16 mixed precision, f32 arithmetic") : a_.fp16 ? ", fp16 mixed precision with loss scaling" : "") + ")");
  const int64_t first = state_.global_step;
  double loss_sum = 0;
  start_ = Clock::now() - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(state_.elapsed_seconds));
  if (a_.eval_on_start && eval_enabled_ && state_.global_step == 0) run_eval();
  // The steps' communication (several processes): what the collectives moved and the time spent
  // waiting in them, against the steps' wall time.
  const auto* counting = dynamic_cast<const dist::CountingGroup*>(h_.dp);
  dist::CommStats comm;
  double step_seconds = 0;
  while (state_.global_step < total_steps_ && !stop_early_) {
    const dist::CommStats before = counting ? counting->stats() : dist::CommStats{};
    const auto t0 = Clock::now();
    // The steps' own allocator peak (evaluation and saving, which ZeRO-3 runs on the whole model,
    // are outside it); the run's peak is kept across the resets.
    Allocator& alloc = backend_for(a_.device).allocator(a_.device.index);
    run_alloc_peak_ = std::max(run_alloc_peak_, alloc.peak_bytes());
    alloc.reset_peak();
    loss_sum += train_step();
    steps_alloc_peak_ = std::max(steps_alloc_peak_, alloc.peak_bytes());
    step_seconds += since(t0);
    if (counting) {
      comm.calls += counting->stats().calls - before.calls;
      comm.wire_bytes += counting->stats().wire_bytes - before.wire_bytes;
      comm.wait_seconds += counting->stats().wait_seconds - before.wait_seconds;
      comm.flight_seconds += counting->stats().flight_seconds - before.flight_seconds;
      comm.flight_wait_seconds += counting->stats().flight_wait_seconds - before.flight_wait_seconds;
    }
    maybe_eval_and_save();
    if (jit_stop_requested()) return jit_checkpoint();
  }
  if (counting && state_.global_step > first) {
    const auto n = static_cast<double>(state_.global_step - first);
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "communication per step (process %lld of %lld): %.0f collectives, %.4f MiB sent (ring volume), "
                  "%.2f ms waiting in them of %.2f ms",
                  static_cast<long long>(world_rank()), static_cast<long long>(world_size()),
                  static_cast<double>(comm.calls) / n, comm.wire_bytes / n / 1048576.0, comm.wait_seconds / n * 1e3,
                  step_seconds / n * 1e3);
    std::string line = buf;
    // Buckets: in flight from the start until seen complete; pending = in flight outside MPI calls
    // (Open MPI moves their data only inside MPI calls, so pending is not transfer hidden).
    if (buckets_) {
      std::snprintf(buf, sizeof buf, "; gradient buckets %.2f ms in flight, %.2f ms of it pending while backward computed",
                    comm.flight_seconds / n * 1e3, std::max(0.0, comm.flight_seconds - comm.flight_wait_seconds) / n * 1e3);
      line += buf;
    }
    say(line);
  }
  // The memory line after the final save, predict and the best checkpoint's reload, which the
  // plan counts too.
  TrainResult r = finish(loss_sum, state_.global_step - first);
  report_memory();
  return r;
}

}  // namespace detail

namespace {
// A run keeps quantised layers' products exact in every forward (ops::linear_q_int8_activations):
// the policy's under grad mode already is, and a DPO reference or an evaluation pass over the
// same quantised base (no grad) must give the same log-probs, e.g. loss ln 2 at step 1.
struct ExactQuantisedProducts {
  bool before = ops::linear_q_int8_activations();
  ExactQuantisedProducts() { ops::set_linear_q_int8_activations(false); }
  ~ExactQuantisedProducts() { ops::set_linear_q_int8_activations(before); }
};
}  // namespace

TrainResult run_training(const TrainArgs& args, const TrainerHooks& hooks) {
  ExactQuantisedProducts exact;
  if (!hooks.dp) {
    detail::Run run(args, hooks);
    return run.go();
  }
  // Several processes: the collectives are counted for the run's communication report.
  dist::CountingGroup counting(*hooks.dp);
  TrainerHooks h = hooks;
  h.dp = &counting;
  detail::Run run(args, h);
  return run.go();
}

}  // namespace unillm::train
