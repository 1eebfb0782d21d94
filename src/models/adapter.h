// PEFT-compatible LoRA adapter directories: adapter_config.json (PEFT's LoraConfig fields) and
// adapter_model.safetensors (keys "base_model.model.<module>.lora_A.weight", no adapter name),
// loading them onto a CausalLM as a named adapter, and merging an adapter into the base weights.
// The CausalLM adapter methods (add_lora, set_active_adapters, …) are implemented here too.
#pragma once

#include <string>

#include "models/causal_lm.h"
#include "nn/lora.h"

namespace unillm::models {

struct AdapterSaveOptions {
  std::string base_model_name_or_path;  // written into adapter_config.json
};

// Writes DIR/adapter_config.json and DIR/adapter_model.safetensors (f32) for adapter `name`
// (created; each file atomic). ConfigError when the model has no such adapter.
void save_adapter(CausalLM& model, const std::string& name, const std::string& dir,
                  const AdapterSaveOptions& options = {});

// Reads DIR/adapter_config.json into a LoraConfig. Throws IoError (missing/unreadable file),
// ConfigError (bad values, unknown target) or NotImplemented (DoRA, bias != "none",
// modules_to_save, rank/alpha patterns, layers_to_transform, fan_in_fan_out).
nn::LoraConfig read_adapter_config(const std::string& dir);

// Adds the adapter stored in DIR (PEFT layout; keys may also carry an adapter name, as in
// "...q_proj.lora_A.default.weight") to model under `name`; it is not activated. Refuses
// adapter_model.bin (pickle). IoError naming the key on a missing, unexpected or mis-shaped
// tensor; on error the model is left without the adapter. Returns the config.
nn::LoraConfig load_adapter(CausalLM& model, const std::string& dir, const std::string& name);

// PEFT's merge_and_unload for one adapter: W += scaling · B · A in each targeted weight
// (computed in f32, rounded once to the stored dtype: f32/bf16/f16), then the adapter is deleted.
void merge_adapter(CausalLM& model, const std::string& name);

// The PEFT key of one of our adapter parameter names:
// "model.layers.0.self_attn.q_proj.lora_A.NAME.weight" -> "base_model.model.model.layers.0.
// self_attn.q_proj.lora_A.weight".
std::string peft_key(const std::string& param_name, const std::string& adapter);

}  // namespace unillm::models
