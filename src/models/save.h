// Writing a model as a Hugging Face dir: config.json, model.safetensors (sharded past a size
// limit, with an index), the tokenizer files and generation_config.json of a source dir.
#pragma once

#include <string>

#include "io/safetensors_writer.h"
#include "models/causal_lm.h"

namespace unillm::models {

struct SaveOptions {
  size_t max_shard_bytes = size_t{5} << 30;  // HF's default "5GB"
  std::string tokenizer_dir;  // copy tokenizer files from here ("" = none)
  std::string generation_config_dir;  // copy generation_config.json from here ("" = none)
  io::BeforeRead before_read;  // each weight just before it is written (ZeRO-3 gathers its unit)
  // When set (score.weight [1, hidden], score.bias [1]): the model is written as HF's
  // *ForTokenClassification with one label — these in place of lm_head.weight, the architecture
  // renamed, id2label / label2id of one label and classifier_dropout 0 in config.json (LLaMA-Factory
  // v1's reward model, AutoModelForTokenClassification).
  nn::NamedTensors token_classification_head;
};

// Writes into dir (created). Each file is written atomically.
void save_pretrained(const CausalLM& model, const std::string& dir, const SaveOptions& options);
// Copies the tokenizer files present in src_dir into dst_dir.
void copy_tokenizer_files(const std::string& src_dir, const std::string& dst_dir);

// HF's _init_weights for Llama-family models: linear and embedding weights N(0, std), biases
// zero, norm weights one, the pad_token_id row of the embedding zero (when in range).
void init_weights(CausalLM& model, double std, uint64_t seed, int32_t pad_token_id = -1);

}  // namespace unillm::models
