// LLaMA-Factory's `rope_scaling` key for training (its model_utils/rope.py configure_rope): when
// the model_max_length it trains with (cutoff_len) exceeds the model's length, RoPE is scaled by
// factor = ceil(cutoff_len / that length) and max_position_embeddings grows to length × factor;
// the saved config.json carries both, so HF transformers (and unillm) load the trained model with
// the same positions. "That length" is rope_scaling.original_max_position_embeddings when the
// config has it, else max_position_embeddings. Otherwise scaling is disabled with a note.
#pragma once

#include <string>

#include "models/model_config.h"

namespace unillm::train {

// Applies the rule to cfg (its raw_json and parsed fields, re-read through parse_model_config)
// for type linear, dynamic, yarn or llama3 (all but linear add original_max_position_embeddings,
// llama3 also LLaMA-Factory's low/high frequency factors 1 and 4). Returns the line to log.
std::string apply_rope_scaling(models::ModelConfig& cfg, const std::string& type, int64_t model_max_length,
                               const std::string& config_path);

}  // namespace unillm::train
