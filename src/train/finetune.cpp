// finetuning_type: full / freeze / lora / oft set-up and saving (see finetune.h).
#include "train/finetune.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "models/adapter.h"
#include "models/freeze.h"
#include "models/model_config.h"
#include "models/save.h"
#include "nn/linear.h"
#include "ops/cast.h"
#include "ops/quant_4bit.h"
#include "train/badam.h"
#include "train/badam_ratio.h"
#include "train/vocab.h"

namespace unillm::train {

namespace {

nn::LoraConfig lora_config(const TrainArgs& a) {
  nn::LoraConfig c;
  c.rank = a.lora_rank;
  c.alpha = a.lora_alpha.value_or(2.0 * static_cast<double>(a.lora_rank));
  c.dropout = a.lora_dropout;
  c.target_modules = a.lora_target;
  c.use_rslora = a.use_rslora;
  c.use_dora = a.use_dora;
  if (a.pissa_init)  // LLaMA-Factory's mapping to PEFT's init_lora_weights
    c.init_lora_weights = a.pissa_iter == -1 ? "pissa" : "pissa_niter_" + std::to_string(a.pissa_iter);
  if (a.finetuning_type == "oft") {  // LLaMA-Factory's OFTArguments → PEFT's OFTConfig
    // (LLaMA-Factory @ff6d4d1 passes lora_target as target_modules; unillm reads oft_target, the
    // key its OFT examples set, both defaulting to all.)
    c.is_oft = true;
    c.oft.rank = a.oft_rank;
    c.oft.block_size = a.oft_block_size;
    c.oft.module_dropout = a.module_dropout;
    c.target_modules = a.oft_target;
  }
  return c;
}

// modules_to_save of the trained adapter: the run's (vocab.h) and those of the adapter it
// continues training (PEFT keeps them trainable and saves them again).
std::vector<std::string> lora_modules_to_save(const TrainArgs& a) {
  std::vector<std::string> m = modules_to_save(a);
  const bool continues = !a.create_new_adapter || a.quantization_bit > 0;  // prepare_lora's rule
  if (continues && !a.adapter_name_or_path.empty())
    for (const auto& t : models::read_modules_to_save(a.adapter_name_or_path.back()))
      if (std::find(m.begin(), m.end(), t) == m.end()) m.push_back(t);
  return m;
}

// LLaMA-Pro with LoRA (LLaMA-Factory's find_expanded_modules): the full names of the modules that
// contain one of the targets ("all": every LoRA-able projection) and ".{i}." for an expanded
// layer i (models::llama_pro_layers). Both tests are substrings of the full name, as there.
std::vector<std::string> llama_pro_lora_targets(const models::CausalLM& model,
                                                const nn::LoraConfig& c, int64_t trainable_layers) {
  std::vector<std::string> patterns;
  for (int64_t i : models::llama_pro_layers(model.config().num_layers, trainable_layers))
    patterns.push_back("." + std::to_string(i) + ".");
  const std::vector<std::string> targets = nn::expanded_targets(c);
  const auto& lora_able = nn::lora_module_names();
  auto has_any = [](const std::string& name, const std::vector<std::string>& subs) {
    return std::any_of(subs.begin(), subs.end(),
                       [&](const std::string& t) { return name.find(t) != std::string::npos; });
  };
  std::vector<std::string> out;
  for (const auto& [name, _] : model.named_parameters()) {
    const size_t dot = name.rfind(".weight");
    if (dot == std::string::npos || dot + 7 != name.size()) continue;
    const std::string module = name.substr(0, dot);
    const std::string last = module.substr(module.rfind('.') + 1);
    if (std::find(lora_able.begin(), lora_able.end(), last) == lora_able.end()) continue;
    if (has_any(module, targets) && has_any(module, patterns)) out.push_back(module);
  }
  std::sort(out.begin(), out.end());
  if (out.empty())
    UNILLM_THROW(ConfigError, "[train] use_llama_pro with lora: no module of the expanded layers "
                 "matches lora_target");
  return out;
}

void prepare_lora(models::CausalLM& model, const TrainArgs& a, const std::string& resume_dir) {
  const auto& adapters = a.adapter_name_or_path;
  // LLaMA-Factory: a trainable run resumes the last adapter unless create_new_adapter; over a
  // quantised base nothing is merged (its one adapter is resumed).
  const size_t merge_count = a.quantization_bit > 0 ? 0
                             : a.create_new_adapter ? adapters.size()
                                                    : (adapters.empty() ? 0 : adapters.size() - 1);
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
    nn::LoraConfig c = lora_config(a);
    if (a.use_llama_pro)  // LoRA on the expanded layers only
      c.target_modules = llama_pro_lora_targets(model, c, a.freeze_trainable_layers);
    model.add_lora(kTrainAdapter, c, rng);
  }
  for (auto& p : model.module().parameters())  // the base stays frozen; the adapter trains
    p.tensor->set_requires_grad(p.adapter == kTrainAdapter);
  // additional_target / resize_vocab: PEFT modules_to_save, whole modules trained (vocab.h)
  // (trained in f32 like every trainable weight: a mixed-precision LoRA base loads in bf16/f16)
  for (auto& [name, t] : models::modules_to_save_params(model, lora_modules_to_save(a))) {
    if (t->dtype() != DType::f32) *t = ops::cast(*t, DType::f32);
    t->set_requires_grad(true);
  }
  model.set_active_adapters({kTrainAdapter});
}

}  // namespace

void check_qlora(const TrainArgs& a) {
  if (!a.adapter_tuning())  // LLaMA-Factory's init_adapter refuses the same
    UNILLM_THROW(ConfigError, "[config] ", a.config_path, ": quantization_bit ", a.quantization_bit,
                 " with finetuning_type ", a.finetuning_type, ": Quantization is only compatible with the LoRA method.");
  if (a.adapter_name_or_path.size() > 1)
    UNILLM_THROW(ConfigError, "[config] ", a.config_path, ": quantization_bit with ", a.adapter_name_or_path.size(),
                 " adapters in adapter_name_or_path: Quantized model only accepts a single adapter. Merge them first.");
}

void quantize_linear_for_qlora(nn::FusedLinear& lin, const TrainArgs& a, QloraSummary* s) {
  const bool four = a.quantization_bit == 4;
  const ops::QuantType type = !four ? ops::QuantType::int8
                              : a.quantization_type == "fp4" ? ops::QuantType::fp4 : ops::QuantType::nf4;
  if (s && s->what.empty())
    s->what = !four ? std::string("int8 (LLM.int8 per-row absmax, no outlier decomposition)")
                    : std::string(ops::quant_type_name(type)) + " blocksize " + std::to_string(ops::kBnbBlocksize) +
                          (a.double_quantization ? ", double quantization" : "");
  const size_t f32_bytes = static_cast<size_t>(lin.weight().numel()) * 4;
  ops::QuantizedWeight q = four ? ops::quantize_4bit(lin.weight(), type, {ops::kBnbBlocksize, a.double_quantization})
                                : ops::quantize_weight(lin.weight(), ops::QuantType::int8, 0, true);
  if (s) {
    s->f32_bytes += f32_bytes;
    s->quantized_bytes += q.bytes();
    ++s->layers;
  }
  lin.set_quantized(std::move(q));  // drops the dense copy
}

QloraSummary quantize_base_for_qlora(models::CausalLM& model, const TrainArgs& a) {
  check_qlora(a);
  if (!model.adapter_names().empty())
    UNILLM_THROW(ConfigError, "[train] quantization_bit: the model already has adapters attached");
  QloraSummary s;
  // Every decoder projection (bitsandbytes replaces each nn.Linear but the lm_head; the
  // embedding is no Linear): the f32 copy is dropped as each one is quantised. Those quantised
  // while loading (qlora_load_hook) are skipped.
  model.module().for_each_module("", [&](const std::string&, nn::Module& m) {
    auto* lin = dynamic_cast<nn::FusedLinear*>(&m);
    if (lin && !lin->is_quantized()) quantize_linear_for_qlora(*lin, a, &s);
  });
  return s;
}

std::function<void(nn::FusedLinear&)> qlora_load_hook(const TrainArgs& a) {
  check_qlora(a);
  return [a](nn::FusedLinear& lin) { quantize_linear_for_qlora(lin, a, nullptr); };
}

void prepare_finetuning(models::CausalLM& model, const TrainArgs& a, const std::string& resume_dir) {
  if (a.quantization_bit > 0 && !a.adapter_tuning()) quantize_base_for_qlora(model, a);  // throws
  if (a.finetuning_type == "full") {
    // BAdam's layer mode trains decoder layers only (one at a time, train/badam.h), its ratio
    // mode everything but the embeddings and lm_head (badam_ratio.h): the rest stays out of
    // the arena.
    std::vector<std::string> names;
    for (const auto& [n, _] : model.named_parameters()) names.push_back(n);
    const std::vector<bool> frozen = badam_ratio_frozen(names);
    auto ratio_trains = [&](const std::vector<std::string>& hf) {
      for (size_t i = 0; i < names.size(); ++i)
        if (frozen[i] && std::find(hf.begin(), hf.end(), names[i]) != hf.end()) return false;
      return true;
    };
    for (auto& p : model.module().parameters())
      p.tensor->set_requires_grad(!a.use_badam ? true
                                  : a.badam_mode == "ratio"
                                      ? ratio_trains(p.hf_names)
                                      : !layer_prefix(p.hf_names.at(0)).empty());
  } else if (a.finetuning_type == "freeze") {
    models::apply_freeze(model, freeze_config(a));
  } else if (a.adapter_tuning()) {  // lora or oft; quantised base: QLoRA / QOFT
    if (a.quantization_bit > 0) quantize_base_for_qlora(model, a);
    prepare_lora(model, a, resume_dir);
  } else {
    UNILLM_THROW(NotImplemented, "[train] finetuning_type '", a.finetuning_type,
                 "' is not implemented");
  }
}

models::FreezeConfig freeze_config(const TrainArgs& a) {
  models::FreezeConfig fc;
  fc.llama_pro = a.use_llama_pro;
  fc.trainable_layers = a.freeze_trainable_layers;
  fc.trainable_modules = a.freeze_trainable_modules;
  fc.extra_modules = a.freeze_extra_modules;
  return fc;
}

std::string oft_adjustment_note(models::CausalLM& model, const TrainArgs& a) {
  if (a.finetuning_type != "oft") return "";
  std::map<std::string, std::string> moved;  // "in -> used" per distinct input width, one example module
  for (auto& [prefix, f] : model.adapter_modules(kTrainAdapter)) {
    const nn::LoraWeights* w = f->lora(kTrainAdapter);
    if (w == nullptr || !w->oft_r.defined()) continue;
    const int64_t in = f->in_features(), blocks = in / w->oft_block;
    if (a.oft_rank != 0 ? blocks == a.oft_rank : w->oft_block == a.oft_block_size) continue;
    moved.emplace(std::to_string(in) + " inputs: " + (a.oft_rank != 0 ? "oft_rank " + std::to_string(blocks)
                                                                      : "oft_block_size " + std::to_string(w->oft_block)),
                  prefix + f->parts()[w->parts[0]].name);
  }
  if (moved.empty()) return "";
  std::string s = "warning: OFT: " + (a.oft_rank != 0 ? "oft_rank " + std::to_string(a.oft_rank)
                                                      : "oft_block_size " + std::to_string(a.oft_block_size)) +
                  " does not divide every layer's inputs; adjusted as PEFT does:";
  for (const auto& [what, example] : moved) s += " " + what + " (e.g. " + example + ");";
  s.pop_back();
  return s;
}

void save_trained(models::CausalLM& model, const TrainArgs& a, const std::string& dir,
                  const std::string& model_dir, const std::string& tokenizer_dir, const io::BeforeRead& before_read,
                  const nn::NamedTensors& head) {
  const int64_t base_rows = models::load_model_config(model_dir + "/config.json").vocab_size;
  if (a.adapter_tuning()) {
    models::AdapterSaveOptions so;
    so.base_model_name_or_path = a.model_name_or_path;
    so.modules_to_save = lora_modules_to_save(a);
    // PEFT's save_embedding_layers="auto": a vocabulary grown beyond the base's is saved in full
    so.save_embedding_layers = model.config().vocab_size != base_rows;
    so.token_classification_head = head;
    models::save_adapter(model, kTrainAdapter, dir, so);
    if (a.pissa_convert) {  // LLaMA-Factory's PissaConvertCallback: the initial and converted adapters
      models::save_pissa_adapter(model, kTrainAdapter, dir + "/pissa_init", models::PissaSave::kInitial, so);
      models::save_pissa_adapter(model, kTrainAdapter, dir + "/pissa_converted", models::PissaSave::kConverted, so);
    }
    save_training_tokenizer(tokenizer_dir, a, base_rows, dir);  // as LLaMA-Factory saves the tokenizer too
    return;
  }
  models::SaveOptions so;
  so.generation_config_dir = model_dir;
  so.before_read = before_read;
  so.token_classification_head = head;
  models::save_pretrained(model, dir, so);
  save_training_tokenizer(tokenizer_dir, a, base_rows, dir);  // with the tokens the run added (vocab.h)
}

DType low_precision_dtype(const TrainArgs& a) {
  return a.bf16 ? DType::bf16 : a.fp16 ? DType::f16 : DType::f32;
}

void cast_base_matrices(models::CausalLM& model, DType dtype) {
  for (auto& p : model.module().parameters())
    if (p.adapter.empty() && p.tensor->ndim() >= 2 && p.tensor->dtype() == DType::f32)
      *p.tensor = ops::cast(*p.tensor, dtype);
}

void cast_frozen_matrices(models::CausalLM& model, DType dtype) {
  for (auto& p : model.module().parameters())
    if (!p.tensor->requires_grad() && p.tensor->ndim() >= 2 && p.tensor->dtype() == DType::f32)
      *p.tensor = ops::cast(*p.tensor, dtype);
}

}  // namespace unillm::train
