// finetuning_type: full / freeze / lora set-up and saving (see finetune.h).
#include "train/finetune.h"

#include "core/error.h"
#include "models/adapter.h"
#include "models/freeze.h"
#include "models/save.h"
#include "ops/cast.h"

namespace unillm::train {

namespace {

nn::LoraConfig lora_config(const TrainArgs& a) {
  nn::LoraConfig c;
  c.rank = a.lora_rank;
  c.alpha = a.lora_alpha.value_or(2.0 * static_cast<double>(a.lora_rank));
  c.dropout = a.lora_dropout;
  c.target_modules = a.lora_target;
  c.use_rslora = a.use_rslora;
  return c;
}

void prepare_lora(models::CausalLM& model, const TrainArgs& a, const std::string& resume_dir) {
  const auto& adapters = a.adapter_name_or_path;
  // LLaMA-Factory: a trainable run resumes the last adapter unless create_new_adapter.
  const size_t merge_count =
      a.create_new_adapter ? adapters.size() : (adapters.empty() ? 0 : adapters.size() - 1);
  for (size_t i = 0; i < merge_count; ++i) {
    const std::string name = "merge" + std::to_string(i);
    models::load_adapter(model, adapters[i], name);
    models::merge_adapter(model, name);
  }
  if (!resume_dir.empty())
    models::load_adapter(model, resume_dir, kTrainAdapter);
  else if (merge_count < adapters.size())
    models::load_adapter(model, adapters.back(), kTrainAdapter);
  else {
    Rng rng(static_cast<uint64_t>(a.seed));  // PEFT draws A from the seeded torch RNG
    model.add_lora(kTrainAdapter, lora_config(a), rng);
  }
  for (auto& p : model.module().parameters())  // the base stays frozen; the adapter trains
    p.tensor->set_requires_grad(p.adapter == kTrainAdapter);
  model.set_active_adapters({kTrainAdapter});
}

}  // namespace

void prepare_finetuning(models::CausalLM& model, const TrainArgs& a, const std::string& resume_dir) {
  if (a.finetuning_type == "full") {
    for (auto& p : model.module().parameters()) p.tensor->set_requires_grad(true);
  } else if (a.finetuning_type == "freeze") {
    models::FreezeConfig fc;
    fc.trainable_layers = a.freeze_trainable_layers;
    fc.trainable_modules = a.freeze_trainable_modules;
    fc.extra_modules = a.freeze_extra_modules;
    models::apply_freeze(model, fc);
  } else if (a.finetuning_type == "lora") {
    prepare_lora(model, a, resume_dir);
  } else {
    UNILLM_THROW(NotImplemented, "[train] finetuning_type '", a.finetuning_type,
                 "' is not implemented");
  }
}

void save_trained(models::CausalLM& model, const TrainArgs& a, const std::string& dir,
                  const std::string& model_dir, const std::string& tokenizer_dir) {
  if (a.finetuning_type == "lora") {
    models::AdapterSaveOptions so;
    so.base_model_name_or_path = a.model_name_or_path;
    models::save_adapter(model, kTrainAdapter, dir, so);
    models::copy_tokenizer_files(tokenizer_dir, dir);  // as LLaMA-Factory saves the tokenizer too
    return;
  }
  models::SaveOptions so;
  so.tokenizer_dir = tokenizer_dir;
  so.generation_config_dir = model_dir;
  models::save_pretrained(model, dir, so);
}

DType low_precision_dtype(const TrainArgs& a) {
  return a.bf16 ? DType::bf16 : a.fp16 ? DType::f16 : DType::f32;
}

void cast_frozen_matrices(models::CausalLM& model, DType dtype) {
  for (auto& p : model.module().parameters())
    if (!p.tensor->requires_grad() && p.tensor->ndim() >= 2 && p.tensor->dtype() == DType::f32)
      *p.tensor = ops::cast(*p.tensor, dtype);
}

}  // namespace unillm::train
