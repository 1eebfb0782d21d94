// How `finetuning_type` shapes a run (LLaMA-Factory's model/adapter.py): which tensors train
// (full: all; freeze: the selected layers/modules; lora: a new or resumed adapter on a frozen
// base), and how the trained weights are written (an HF model dir, or a PEFT adapter dir).
#pragma once

#include <string>

#include "io/safetensors_writer.h"
#include "models/causal_lm.h"
#include "models/freeze.h"
#include "train/args.h"

namespace unillm::train {

// The adapter name a LoRA run trains (PEFT's default).
inline constexpr const char* kTrainAdapter = "default";

// Marks the trainable tensors of a freshly loaded model. For lora: merges every adapter of
// adapter_name_or_path but the last into the base, then resumes the last one (or all are merged
// with create_new_adapter) or creates a new adapter; resume_dir (a checkpoint dir, or "") then
// supplies the adapter weights. Throws ConfigError naming the bad key or file.
void prepare_finetuning(models::CausalLM& model, const TrainArgs& a, const std::string& resume_dir);

// freeze tuning's rules from the args (freeze_trainable_layers / _modules, freeze_extra_modules,
// use_llama_pro).
models::FreezeConfig freeze_config(const TrainArgs& a);

// OFT: a line saying which layers got another block size than oft_rank / oft_block_size asked
// for (PEFT's adjust_oft_parameters, nn::oft_blocks, which PEFT logs as a warning); "" when none.
std::string oft_adjustment_note(models::CausalLM& model, const TrainArgs& a);

// Writes the trained weights into dir: save_pretrained (full, freeze) or a PEFT adapter dir
// (lora), with the tokenizer files of tokenizer_dir and generation_config.json of model_dir.
// before_read: called with each weight of a full model just before it is written (ZeRO-3's
// streamed saving; an adapter dir does not call it). head: a token classifier's score head
// (Stage::saved_head), saved as its *ForTokenClassification model or TOKEN_CLS adapter.
void save_trained(models::CausalLM& model, const TrainArgs& a, const std::string& dir,
                  const std::string& model_dir, const std::string& tokenizer_dir,
                  const io::BeforeRead& before_read = {}, const nn::NamedTensors& head = {});

// QLoRA (quantization_bit 4 / 8): replaces every decoder FusedLinear's weight by its
// bitsandbytes-style quantisation (nf4/fp4 + double quantisation, or per-row int8); embeddings,
// norms and the lm_head stay dense. prepare_finetuning calls it before the adapter is added.
// Throws ConfigError unless finetuning_type is lora or oft (QOFT; LLaMA-Factory's rule) and at most one
// adapter is given.
struct QloraSummary {
  int64_t layers = 0;
  size_t f32_bytes = 0;        // the dense f32 weights replaced
  size_t quantized_bytes = 0;  // what now holds them (codes, scales, double-quantised scales)
  std::string what;            // e.g. "nf4 blocksize 64, double quantization"
};
QloraSummary quantize_base_for_qlora(models::CausalLM& model, const TrainArgs& a);
// The same quantisation of one linear, as models::LoadOptions::on_linear_loaded: the trainer
// loads a QLoRA base through it, so each projection is quantised as soon as it is read and the
// load's peak holds one dense projection, not the dense model (docs/qlora.md). quantize_base_for_qlora
// then finds them quantised. Throws as quantize_base_for_qlora on a bad configuration.
std::function<void(nn::FusedLinear&)> qlora_load_hook(const TrainArgs& a);

// bf16 / f16 under mixed precision (`bf16: true` / `fp16: true`), else f32.
DType low_precision_dtype(const TrainArgs& a);
// Casts every frozen base matrix (2-D and larger: embeddings, projections; norms stay f32) to
// dtype, so only trainable weights keep an f32 copy.
void cast_frozen_matrices(models::CausalLM& model, DType dtype);
// Every base (non-adapter) f32 matrix to dtype, trainable or not: HF's bf16_full_eval /
// fp16_full_eval model cast for an evaluation outside training (adapters and 1-D weights stay f32).
void cast_base_matrices(models::CausalLM& model, DType dtype);

}  // namespace unillm::train
