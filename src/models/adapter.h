// PEFT-compatible LoRA adapter directories: adapter_config.json (PEFT's LoraConfig fields) and
// adapter_model.safetensors (keys "base_model.model.<module>.lora_A.weight", no adapter name;
// DoRA's magnitude "base_model.model.<module>.lora_magnitude_vector", PEFT 0.13's key),
// loading them onto a CausalLM as a named adapter, and merging an adapter into the base weights.
// The CausalLM adapter methods (add_lora, set_active_adapters, …) are implemented here too.
// PEFT 0.17's OFT adapters (peft_type OFT, "<module>.oft_R.weight") go through the same functions
// (LoraConfig::is_oft; their adapter_config.json in adapter_oft.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "models/causal_lm.h"
#include "nn/lora.h"

namespace unillm::io {
class CheckpointReader;
}

namespace unillm::models {

struct AdapterSaveOptions {
  std::string base_model_name_or_path;  // written into adapter_config.json
  // PEFT modules_to_save (LLaMA-Factory's additional_target): these modules' base weights are
  // saved in full under their base names and listed in adapter_config.json.
  std::vector<std::string> modules_to_save;
  // PEFT's save_embedding_layers (its "auto" turns it on when the vocabulary was resized): the
  // embedding and lm_head are stored in full too, without being listed as modules_to_save.
  bool save_embedding_layers = false;
  // When set (score.weight, score.bias): the adapter of a token classifier, as PEFT saves one for
  // LLaMA-Factory v1's reward model — task_type TOKEN_CLS, "classifier" and "score" added to
  // modules_to_save, these tensors stored as base_model.model.score.*.
  nn::NamedTensors token_classification_head;
};

// Writes DIR/adapter_config.json and DIR/adapter_model.safetensors (f32) for adapter `name`
// (created; each file atomic). ConfigError when the model has no such adapter.
void save_adapter(CausalLM& model, const std::string& name, const std::string& dir,
                  const AdapterSaveOptions& options = {});

// PiSSA adapters (LLaMA-Factory's PissaConvertCallback, PEFT's save_pretrained with
// path_initial_model_for_weight_conversion): kInitial writes the initial A0, B0 (rank r,
// init_lora_weights true); kConverted writes the trained adapter as a plain LoRA of rank 2r over
// the ORIGINAL base, A' = [A; A0], B' = [B | −B0], lora_alpha × 2 (× √2 with use_rslora).
// ConfigError when the adapter was not made by pissa_init (in this process).
enum class PissaSave { kInitial, kConverted };
void save_pissa_adapter(CausalLM& model, const std::string& name, const std::string& dir,
                        PissaSave what, const AdapterSaveOptions& options = {});

// True when DIR/adapter_config.json says task_type TOKEN_CLS (a token classifier's adapter,
// whose score head load_adapter leaves to the reward-model stage).
bool is_token_classification_adapter(const std::string& dir);

// Reads DIR/adapter_config.json into a LoraConfig. Throws IoError (missing/unreadable file),
// ConfigError (bad values, unknown target) or NotImplemented (init_lora_weights olora / loftq /
// eva, which change the base in ways not reproduced here; bias != "none",
// rank/alpha patterns, layers_to_transform, fan_in_fan_out).
nn::LoraConfig read_adapter_config(const std::string& dir);

// A PiSSA adapter (init_lora_weights "pissa" / "pissa_niter_<n>") re-decomposes the targeted
// base weights on loading, as PEFT does.
// Adds the adapter stored in DIR (PEFT layout; keys may also carry an adapter name, as in
// "...q_proj.lora_A.default.weight") to model under `name`; it is not activated. Its
// modules_to_save tensors overwrite the base weights (an embedding with more rows grows the
// model's vocabulary to match; a tied model is untied when one of its embeddings is saved). Refuses
// adapter_model.bin (pickle). IoError naming the key on a missing, unexpected or mis-shaped
// tensor; on error the model is left without the adapter. Returns the config.
nn::LoraConfig load_adapter(CausalLM& model, const std::string& dir, const std::string& name);

// PEFT's merge_and_unload for one adapter: W += scaling · B · A in each targeted weight (DoRA: then
// each row × m / ‖W + scaling · B · A‖)
// (computed in f32, rounded once to the stored dtype: f32/bf16/f16), then the adapter is deleted.
void merge_adapter(CausalLM& model, const std::string& name);

// ---- PEFT modules_to_save (adapter_modules.cpp): whole modules trained beside the adapter. unillm
// keeps them in the base weights, so they apply whichever adapters are active.
// The base parameters of the modules whose names end with a target (PEFT's rule), as
// (HF name, tensor). A tied model is untied first when an embedding matches (PEFT copies each
// module). NotImplemented for a linear layer (only embed_tokens, lm_head, norms); ConfigError for
// a target matching nothing.
std::vector<std::pair<std::string, Tensor*>> modules_to_save_params(CausalLM& model,
                                                                     const std::vector<std::string>& targets);
// adapter_config.json's modules_to_save (empty when null or absent).
std::vector<std::string> read_modules_to_save(const std::string& dir);
// The base parameter name a PEFT file key of a saved module stands for
// ("base_model.model.model.embed_tokens.weight", or PEFT's in-memory
// "...embed_tokens.modules_to_save.default.weight" -> "model.embed_tokens.weight"); "" when the key
// is not one of targets' modules.
std::string modules_to_save_key(const std::string& file_key, const std::vector<std::string>& targets);
// Whether a file key belongs to a saved module, including the copies PEFT's save_embedding_layers
// adds ("X.original_module.weight", "X.modules_to_save.weight"), which are ignored as PEFT does.
bool is_modules_to_save_file_key(const std::string& file_key, const std::vector<std::string>& targets);
// The embedding and lm_head as (HF name, tensor) for save_embedding_layers; a tied model gives
// its embedding for both names (the model is not untied).
std::vector<std::pair<std::string, Tensor>> embedding_layer_tensors(CausalLM& model);
// The modules an adapter file holds in full: adapter_config.json's modules_to_save, plus
// embed_tokens / lm_head when the file has them under their base names (save_embedding_layers).
std::vector<std::string> saved_module_targets(const std::string& dir, const std::vector<std::string>& file_keys);
// Writes the modules_to_save tensors of an adapter file into the model (load_adapter's part).
void apply_modules_to_save(CausalLM& model, const io::CheckpointReader& ckpt, const std::string& dir,
                           const std::vector<std::string>& targets);

// The PEFT key of one of our adapter parameter names:
// "model.layers.0.self_attn.q_proj.lora_A.NAME.weight" -> "base_model.model.model.layers.0.
// self_attn.q_proj.lora_A.weight".
std::string peft_key(const std::string& param_name, const std::string& adapter);

}  // namespace unillm::models
