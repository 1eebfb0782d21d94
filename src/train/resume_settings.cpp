// Recorded run settings and their comparison on resume (see resume_settings.h).
#include "train/resume_settings.h"

#include "core/error.h"
#include "train/optimizer.h"

namespace unillm::train {

using nlohmann::json;

namespace {

template <typename T>
json optional_json(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// What decides the data order, the batch shape and the trainable set: a different value cannot
// continue the recorded run exactly (and for LoRA/freeze would silently train another model).
json must_match(const TrainArgs& a) {
  return {
      {"stage", a.stage},
      {"pref_loss", a.pref_loss},
      {"ref_mode", a.ref_mode},
      {"ld_alpha", optional_json(a.ld_alpha)},
      {"ref_model", a.ref_model},
      {"ref_model_adapters", a.ref_model_adapters},
      {"finetuning_type", a.finetuning_type},
      {"train_from_scratch", a.train_from_scratch},
      {"template", a.template_name},
      {"dataset", a.dataset},
      {"eval_dataset", a.eval_dataset},
      {"cutoff_len", a.cutoff_len},
      {"max_samples", a.max_samples ? json(*a.max_samples) : json(nullptr)},
      {"val_size", a.val_size},
      {"packing", a.packing},
      {"neat_packing", a.neat_packing},
      {"train_on_prompt", a.train_on_prompt},
      {"mask_history", a.mask_history},
      {"skip_bad_records", a.skip_bad_records},
      {"src_length", a.src_length},
      {"max_length", a.max_length},
      {"zero_padding", a.zero_padding},
      {"split", a.split},
      {"freeze_trainable_layers", a.freeze_trainable_layers},
      {"freeze_trainable_modules", a.freeze_trainable_modules},
      {"freeze_extra_modules", a.freeze_extra_modules},
      {"lora_rank", a.lora_rank},
      {"lora_alpha", a.lora_alpha.value_or(2.0 * static_cast<double>(a.lora_rank))},
      {"lora_dropout", a.lora_dropout},
      {"lora_target", a.lora_target},
      {"use_rslora", a.use_rslora},
      {"create_new_adapter", a.create_new_adapter},
      {"per_device_train_batch_size", a.per_device_train_batch_size},
      {"gradient_accumulation_steps", a.gradient_accumulation_steps},
      {"seed", a.seed},
      {"data_seed", a.data_seed.value_or(a.seed)},  // the batches' order
      {"group_by_length", a.group_by_length},
      {"disable_shuffling", a.disable_shuffling},
      {"bf16", a.bf16},
      {"fp16", a.fp16},
      {"bf16_compute", a.bf16 && a.bf16_compute},
      {"optim", optimizer_config(a).kind},  // the checkpoint holds this optimizer's state
  };
}

// Paths (a model or data set may move between runs) and the optimisation hyper-parameters a
// user changes on purpose when continuing (a longer schedule, a lower learning rate).
json may_change(const TrainArgs& a) {
  return {
      {"model_name_or_path", a.model_name_or_path},
      {"tokenizer_name_or_path", a.tokenizer_name_or_path},
      {"adapter_name_or_path", a.adapter_name_or_path},
      {"dataset_dir", a.dataset_dir},
      {"dataset_name_or_path", a.dataset_name_or_path},
      {"input_dir", a.input_dir},
      {"learning_rate", a.learning_rate},
      {"lr_scheduler_type", a.lr_scheduler_type},
      {"lr_scheduler_kwargs",
       {{"min_lr", optional_json(a.lr_scheduler_kwargs.min_lr)},
        {"min_lr_rate", optional_json(a.lr_scheduler_kwargs.min_lr_rate)},
        {"num_cycles", optional_json(a.lr_scheduler_kwargs.num_cycles)}}},
      {"lr_scheduler_more",  // kwargs of later schedules (a key of their own: older records lack it)
       {{"num_decay_steps", optional_json(a.lr_scheduler_kwargs.num_decay_steps)},
        {"num_stable_steps", optional_json(a.lr_scheduler_kwargs.num_stable_steps)},
        {"warmup_type", optional_json(a.lr_scheduler_kwargs.warmup_type)},
        {"decay_type", optional_json(a.lr_scheduler_kwargs.decay_type)},
        {"min_lr_ratio", optional_json(a.lr_scheduler_kwargs.min_lr_ratio)},
        {"lr_end", optional_json(a.lr_scheduler_kwargs.lr_end)},
        {"power", optional_json(a.lr_scheduler_kwargs.power)},
        {"warmup_lr_rate", optional_json(a.lr_scheduler_kwargs.warmup_lr_rate)},
        {"mode", optional_json(a.lr_scheduler_kwargs.mode)},
        {"threshold_mode", optional_json(a.lr_scheduler_kwargs.threshold_mode)},
        {"factor", optional_json(a.lr_scheduler_kwargs.factor)},
        {"threshold", optional_json(a.lr_scheduler_kwargs.threshold)},
        {"eps", optional_json(a.lr_scheduler_kwargs.eps)},
        {"patience", optional_json(a.lr_scheduler_kwargs.patience)},
        {"cooldown", optional_json(a.lr_scheduler_kwargs.cooldown)}}},
      {"min_learning_rate", a.min_learning_rate},
      {"decay_steps", optional_json(a.decay_steps)},
      {"warmup_ratio", a.warmup_ratio},
      {"warmup_steps", a.warmup_steps},
      {"num_train_epochs", a.num_train_epochs},
      {"max_steps", a.max_steps},
      {"weight_decay", a.weight_decay},
      {"adam_beta1", a.adam_beta1},
      {"adam_beta2", a.adam_beta2},
      {"adam_epsilon", a.adam_epsilon},
      {"loraplus_lr_ratio", optional_json(a.loraplus_lr_ratio)},
      {"loraplus_lr_embedding", a.loraplus_lr_embedding},
      {"max_grad_norm", a.max_grad_norm},
      {"pref_beta", a.pref_beta},
      {"pref_ftx", a.pref_ftx},
      {"dpo_label_smoothing", a.dpo_label_smoothing},
      {"simpo_gamma", a.simpo_gamma},
      {"pref_bco_weight", a.pref_bco_weight},
      {"kto_chosen_weight", a.kto_chosen_weight},
      {"kto_rejected_weight", a.kto_rejected_weight},
  };
}

}  // namespace

json resume_settings(const TrainArgs& a) { return {{"must_match", must_match(a)}, {"may_change", may_change(a)}}; }

std::vector<std::string> check_resume_settings(const json& recorded, const json& current,
                                               const std::string& checkpoint) {
  std::vector<std::string> warnings;
  if (!recorded.is_object() || recorded.empty()) return warnings;
  std::string refused;
  for (const char* group : {"must_match", "may_change"}) {
    if (!recorded.contains(group) || !recorded[group].is_object()) continue;
    const json& was = recorded[group];
    for (auto it = current[group].begin(); it != current[group].end(); ++it) {
      if (!was.contains(it.key()) || was[it.key()] == it.value()) continue;
      const std::string change = it.key() + ": " + was[it.key()].dump() + " -> " + it.value().dump();
      if (std::string(group) == "must_match")
        refused += (refused.empty() ? "" : "; ") + change;
      else
        warnings.push_back("[train] resuming " + checkpoint + " with " + change +
                           " (allowed; the continuation differs from the original run's)");
    }
  }
  if (!refused.empty())
    UNILLM_THROW(ConfigError, "[train] resume_from_checkpoint ", checkpoint,
                 " was written with other settings, and an exact resume needs the same ones: ",
                 refused, ". Use the checkpoint's values, or start a new run in another output_dir");
  return warnings;
}

}  // namespace unillm::train
