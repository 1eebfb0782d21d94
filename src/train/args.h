// Training configuration: a LLaMA-Factory YAML file plus `key=value` overrides, checked against
// the key table (key_table.h) into TrainArgs. Defaults are LLaMA-Factory's and HF
// TrainingArguments'. Nothing here prints: warnings are collected in TrainArgs::warnings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "data/pretrain.h"
#include "data/sft.h"
#include "train/low_rank.h"

namespace unillm::train {

struct LrSchedulerKwargs {
  std::optional<double> min_lr;       // cosine_with_min_lr: absolute floor
  std::optional<double> min_lr_rate;  // cosine_with_min_lr: floor as a fraction of learning_rate
  std::optional<double> num_cycles;   // cosine / cosine_with_min_lr / warmup_stable_decay (HF default 0.5)
  // warmup_stable_decay (transformers' get_wsd_schedule): num_decay_steps (required),
  // num_stable_steps (default: the steps left), warmup_type / decay_type, min_lr_ratio.
  std::optional<int64_t> num_decay_steps, num_stable_steps;
  std::optional<std::string> warmup_type, decay_type;
  std::optional<double> min_lr_ratio;
  // polynomial: lr_end (absolute, HF default 1e-7) and power (1.0).
  std::optional<double> lr_end, power;
  std::optional<double> warmup_lr_rate;  // cosine_warmup_with_min_lr
  // reduce_lr_on_plateau: torch's ReduceLROnPlateau arguments (min_lr above is its floor).
  std::optional<std::string> mode, threshold_mode;
  std::optional<double> factor, threshold, eps;
  std::optional<int64_t> patience, cooldown;
};

struct ResumeFrom {
  enum class Kind { kNone, kLatest, kPath };
  Kind kind = Kind::kNone;  // `true` → kLatest (the last checkpoint-N of output_dir)
  std::string path;         // kPath
};

// The command a config is read for. Every command classifies keys by the same table
// (key_table.h): refused and unknown keys are refused by all; an implemented key that this
// command does not use is accepted with a warning naming the command (args_use.cpp).
enum class ConfigUse { kTrain, kExport, kChat };
const char* config_use_name(ConfigUse use);  // "train", "export", "chat"

// LLaMA-Factory's GeneratingArguments, read by `chat`/`api` configs (nullopt: not given, then
// LLaMA-Factory's defaults apply: docs/inference-config.md). Training ignores them.
struct GeneratingKeys {
  std::optional<bool> do_sample, skip_special_tokens, enable_thinking;
  std::optional<double> temperature, top_p, repetition_penalty, length_penalty;
  std::optional<int64_t> top_k, num_beams, max_new_tokens;
  std::optional<std::string> default_system;
};

struct TrainArgs {
  // --- model
  std::string model_name_or_path;  // as given; see resolve_model_path()
  // PaddleNLP run_pretrain.py's ModelArguments: the tokenizer's dir when it is not the model's
  // ("" = model_name_or_path). Resolved like model_name_or_path.
  std::string tokenizer_name_or_path;
  bool disable_gradient_checkpointing = false;
  // LLaMA-Factory's train_from_scratch / PaddleNLP run_pretrain's continue_training false: the
  // architecture of model_name_or_path's config.json with HF's initialisation (seed), no weights.
  bool train_from_scratch = false;
  // --- data
  std::string template_name;                       // key `template`
  // LLaMA-Factory's DataArguments for the template (data::TemplateOptions; template_options()):
  // tool_format replaces the template's tool/function formats, preserve_thinking keeps earlier
  // thoughts. default_system and enable_thinking are kept in `generating` (chat reads them too).
  std::optional<std::string> tool_format;
  bool preserve_thinking = false;
  std::vector<std::string> dataset, eval_dataset;  // comma lists, trimmed
  std::string dataset_dir = "data";
  int64_t cutoff_len = 2048;
  std::optional<int64_t> max_samples;
  double val_size = 0.0;       // 0, a fraction in (0, 1), or a whole count >= 2
  bool packing = false;        // resolved: as given, else (stage == "pt")
  bool packing_given = false;  // `packing` was set explicitly (see data_cutoff_len())
  int64_t preprocessing_batch_size = 1000;
  bool skip_bad_records = false;  // unillm: skip malformed data records, counting them
  // SFT (stage sft)
  bool train_on_prompt = false;  // score prompt tokens too
  bool mask_history = false;     // score only the last turn of a conversation
  bool neat_packing = false;     // pack without cross-sample attention (implies packing)
  // PaddleNLP {src,tgt} data (llm/run_finetune.py): a dir with train.json / dev.json
  std::string dataset_name_or_path;
  int64_t src_length = 1024;  // PaddleNLP's default
  int64_t max_length = 2048;  // PaddleNLP's default (source + target)
  bool zero_padding = false;  // PaddleNLP's name for neat packing
  // PaddleNLP pretraining (llm/run_pretrain.py) from a token corpus made by `unillm preprocess`:
  // PREFIX (or a dir holding one) and its train/valid/test document weights (data/corpus_data.h).
  std::string input_dir;
  std::string split = "949,50,1";  // PaddleNLP's default
  // LLaMA-Factory's tokenized_path (data/tokenized_data.h): a dir holding unillm's tokenized rows
  // is trained from (the data keys are then ignored); otherwise the rows are built, saved there,
  // and trained from. "" = off.
  std::string tokenized_path;
  // LLaMA-Factory's eval_on_each_dataset: each eval_dataset name evaluated (and logged as
  // eval_<name>_*) on its own (train/trainer.cpp compose_eval_splits).
  bool eval_on_each_dataset = false;
  // --- fine-tuning
  std::string stage = "sft";             // LLaMA-Factory's default; pt, sft, rm, dpo and kto are implemented
  std::string finetuning_type = "lora";  // LLaMA-Factory's default; lora, oft, freeze, full
  // lora or oft: a PEFT adapter trains on a frozen base and is what a run saves.
  bool adapter_tuning() const { return finetuning_type == "lora" || finetuning_type == "oft"; }
  // freeze (LLaMA-Factory FinetuningArguments)
  int64_t freeze_trainable_layers = 2;  // > 0: the last N layers; < 0: the first |N|
  std::vector<std::string> freeze_trainable_modules = {"all"};
  std::vector<std::string> freeze_extra_modules;
  // lora
  int64_t lora_rank = 8;
  std::optional<double> lora_alpha;  // unset: 2 x lora_rank (LLaMA-Factory)
  double lora_dropout = 0.0;
  std::vector<std::string> lora_target = {"all"};
  bool use_rslora = false;
  bool use_dora = false;  // DoRA (PEFT's use_dora): a trained magnitude per output row
  bool pissa_init = false;    // PiSSA: A, B from W's top-r SVD, the base becomes the residual
  int64_t pissa_iter = 16;    // subspace iterations (LLaMA-Factory's default); -1 = full SVD
  bool pissa_convert = false;  // also save pissa_init/ and pissa_converted/ (rank 2r) at the end
  // OFT (finetuning_type: oft; LLaMA-Factory's OFTArguments → PEFT's OFTConfig, train/args_oft.cpp)
  int64_t oft_rank = 0;         // r; exactly one of oft_rank / oft_block_size is non-zero
  int64_t oft_block_size = 32;
  std::vector<std::string> oft_target = {"all"};
  double module_dropout = 0.0;  // saved; PEFT 0.17.1's OFT Linear never applies it (nn/oft.h)
  bool create_new_adapter = false;
  std::vector<std::string> adapter_name_or_path;  // existing adapters (model key)
  // LLaMA-Factory's adapter_folder (PEFT's subfolder): joined onto every path of
  // adapter_name_or_path and ref_model_adapters when the config is read.
  std::string adapter_folder, adapter_folder_where;
  // Vocabulary growth and extra trained modules (args_fields_vocab.cpp, train/vocab.h; LLaMA-
  // Factory's ModelArguments / LoraArguments). add_tokens / add_special_tokens that add a token
  // turn resize_vocab on, as LLaMA-Factory's patch_tokenizer does.
  bool resize_vocab = false;
  // HF's split_special_tokens (LLaMA-Factory ModelArguments): special-token strings in the data
  // and the template's text are tokenized as text; the saved tokenizer_config.json says so.
  bool split_special_tokens = false;
  std::vector<std::string> add_tokens;          // non-special tokens
  std::vector<std::string> add_special_tokens;  // special tokens (new_special_tokens_config's keys win)
  std::string new_special_tokens_config;        // YAML {token: description}
  std::string init_special_tokens = "noise_init";  // noise_init | desc_init | desc_init_w_noise
  // new_special_tokens_config's {token: description} in file order (desc_init reads them).
  std::vector<std::pair<std::string, std::string>> special_token_descriptions;
  std::vector<std::string> additional_target;   // PEFT modules_to_save (embed_tokens, lm_head, *norm)
  // SFT loss variants (LLaMA-Factory's; ops/weighted_cross_entropy.h, ops/asft_cross_entropy.h),
  // at most one, stage sft:
  bool use_dft_loss = false;   // each token's CE weighted by its detached p(label)
  bool use_eaft_loss = false;  // weighted by (entropy of the top-20 softmax / 3)^eaft_alpha
  double eaft_alpha = 1.0;
  bool use_asft_loss = false;  // DFT's term + asft_alpha · KL(reference ‖ policy) per token
  double asft_alpha = 0.1;
  // preference training (stage dpo; LLaMA-Factory's RLHF arguments and defaults)
  std::string pref_loss = "sigmoid";  // sigmoid | hinge | ipo | kto_pair | orpo | simpo
  double pref_beta = 0.1;
  double pref_ftx = 0;
  double dpo_label_smoothing = 0;
  double simpo_gamma = 0.5;
  double pref_bco_weight = 0;  // BCO's share of the dpo loss (> 1e-6 turns it on)
  // LD-DPO (LLaMA-Factory's ld_alpha): the policy's log-probs weight response tokens past the
  // shorter response of the pair by ld_alpha; unset = plain sums.
  std::optional<double> ld_alpha;
  double kto_chosen_weight = 1.0;    // stage kto: weight of the desirable examples' losses
  double kto_rejected_weight = 1.0;  // and of the undesirable ones'
  // The reference model: ref_model (+ ref_model_adapters, merged) or, unset, the initial policy;
  // ref_mode (unillm's key) how it is held: auto (LoRA without ref_model: the adapters switched
  // off; otherwise a frozen copy when the memory plan fits it, else precomputed log-probs) | model
  // (a frozen copy) | precompute.
  std::string ref_model;
  std::vector<std::string> ref_model_adapters;
  std::string ref_mode = "auto";
  // export (`unillm export`)
  std::string export_dir;
  double export_size = 5;  // GB per safetensors shard (LLaMA-Factory's default)
  // 8 or 4: `unillm export` writes an inference bundle with weight-only int8 / int4 (g32)
  // instead of an HF dir; 0: dense. GPTQ on export_quantization_dataset when it is set (a
  // dataset name in dataset_dir or a text file), round to nearest otherwise.
  int64_t export_quantization_bit = 0;
  std::string export_quantization_dataset;
  int64_t export_quantization_nsamples = 128;
  int64_t export_quantization_maxlen = 1024;
  // QLoRA (docs/qlora.md): 4 or 8 holds the base model's decoder Linear weights quantised while
  // LoRA trains (bitsandbytes' semantics: nf4/fp4 blocks of 64 with double_quantization of the
  // block scales, or LLM.int8's per-row int8); 0: off. LoRA only, bitsandbytes only.
  int64_t quantization_bit = 0;
  // LLaMA-Factory's ref_model_quantization_bit: 4 or 8 holds ref_model's decoder Linear weights
  // quantised as QLoRA's base (the same quantization_type / double_quantization); 0: off.
  int64_t ref_model_quantization_bit = 0;
  std::string quantization_type = "nf4";  // nf4 | fp4 (4-bit)
  bool double_quantization = true;
  bool disable_shuffling = false;
  bool plot_loss = false;
  // --- trainer (HF TrainingArguments)
  std::string output_dir = "trainer_output";  // HF's default when unset
  bool overwrite_output_dir = false;
  bool do_train = false;
  bool do_eval = false;              // set when eval_strategy != "no" (as HF)
  // input_dir corpora: the loss over the test part of `split` after training (run_pretrain.py).
  // LLaMA-Factory data with predict_with_generate (stage sft): generate a response for every
  // eval_dataset prompt, after training or without it (do_train false), and score them
  // (generated_predictions.jsonl, predict_results.json: BLEU-4, ROUGE-1/2/L; cli/predict.cpp).
  bool do_predict = false;
  bool predict_with_generate = false;
  bool eval_on_start = false;        // HF: evaluate once before the first step
  std::string eval_strategy = "no";  // no | steps | epoch
  int64_t per_device_train_batch_size = 8;
  // HF's auto_find_batch_size: the largest of per_device_train_batch_size, int(0.9 × it), … that
  // the memory plan fits in the available memory (a resume keeps the checkpoint's).
  bool auto_find_batch_size = false;
  // HF's enable_jit_checkpoint: on SIGTERM (a preemption) the run finishes its step, saves a
  // checkpoint there and stops (the CLI installs the handler; TrainerHooks::stop_requested).
  bool enable_jit_checkpoint = false;
  int64_t per_device_eval_batch_size = 8;
  // HF's deprecated per_gpu_* spellings: when set (non-zero) they win over per_device_* (its
  // train_batch_size property), with its deprecation warning.
  std::optional<int64_t> per_gpu_train_batch_size, per_gpu_eval_batch_size;
  int64_t gradient_accumulation_steps = 1;
  double learning_rate = 5e-5;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;  // 0 disables clipping
  double num_train_epochs = 3.0;
  int64_t max_steps = -1;  // > 0 overrides num_train_epochs
  std::string lr_scheduler_type = "linear";
  LrSchedulerKwargs lr_scheduler_kwargs;
  // PaddleNLP run_pretrain.py's schedule (a PaddleNLP file with input_dir whose
  // lr_scheduler_type is linear or cosine): Linear/CosineAnnealingWithWarmupDecay from
  // learning_rate down to min_learning_rate at decay_steps (unset: the total steps); see
  // lr_schedule.h.
  bool pretrain_annealing = false;
  double min_learning_rate = 1e-5;  // PreTrainingArguments' default
  std::optional<double> decay_steps;
  double warmup_ratio = 0.0;
  double warmup_steps = 0;                 // >= 1: steps; in (0, 1): a ratio of total steps (HF v5)
  std::string logging_strategy = "steps";  // steps | no
  std::string save_strategy = "steps";     // steps | epoch | no
  double logging_steps = 500;              // >= 1: steps; in (0, 1): a ratio of total steps (as HF)
  double save_steps = 500;
  std::optional<double> eval_steps;  // resolved to logging_steps when evaluating by steps
  // HF's eval_delay: no periodic evaluation before this many steps (eval_strategy steps) or epochs
  // (epoch). The last step's evaluation (unillm's rule, maybe_eval_and_save) is kept.
  double eval_delay = 0;
  std::optional<int64_t> save_total_limit;
  // HF's best checkpoint: with metric_for_best_model set, each checkpoint's evaluation is compared
  // with the best so far (save_total_limit never removes the best checkpoint); with
  // load_best_model_at_end the best weights are reloaded and written to output_dir at the end.
  bool load_best_model_at_end = false;
  std::string metric_for_best_model;      // "" | loss | perplexity | accuracy ("eval_" dropped)
  std::optional<bool> greater_is_better;  // resolved: false for loss, true otherwise (HF)
  int64_t seed = 42;
  // LLaMA-Factory's moe_aux_loss_coef: for qwen2_moe / qwen3_moe, sets config.json's
  // output_router_logits and router_aux_loss_coef (the router load-balancing loss is added to the
  // token loss of stages pt and sft, ops/moe_balance.h). 0 = the model's config as it is.
  double moe_aux_loss_coef = 0;
  // HF's neftune_noise_alpha (NEFTune): uniform noise on the embedding output of training
  // forwards (pt, sft), models::TrainBatch::neftune_alpha. 0 = off.
  double neftune_noise_alpha = 0;
  // HF's label_smoothing_factor ε (its LabelSmoother, stages pt and sft): each token's loss is
  // (1 − ε) · CE + ε · the mean of −log p over the vocabulary (ops/label_smoothing.h).
  double label_smoothing_factor = 0;
  // HF's data_seed: the seed of the training batches' shuffle (default: seed). The model's
  // initialisation, LoRA's A and dropout keep seed.
  std::optional<int64_t> data_seed;
  // HF's ignore_data_skip: a resume starts its epoch's batches from the first one instead of
  // skipping those the checkpoint had consumed (the step count and the epoch go on).
  bool ignore_data_skip = false;
  // HF's group_by_length: megabatches of similar lengths (data::LoaderOptions::length_group).
  bool group_by_length = false;
  // transformers 5's train_sampling_strategy ("" = not given): random, sequential (as
  // disable_shuffling) or group_by_length (as group_by_length); applied in finish_misc_args.
  std::string train_sampling_strategy;
  std::string mix_strategy = "concat";  // LLaMA-Factory's: concat | interleave_under | interleave_over (data/mix.h)
  std::vector<double> interleave_probs;  // LLaMA-Factory's "0.3,0.7": HF's random interleaving (data/mix.h)
  // LLaMA-Factory's rope_scaling (train/rope_scaling.h): "" | linear | dynamic | yarn | llama3.
  std::string rope_scaling;
  // LLaMA-Factory's early_stopping_steps: HF's EarlyStoppingCallback with this patience (needs
  // load_best_model_at_end); the patience counter survives a resume only with HF's
  // restore_callback_states_from_checkpoint.
  std::optional<int64_t> early_stopping_steps;
  bool restore_callback_states_from_checkpoint = false;
  ResumeFrom resume_from_checkpoint;
  // HF's optim: adamw_torch | adamw_torch_fused (same semantics) | sgd | adafactor | adamw_8bit |
  // adamw_bnb_8bit | paged_adamw_8bit (train/optimizer.h); adafactor: true overrides it (as HF).
  std::string optim = "adamw_torch";
  // HF's own GaLore (optim galore_adamw / galore_adamw_layerwise; args_low_rank.cpp maps it onto
  // `galore`): optim_target_modules as given (a YAML string is one regex, a list names), and
  // optim_args "rank=…,update_proj_gap=…,scale=…,proj_type=…".
  std::vector<std::string> optim_target_modules;
  bool optim_target_modules_is_string = false;
  std::string optim_args;
  bool hf_galore = false;  // set by the mapping: GaLoreAdamW's own betas, eps, no weight decay
  bool adafactor = false;
  // LoRA+ (LLaMA-Factory): lora_B's lr × ratio, lora_embedding_B's lr loraplus_lr_embedding.
  std::optional<double> loraplus_lr_ratio;
  double loraplus_lr_embedding = 1e-6;
  // LLaMA-Factory's optimisers over the arena (train/muon.h, train/adam_mini.h), at most one;
  // each replaces optim (which must then name AdamW) with its own.
  bool use_muon = false;
  bool use_adam_mini = false;
  // BAdam (LLaMA-Factory's BAdamArgument; layer mode train/badam.h: one decoder layer trains at
  // a time, switched every badam_switch_interval optimizer steps (-1: never); ratio mode
  // train/badam_ratio.h).
  bool use_badam = false;
  std::string badam_mode = "layer";           // layer | ratio
  std::optional<int64_t> badam_start_block;   // unset: 0 ascending, last descending, random draw
  std::string badam_switch_mode = "ascending";  // ascending | descending | random | fixed
  int64_t badam_switch_interval = 50;
  int64_t badam_verbose = 0;  // 0 quiet, 1 the active layer at each switch, 2 also its tensors
  double badam_update_ratio = 0.05;          // ratio mode (train/badam_ratio.h)
  std::string badam_mask_mode = "adjacent";  // ratio mode: adjacent | scatter
  // LLaMA-Pro (freeze; LoRA / OFT on their modules only): the trainable layers are the last of
  // each of freeze_trainable_layers equal groups (the blocks `unillm expand-layers` added).
  bool use_llama_pro = false;
  // GaLore / APOLLO (LLaMA-Factory's GaloreArguments / ApolloArguments; args_low_rank.cpp).
  LowRankSettings galore;
  LowRankSettings apollo = apollo_defaults();
  // Mixed precision (docs/training.md): activations saved for backward in bf16/f16, frozen
  // weights in bf16/f16, trainable weights, gradients and optimizer state in f32; fp16 adds
  // dynamic loss scaling. At most one of the two.
  bool bf16 = false;
  bool fp16 = false;
  // unillm: with bf16, the GEMMs take bf16 inputs and accumulate in f32 where the device has bf16
  // arithmetic (ops/matmul_compute.h); false keeps f32 arithmetic (the only path without it).
  bool bf16_compute = true;
  // LLaMA-Factory's pure_bf16 (bf16 weights and optimizer state, no AMP): trained as bf16: true
  // with f32 trainable weights (args_fields_misc.cpp says so at start).
  bool pure_bf16 = false;
  // LLaMA-Factory's shift_attn: LongLoRA's S²-Attn in the training forwards of pt and sft
  // (nn/shift_attention.h, groups of 1/4 of each batch's length); evaluation and inference attend
  // fully. sft batches are padded to a multiple of 8, pt batches to 4, so the length divides.
  bool shift_attn = false;
  // LLaMA-Factory's mixture_of_depths: "convert" (route every odd layer of a plain model, new
  // routers from `seed`) or "load" (a checkpoint the mixture-of-depth package saved, named
  // *MoDForCausalLM); "" = neither (models/mixture_of_depths.h).
  std::string mixture_of_depths, mixture_of_depths_where;
  // HF's bf16_full_eval / fp16_full_eval: an evaluation outside training (do_train: false) runs
  // with the model's base matrices cast to bf16 / f16 (Trainer casts the model when !is_in_train).
  // HF's logging_first_step: step 1 is logged too, whatever logging_steps says.
  bool logging_first_step = false;
  bool bf16_full_eval = false;
  bool fp16_full_eval = false;

  // ZeRO over the data-parallel processes (train/zero.h), from DeepSpeed's
  // zero_optimization.stage (`deepspeed: ds_z2_config.json`), HF's `fsdp` or PaddleNLP's
  // `sharding` (args_parallel.cpp): 0 off; 1 optimizer state sharded; 2 also gradients; 3 also
  // parameters (refused with several processes until it is built; one process has nothing to
  // shard).
  int64_t zero_stage = 0;
  bool zero_offload = false;  // offload_optimizer / offload_param / fsdp offload to the CPU asked
  std::string zero_from;      // "cfg.yaml line 9 (deepspeed: ds_z2_config.json)", for messages
  std::string deepspeed_text, deepspeed_where;  // the DeepSpeed JSON, checked against the other keys
  int64_t sharding_degree = -1;  // PaddleNLP sharding_parallel_degree (-1: every process)
  // HF fsdp hybrid_shard / hybrid_shard_zero2: the sharding groups are each host's processes
  // (the degree is found at run time), replicated across hosts.
  bool sharding_per_host = false;
  // Pipeline parallelism (train/pipeline.h): PaddleNLP's pipeline_parallel_degree (the processes
  // of one pipeline; data parallelism over world / this) and virtual_pp_degree (chunks per stage).
  int64_t pipeline_degree = 1;
  int64_t virtual_pp_degree = 1;
  // Tensor parallelism (nn/tensor_parallel.h): PaddleNLP's tensor_parallel_degree, the processes
  // that split each layer's heads and MLP rows (the fastest axis of the mesh).
  int64_t tensor_degree = 1;
  // Expert parallelism (nn/expert_parallel.h): PaddleNLP's expert_parallel_degree, the
  // data-parallel processes that split each sparse layer's experts (1: off).
  int64_t expert_degree = 1;
  // Context parallelism (docs/ARCHITECTURE.md "Parallel training", CP): PaddleNLP's
  // context_parallel_degree / sep_parallel_degree, the processes each micro-batch's tokens are
  // split over, the attention's heads split over them (DeepSpeed-Ulysses's layout; 1: off).
  int64_t context_degree = 1;
  // HF's tp_size (transformers' own tensor parallelism): the same degree, applied in
  // finish_parallel_args (where it must agree with tensor_parallel_degree when both are given).
  std::optional<int64_t> hf_tp_size;
  // accelerate's ParallelismConfig (HF's `parallelism_config`): its sizes, applied in
  // finish_parallel_args (tp_size the tensor-parallel degree, dp_shard_size the sharding degree
  // with FSDP's full shard unless a ZeRO key says otherwise, dp_replicate_size the replicas);
  // their product must be the process count, which the trainer checks.
  struct ParallelismSizes {
    int64_t dp_replicate = 1, dp_shard = 1, tp = 1, cp = 1;
    std::string where;
    int64_t processes() const { return dp_replicate * dp_shard * tp * cp; }
  };
  std::optional<ParallelismSizes> parallelism;
  // PaddleNLP's sequence_parallel: under tensor parallelism the stream between the split regions
  // is cut by tokens too (nn/tensor_parallel.h).
  bool sequence_parallel = false;
  // HF's accelerator_config.split_batches (or the deprecated top-level key): the batch sizes are
  // global, each of the data-parallel processes takes 1/dp of them (the trainer divides; they
  // must divide evenly, as accelerate requires).
  bool split_batches = false;
  // PaddleNLP's tensor_parallel_output: under tensor parallelism the lm_head is split by
  // vocabulary rows with a parallel cross-entropy (nn::vocab_parallel_loss).
  bool tensor_parallel_output = false;
  // Data parallelism's gradient buckets (train/grad_buckets.h), HF's ddp_bucket_cap_mb (torch
  // DDP's default 25 MB): consecutive decoder layers' gradients summed in one collective, started
  // as soon as backward leaves them.
  double ddp_bucket_cap_mb = 25;

  // The last step is also a checkpoint when save_strategy is not "no": HF's DefaultFlowCallback
  // does so; PaddleNLP's (a copy of an older HF) does not, so its JSON files turn this off.
  bool save_final_step = true;
  // HF's save_only_model: checkpoints hold the weights only (no optimizer state: not resumable).
  bool save_only_model = false;

  // LLaMA-Factory's Megatron paths (USE_MCA=1 with mcore_adapter, examples/megatron/;
  // USE_MEGATRON_BRIDGE=1, examples/megatron_bridge/; args_megatron.cpp): their model-parallel
  // sizes, applied in finish_megatron_args, where each must agree with the PaddleNLP/HF degree
  // given beside it.
  struct MegatronSizes {
    std::optional<int64_t> tp, pp, vpp, ep, cp;
  };
  MegatronSizes megatron;
  // How the micro-batches' losses make a step's loss (stages pt and sft): token-weighted over the
  // step (HF's num_items_in_batch, the default), or each micro-batch's mean over its scored tokens,
  // averaged over the step's micro-batches of every process (Megatron Core's
  // calculate_per_token_loss: false).
  bool micro_batch_mean_loss = false;

  // LLaMA-Factory v1 configs (args_v1.cpp; no v0 key sets these): its train_dataset (a dataset
  // YAML or a local file, data/v1_data.h), its global_batch_size (gradient_accumulation_steps =
  // global / (dp · per_device_train_batch_size) once the process count is known) and torch
  // AdamW's single parameter group (weight decay on every trainable tensor, biases and norms too).
  std::string v1_train_dataset;
  std::optional<int64_t> v1_global_batch_size;
  // v1's batching_strategy dynamic_batching | dynamic_padding_free ("" otherwise): micro-batches
  // cut from the epoch's order by a budget of cutoff_len × micro_batch_size tokens, padded or
  // summed (data::LoaderOptions::token_budget).
  std::string v1_batching;
  bool v1_config = false;  // read from a v1 config (chat then samples as v1's HF generate does)
  bool decay_all_params = false;

  ConfigUse use = ConfigUse::kTrain;  // the command it was read for
  GeneratingKeys generating;           // ConfigUse::kChat only
  std::string infer_backend;           // ConfigUse::kChat only ("" = not given)

  std::string config_path;            // the file it came from
  Device device;                      // where the run trains (the CLI's --device; not a key)
  std::vector<std::string> warnings;  // one line each, for the CLI to print

  // The row/block length handed to the data layer: cutoff_len, minus one when `packing: true`
  // was given explicitly (LLaMA-Factory's DataArguments.__post_init__ does `cutoff_len -= 1`
  // then; the pt default packing, set later by its parser, keeps cutoff_len).
  int64_t data_cutoff_len() const;
  // HF's get_warmup_steps: warmup_steps when > 0 (a ratio when < 1), else
  // ceil(warmup_ratio * total_steps).
  int64_t num_warmup_steps(int64_t total_steps) const;
};

// A logging/save/eval interval: steps >= 1 as is; a fraction < 1 → ceil(steps * total), as HF.
int64_t resolve_interval(double steps, int64_t total_steps);

// Loads PATH (YAML) and applies overrides ("key=value", the value a YAML scalar or flow
// collection; "lr_scheduler_kwargs.min_lr=1e-6" sets one entry). Throws ConfigError (bad file,
// YAML syntax with line and column, unknown key with a did-you-mean, wrong type or range) or
// NotImplemented (a not-implemented key or value), each naming the file (or "command line") and
// the key.
TrainArgs load_train_args(const std::string& path, const std::vector<std::string>& overrides,
                          ConfigUse use = ConfigUse::kTrain);
// A PaddleNLP JSON argument file through the documented key map (docs/paddlenlp.md): with
// input_dir, llm/run_pretrain.py's semantics (stage pt from a token corpus, its annealing LR
// schedule, do_predict on split's test part); otherwise llm/run_finetune.py's (stage sft;
// `lora: true` → finetuning_type lora, else full). `recompute` → gradient checkpointing, off by
// default as in PaddleNLP; keys shared with HF TrainingArguments pass through; Paddle-only
// performance switches are accepted and ignored with a warning; parallelism (degrees > 1,
// sequence_parallel) is not implemented yet. Overrides may use either dialect's key names.
TrainArgs parse_paddle_args(const std::string& json_text, const std::string& source,
                            const std::vector<std::string>& overrides = {});
// Same from YAML text; source names it in messages.
TrainArgs parse_train_args(const std::string& yaml_text, const std::string& source,
                           const std::vector<std::string>& overrides = {},
                           ConfigUse use = ConfigUse::kTrain);

// The template options the config asks for (enable_thinking, default_system, tool_format,
// preserve_thinking) over base (what choose_template found, e.g. a Jinja's default system).
data::TemplateOptions template_options(const TrainArgs& args, data::TemplateOptions base);

// The data layer's view of the arguments (stage pt; stage sft adds its keys).
data::DataOptions data_options(const TrainArgs& args);
data::SftOptions sft_options(const TrainArgs& args);

// model_name_or_path → a local directory: an existing directory as given; otherwise a hub id
// "org/name" found in the Hugging Face cache root (the `hub` folder: $HF_HUB_CACHE, or
// $HF_HOME/hub, or ~/.cache/huggingface/hub — chosen by the CLI) as
// ROOT/models--org--name/snapshots/<refs/main>. Throws ConfigError saying nothing is downloaded.
std::string resolve_model_path(const std::string& name_or_path, const std::string& hf_cache_root);

// eval_on_each_dataset's metric_for_best_model "<name>_<metric>" (the key parser has already
// dropped HF's "eval_"): {the longest eval_dataset name it starts with, the metric}, or {"", ""}
// when it names none.
std::pair<std::string, std::string> dataset_metric(const std::string& metric, const std::vector<std::string>& names);

}  // namespace unillm::train
