// The key table (see key_table.h). Groups are space-separated names per (source, status), read
// from LLaMA-Factory's hparams/*.py and transformers' training_args.py.
#include "train/key_table.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "core/error.h"

namespace unillm::train {

namespace {

using S = KeyStatus;

struct Group {
  const char* source;
  KeyStatus status;
  const char* names;
};

constexpr Group kGroups[] = {
    // ---- LLaMA-Factory ModelArguments (base, quantization, processor, export, vllm, sglang, kt)
    {"model", S::kImplemented,
     "model_name_or_path disable_gradient_checkpointing adapter_name_or_path export_dir "
     "export_size export_quantization_bit export_quantization_dataset export_quantization_nsamples "
     "export_quantization_maxlen train_from_scratch quantization_method quantization_bit "
     "quantization_type double_quantization quantization_device_map "
     "resize_vocab add_tokens add_special_tokens new_special_tokens_config init_special_tokens "
     "split_special_tokens"},
    {"model", S::kIgnored,
     "cache_dir use_fast_tokenizer model_revision low_cpu_mem_usage flash_attn use_unsloth_gc "
     "enable_liger_kernel use_reentrant_gc upcast_layernorm upcast_lmhead_output infer_backend "
     "offload_folder use_kv_cache use_cache use_v1_kernels infer_dtype hf_hub_token ms_hub_token "
     "om_hub_token print_param_status trust_remote_code image_max_pixels image_min_pixels "
     "image_do_pan_and_scan crop_to_patches video_max_pixels video_min_pixels video_fps "
     "video_maxlen use_audio_in_video audio_sampling_rate image_resolution video_resolution "
     "export_device export_legacy_format "
     "export_hub_model_id vllm_maxlen vllm_gpu_util vllm_enforce_eager vllm_max_lora_rank "
     "vllm_config sglang_maxlen sglang_mem_fraction sglang_tp_size sglang_config "
     "sglang_lora_backend kt_maxlen kt_use_cuda_graph kt_mode kt_force_think cpu_infer chunk_size "
     "mode"},
    {"model", S::kImplemented, "mixture_of_depths"},  // models/mixture_of_depths.h
    {"model", S::kNotImplemented,
     "fp8 "
     "fp8_backend fp8_enable_fsdp_float8_all_gather kt_optimize_rule"},
    {"model", S::kImplemented, "use_kt"},  // args_megatron.cpp: the run, on unillm's kernels
    // ---- LLaMA-Factory DataArguments
    {"data", S::kImplemented,
     "template dataset eval_dataset dataset_dir cutoff_len max_samples val_size packing "
     "preprocessing_batch_size mix_strategy interleave_probs streaming train_on_prompt mask_history neat_packing "
     "tool_format preserve_thinking default_system enable_thinking"},
    {"data", S::kIgnored,
     "media_dir buffer_size overwrite_cache preprocessing_num_workers eval_num_beams "
     "ignore_pad_token_for_loss"},
    {"data", S::kImplemented, "tokenized_path eval_on_each_dataset"},
    // ---- LLaMA-Factory FinetuningArguments (freeze, lora, oft, rlhf, galore, apollo, badam,
    // swanlab)
    {"finetuning", S::kImplemented,
     "stage finetuning_type disable_shuffling plot_loss freeze_trainable_layers "
     "freeze_trainable_modules freeze_extra_modules lora_rank lora_alpha lora_dropout lora_target "
     "use_rslora use_dora pissa_init pissa_iter pissa_convert create_new_adapter additional_target pref_beta pref_ftx pref_loss dpo_label_smoothing simpo_gamma "
     "ref_model ref_model_adapters kto_chosen_weight kto_rejected_weight ld_alpha "
     "loraplus_lr_ratio loraplus_lr_embedding"},
    {"finetuning", S::kImplemented, "pref_bco_weight"},
    {"finetuning", S::kIgnored,
     "freeze_vision_tower freeze_multi_modal_projector freeze_language_model compute_accuracy "
     "include_effective_tokens_per_second use_swanlab swanlab_project swanlab_workspace "
     "swanlab_run_name swanlab_mode swanlab_api_key swanlab_logdir swanlab_lark_webhook_url "
     "swanlab_lark_secret"},
    {"finetuning", S::kNotImplemented,
     "ppo_buffer_size "
     "ppo_epochs ppo_score_norm ppo_target ppo_whiten_rewards "
     "reward_model reward_model_adapters reward_model_quantization_bit "
     "reward_model_type "
     "use_mca"},
    {"finetuning", S::kImplemented, "ref_model_quantization_bit"},  // train/stages/reference.cpp
    // GaLore and APOLLO (train/galore.h, train/apollo.h, args_low_rank.cpp)
    {"finetuning", S::kImplemented,
     "use_galore galore_target galore_rank galore_update_interval galore_scale galore_proj_type "
     "galore_layerwise use_apollo apollo_target apollo_rank apollo_update_interval apollo_scale "
     "apollo_proj apollo_proj_type apollo_scale_type apollo_layerwise apollo_scale_front"},
    // Muon and Adam-mini (train/muon.h, train/adam_mini.h, args_muon_adam_mini.cpp)
    {"finetuning", S::kImplemented, "use_muon use_adam_mini"},
    {"finetuning", S::kImplemented, "pure_bf16"},
    {"model", S::kImplemented, "shift_attn"},  // nn/shift_attention.h (every stage)
    {"model", S::kImplemented, "adapter_folder"},  // args_fields_misc.cpp
    {"training", S::kImplemented, "bf16_full_eval fp16_full_eval"},  // trainer_eval_only.cpp
    {"finetuning", S::kImplemented, "oft_rank oft_block_size oft_target module_dropout"},
    {"training", S::kImplemented, "gradient_checkpointing_kwargs"},
    // BAdam's layer mode and LLaMA-Pro (train/badam.h, args_badam.cpp)
    {"finetuning", S::kImplemented,
     "use_badam badam_mode badam_start_block badam_switch_mode badam_switch_interval "
     "badam_verbose use_llama_pro"},
    // BAdam's ratio mode (train/badam_ratio.h, args_badam.cpp)
    {"finetuning", S::kImplemented, "badam_update_ratio badam_mask_mode"},
    // ---- LLaMA-Factory GeneratingArguments (used by chat/eval, not by training)
    // do_predict with predict_with_generate (train) and chat/api configs read them
    // (args_use.cpp); anywhere else they get a warning.
    {"generating", S::kImplemented,
     "do_sample temperature top_p top_k num_beams max_new_tokens repetition_penalty "
     "length_penalty skip_special_tokens"},
    {"generating", S::kIgnored, "system_message"},
    // ---- HF TrainingArguments / Seq2SeqTrainingArguments, LLaMA-Factory's RayArguments
    {"training", S::kImplemented,
     "output_dir overwrite_output_dir do_train do_eval do_predict predict_with_generate save_only_model eval_strategy "
     "evaluation_strategy per_device_train_batch_size per_device_eval_batch_size "
     "gradient_accumulation_steps learning_rate weight_decay adam_beta1 adam_beta2 adam_epsilon "
     "max_grad_norm num_train_epochs max_steps lr_scheduler_type lr_scheduler_kwargs "
     "warmup_ratio warmup_steps logging_strategy logging_steps save_strategy save_steps "
     "eval_steps save_total_limit seed resume_from_checkpoint bf16 fp16 optim "
     "dataloader_drop_last eval_on_start load_best_model_at_end metric_for_best_model "
     "greater_is_better adafactor"},
    {"training", S::kIgnored,
     "report_to run_name logging_dir logging_nan_inf_filter log_level "
     "log_level_replica log_on_each_node disable_tqdm ddp_timeout ddp_backend "
     "ddp_find_unused_parameters ddp_broadcast_buffers dataloader_num_workers "
     "dataloader_pin_memory dataloader_persistent_workers dataloader_prefetch_factor "
     "remove_unused_columns label_names local_rank use_cpu no_cuda use_mps_device tf32 "
     "skip_memory_metrics save_safetensors save_on_each_node push_to_hub hub_model_id "
     "hub_strategy hub_token hub_private_repo hub_always_push hub_revision push_to_hub_model_id "
     "push_to_hub_organization push_to_hub_token project trackio_space_id "
     "include_num_input_tokens_seen include_tokens_per_second include_inputs_for_metrics "
     "include_for_metrics eval_do_concat_batches eval_use_gather_object batch_eval_metrics "
     "prediction_loss_only eval_accumulation_steps torch_empty_cache_steps full_determinism "
     "gradient_checkpointing average_tokens_across_devices tpu_num_cores tpu_metrics_debug debug "
     "past_index mp_parameters fp16_backend half_precision_backend fp16_opt_level "
     "use_legacy_prediction_loop generation_max_length "
     "generation_num_beams generation_config sortish_sampler ray_run_name ray_storage_path "
     "ray_storage_filesystem ray_num_workers resources_per_worker placement_strategy "
     "ray_init_kwargs"},
    // ZeRO over data-parallel processes (args_parallel.cpp, train/zero.h)
    {"training", S::kImplemented,
     "deepspeed fsdp fsdp_config fsdp_min_num_params fsdp_transformer_layer_cls_to_wrap"},
    // The largest batch size the memory plan fits (trainer_memory.cpp)
    {"training", S::kImplemented, "auto_find_batch_size"},
    // SIGTERM: checkpoint at the end of the step, then stop (trainer.cpp, cmd_train.cpp)
    {"training", S::kImplemented, "enable_jit_checkpoint"},
    // transformers 5's sampler choice: group_by_length / disable_shuffling (args_fields_misc.cpp)
    {"training", S::kImplemented, "train_sampling_strategy"},
    // transformers' tp_size: unillm's tensor parallelism of that degree (args_parallel.cpp)
    {"training", S::kImplemented, "tp_size"},
    // HF's own GaLore optimizers (optim galore_adamw[_layerwise]; args_low_rank.cpp)
    {"training", S::kImplemented, "optim_args optim_target_modules"},
    // accelerate's ParallelismConfig: tensor degree, sharding degree (args_parallel.cpp)
    {"training", S::kImplemented, "parallelism_config"},
    // HF's ray_scope only steers Trainer.hyperparameter_search, which a run never calls
    {"training", S::kIgnored, "ray_scope"},
    {"training", S::kImplemented, "logging_first_step"},  // trainer_steps.cpp
    // accelerate's batch handling (args_accelerator.cpp)
    {"training", S::kImplemented, "accelerator_config dispatch_batches split_batches"},
    // Unsloth (LLaMA-Factory's use_unsloth): its patched kernels for the same LoRA arithmetic;
    // unillm's kernels are native already, so the key is accepted with a warning.
    {"model", S::kIgnored, "use_unsloth"},
    // Speed switches of torch (compilation, IPEX, Liger's fused kernels): the same arithmetic
    // in a faster form. unillm's kernels are native and fused already; accepted with a warning.
    {"training", S::kIgnored,
     "torch_compile torch_compile_backend torch_compile_mode torchdynamo jit_mode_eval use_ipex "
     "use_liger_kernel liger_kernel_config"},
    // args_fields.cpp: the shuffle's seed, the evaluation delay, resume without the data skip,
    // the deprecated per-GPU batch sizes, NEFTune, label smoothing
    {"training", S::kImplemented,
     "data_seed eval_delay ignore_data_skip per_gpu_train_batch_size per_gpu_eval_batch_size "
     "neftune_noise_alpha label_smoothing_factor group_by_length"},
    {"model", S::kImplemented, "rope_scaling"},  // train/rope_scaling.h
    {"model", S::kImplemented, "moe_aux_loss_coef"},  // ops/moe_balance.h, stages/lm_stage.cpp
    // HF's EarlyStoppingCallback (trainer_eval.cpp) and whether a resume restores its counter
    {"finetuning", S::kImplemented, "early_stopping_steps"},
    {"training", S::kImplemented, "restore_callback_states_from_checkpoint"},
    // HF's column of precomputed lengths: unillm measures each example's tokens itself
    {"training", S::kIgnored, "length_column_name"},
    // ---- added at LLaMA-Factory ff6d4d1 (tests/data/llamafactory_hparams/keys.txt lists every
    // field of its argument classes; key_table_test checks each one is here)
    {"data", S::kIgnored, "data_shared_file_system"},
    {"finetuning", S::kImplemented, "use_dft_loss use_eaft_loss eaft_alpha use_asft_loss asft_alpha"},
    {"finetuning", S::kImplemented, "use_megatron_bridge"},  // args_megatron.cpp
    {"finetuning", S::kNotImplemented,
     "use_hyper_parallel "
     "hyper_parallel_args hyper_parallel_cp_size"},
    {"model", S::kIgnored,
     "kt_cpu_activation kt_weight_path kt_non_expert_weight_path kt_expert_checkpoint_path "
     "kt_use_lora_experts kt_lora_expert_num kt_lora_expert_intermediate_size kt_config"},
    {"training", S::kIgnored,
     "master_addr master_port enable_torch_profiler profiler_output_dir profiler_wait_steps "
     "profiler_warmup_steps profiler_active_steps profiler_repeat profiler_record_shapes "
     "profiler_profile_memory profiler_with_stack profile_modules"},
    // ---- LLaMA-Factory MegatronBridgeArguments (its Megatron training path)
    // (and mcore_adapter's TrainingArguments of the same names): args_megatron.cpp maps them onto
    // unillm's parallelism; the ignored ones choose kernels, overlap and layout, not results.
    {"megatron", S::kImplemented,
     "tensor_model_parallel_size pipeline_model_parallel_size expert_model_parallel_size "
     "context_parallel_size virtual_pipeline_model_parallel_size "
     "recompute_granularity recompute_method recompute_num_layers calculate_per_token_loss "
     "use_distributed_optimizer use_packed_sequences "
     "mixed_precision megatron_pretrained_checkpoint export_hf_on_finish extra_config"},
    {"megatron", S::kIgnored,
     "account_for_embedding_in_pipeline_split account_for_loss_in_pipeline_split "
     "bias_activation_fusion apply_rope_fusion masked_softmax_fusion cross_entropy_loss_fusion "
     "moe_grouped_gemm moe_token_dispatcher_type overlap_param_gather overlap_grad_reduce"},
    // ---- LLaMA-Factory EvaluationArguments (`llamafactory-cli eval`: MMLU-style benchmarks)
    {"evaluation", S::kNotImplemented, "task task_dir batch_size lang n_shot save_dir download_mode"},
    // ---- unillm's own
    {"unillm", S::kImplemented, "skip_bad_records bf16_compute ref_mode"},
    // ---- PaddleNLP llm/ keys for {src,tgt} SFT data (run_finetune.py DataArgument)
    {"paddlenlp", S::kImplemented, "dataset_name_or_path src_length max_length zero_padding"},
    {"paddlenlp", S::kImplemented, "sharding sharding_parallel_degree pipeline_parallel_degree virtual_pp_degree "
     "tensor_parallel_degree sequence_parallel tensor_parallel_output expert_parallel_degree "
     "context_parallel_degree sep_parallel_degree"},
    {"training", S::kImplemented, "ddp_bucket_cap_mb"},
    // ---- PaddleNLP llm/ keys for pre-tokenised corpora (run_pretrain.py DataArgument)
    {"paddlenlp", S::kImplemented, "input_dir split"},
};

std::vector<KeyInfo> build_table() {
  std::map<std::string_view, KeyInfo> by_name;
  for (const Group& g : kGroups) {
    std::string_view names(g.names);
    size_t pos = 0;
    while (pos < names.size()) {
      size_t end = names.find(' ', pos);
      if (end == std::string_view::npos) end = names.size();
      std::string_view n = names.substr(pos, end - pos);
      UNILLM_CHECK(by_name.emplace(n, KeyInfo{n, g.status, g.source}).second, "duplicate key ", n);
      pos = end + 1;
    }
  }
  std::vector<KeyInfo> out;
  for (const auto& [n, info] : by_name) out.push_back(info);
  return out;
}

}  // namespace

const std::vector<KeyInfo>& key_table() {
  static const std::vector<KeyInfo> table = build_table();
  return table;
}

const KeyInfo* find_key(std::string_view name) {
  const auto& t = key_table();
  auto it = std::lower_bound(t.begin(), t.end(), name,
                             [](const KeyInfo& k, std::string_view n) { return k.name < n; });
  return (it != t.end() && it->name == name) ? &*it : nullptr;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string nearest_key(std::string_view name) {
  std::string best;
  size_t best_d = std::max<size_t>(3, name.size() / 3) + 1;  // within reach: ≤ max(3, len/3)
  for (const auto& k : key_table()) {
    size_t d = edit_distance(name, k.name);
    if (d < best_d) {
      best_d = d;
      best = std::string(k.name);
    }
  }
  return best;
}

std::string_view status_name(KeyStatus s) {
  switch (s) {
    case KeyStatus::kImplemented:
      return "implemented";
    case KeyStatus::kIgnored:
      return "ignored";
    case KeyStatus::kNotImplemented:
      return "not_implemented";
  }
  return "?";
}

// The keys of llamafactory-cli eval's config belong to another command, as in LLaMA-Factory (whose
// train argument parser rejects them too).
constexpr std::string_view kEvalKey =
    "a key of llamafactory-cli eval's config (MMLU, CMMLU, C-Eval): run that config with `unillm eval CONFIG.yaml`";

std::string_view not_implemented_reason(std::string_view name) {
  static const std::map<std::string_view, std::string_view> reasons = {
      {"fp8", "fp8 training needs fp8 matrix units (Hopper/Ada-class GPUs); unillm computes in f32, bf16 or f16"},
      {"fp8_backend", "fp8 training needs fp8 matrix units; unillm computes in f32, bf16 or f16"},
      {"fp8_enable_fsdp_float8_all_gather", "fp8 training needs fp8 matrix units; unillm computes in f32, bf16 or f16"},
      {"reward_model", "stage ppo (online RL against a reward model) is not implemented; rm, dpo and kto are"},
      {"task", kEvalKey}, {"task_dir", kEvalKey}, {"n_shot", kEvalKey}, {"lang", kEvalKey}, {"save_dir", kEvalKey},
  };
  auto it = reasons.find(name);
  return it == reasons.end() ? std::string_view() : it->second;
}

std::string key_table_markdown() {
  std::ostringstream os;
  os << "# Configuration keys\n\n"
        "Generated from `src/train/key_table.cpp` (the `train_tests` check that this page matches"
        " it).\nEvery key of LLaMA-Factory's ModelArguments, DataArguments, FinetuningArguments,"
        " GeneratingArguments,\nTrainingArguments/RayArguments and of Hugging Face's"
        " (Seq2Seq)TrainingArguments (v4 and v5 names)\nhas a status:\n\n"
        "- **implemented**: a field of `train::TrainArgs`, validated (type and range).\n"
        "- **ignored**: accepted; a one-time warning when set to something other than"
        " null/false/0/\"\"/none.\n"
        "- **not_implemented**: rejected (`[config] FILE: key 'deepspeed' is not implemented yet`)"
        " unless set to\n  null/false/0/\"\"/none.\n\n"
        "A key outside the table is an error with a \"did you mean\". Values given on the command"
        " line\n(`key=value`) are parsed as YAML scalars, as LLaMA-Factory's OmegaConf does.\n\n"
        "| key | status | from |\n|---|---|---|\n";
  for (const auto& k : key_table())
    os << "| `" << k.name << "` | " << status_name(k.status) << " | " << k.source << " |\n";
  return os.str();
}

}  // namespace unillm::train
