// Internals shared by args.cpp (loading, key dispatch) and args_fields.cpp (typed setters and
// cross-key checks). Not part of the public API.
#pragma once

#include <nlohmann/json.hpp>

#include <yaml-cpp/yaml.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/args.h"
#include "train/key_table.h"

namespace unillm::train::detail {

// The problems of one config, collected so that a user sees all of them in one run instead of
// fixing a file key by key: every key's setter and every cross-key rule runs under attempt(),
// and raise_if_any() throws one error listing them, each with its file and line.
class Problems {
 public:
  // Runs fn; a ConfigError or NotImplemented it throws is recorded instead of escaping (other
  // errors are bugs and escape). Returns whether fn finished.
  template <typename F>
  bool attempt(F&& fn) {
    try {
      fn();
      return true;
    } catch (const NotImplemented& e) {
      add(e.what(), false);
    } catch (const ConfigError& e) {
      add(e.what(), true);
    }
    return false;
  }
  void add(std::string message, bool config_error);
  bool empty() const { return messages_.empty(); }
  // One problem: rethrown as it was. Several: a ConfigError (NotImplemented when every one is
  // that) whose message lists them one per line after "[config] SOURCE: N problems".
  void raise_if_any(const std::string& source) const;

 private:
  std::vector<std::string> messages_;
  bool any_config_error_ = false;
};

// One key's value and where it came from ("cfg.yaml line 3" or "command line").
struct Field {
  std::string key;
  YAML::Node node;
  std::string where;
};

[[noreturn]] void bad_value(const Field& f, const std::string& expected);
[[noreturn]] void not_implemented(const Field& f, const std::string& what);
std::string show(const YAML::Node& n);  // a value as messages quote it
// Typed getters: each throws ConfigError naming the key and what was expected.
bool get_bool(const Field& f);
int64_t get_int(const Field& f, int64_t min);
double get_number(const Field& f, const std::string& range);
double get_number_in(const Field& f, double lo, double hi, bool lo_open, bool hi_open);
std::string get_string(const Field& f);
std::vector<std::string> get_list(const Field& f);  // "a, b" or a YAML list
std::string get_choice(const Field& f, const std::vector<std::string>& choices);
bool is_off(const YAML::Node& n);  // null, false, 0, "", "none", an empty list or map
// A YAML value as JSON: plain scalars that read as numbers or booleans become those, quoted ones
// stay strings (args_parallel.cpp; the JSON-valued keys: deepspeed, fsdp_config, accelerator_config).
nlohmann::json yaml_to_json(const YAML::Node& n);
// The text of the file a key names (relative to the directory unillm runs in, as HF takes it).
std::string read_config_text(const Field& f, const std::string& path);

// Sets one implemented key; false when key has no setter (a table/setter mismatch).
bool set_field(TrainArgs& a, const Field& f);
// The SFT, freeze, LoRA, export and PaddleNLP keys (args_fields_sft.cpp).
bool set_finetune_field(TrainArgs& a, const Field& f);
// resize_vocab, add_tokens, add_special_tokens, new_special_tokens_config, init_special_tokens,
// additional_target (args_fields_vocab.cpp).
bool set_vocab_field(TrainArgs& a, const Field& f);
// tokenized_path, gradient_checkpointing_kwargs, pure_bf16, train_sampling_strategy (args_fields_misc.cpp), and their
// cross-key rules (called by finish_finetune_args).
bool set_misc_field(TrainArgs& a, const Field& f);
void finish_misc_args(TrainArgs& a, const std::string& where, Problems& problems);
// deepspeed, fsdp, fsdp_config, sharding, sharding_parallel_degree (args_parallel.cpp): ZeRO.
bool set_parallel_field(TrainArgs& a, const Field& f);
// The keys of LLaMA-Factory's Megatron paths (tensor_model_parallel_size, …; args_megatron.cpp)
// and use_kt; finish_megatron_args applies the sizes (called before finish_parallel_args).
bool set_megatron_field(TrainArgs& a, const Field& f);
void finish_megatron_args(TrainArgs& a, const std::string& where, Problems& problems);
// accelerator_config, split_batches, dispatch_batches (args_accelerator.cpp).
bool set_accelerator_field(TrainArgs& a, const Field& f);
void finish_parallel_args(TrainArgs& a, const std::string& where, Problems& problems);
// use_badam, badam_*, use_llama_pro (args_badam.cpp) and their cross-key rules.
bool set_badam_field(TrainArgs& a, const Field& f);
void finish_badam_args(TrainArgs& a, const std::string& where, Problems& problems);
// use_galore, galore_*, use_apollo, apollo_* (args_low_rank.cpp) and their cross-key rules.
bool set_low_rank_field(TrainArgs& a, const Field& f);
void finish_low_rank_args(TrainArgs& a, const std::string& where, Problems& problems);
// init_special_tokens' fallback to noise_init without descriptions (args_fields_vocab.cpp).
void finish_vocab_args(TrainArgs& a, const std::string& where);
// oft_rank, oft_block_size, oft_target, module_dropout (args_oft.cpp) and their cross-key rules.
bool set_oft_field(TrainArgs& a, const Field& f);
void finish_oft_args(TrainArgs& a, const std::string& where, Problems& problems);
// use_dft_loss, use_eaft_loss, eaft_alpha, use_asft_loss, asft_alpha (args_fields_loss.cpp), and
// their cross-key rules.
bool set_loss_field(TrainArgs& a, const Field& f);
void finish_loss_args(TrainArgs& a, const std::string& where, Problems& problems);
// use_muon, use_adam_mini (args_muon_adam_mini.cpp) and their cross-key rules.
bool set_muon_adam_mini_field(TrainArgs& a, const Field& f);
void finish_muon_adam_mini_args(const TrainArgs& a, const std::string& where, Problems& problems);
// Sets every field through the key table, then every `direct` field through its setter whatever
// the table says (PaddleNLP keys outside the table, and HF keys the PaddleNLP dialect implements
// before the YAML one does), then finish_args (shared by the YAML and PaddleNLP dialects; source
// names the config file).
TrainArgs apply_fields(const std::map<std::string, Field>& fields, const std::string& source,
                       const std::map<std::string, Field>& direct = {}, Problems problems = {},
                       ConfigUse use = ConfigUse::kTrain);
// Whether the command `use` reads this implemented key (args_use.cpp).
bool used_by(ConfigUse use, const KeyInfo& key);
// Sets a GeneratingArguments key (ConfigUse::kChat) or infer_backend; false when key is not one.
bool set_generating_field(TrainArgs& a, const Field& f);
// Cross-key rules of those keys (called by finish_args).
void finish_finetune_args(TrainArgs& a, const std::string& where, Problems& problems);
// Cross-key rules and derived values (packing default, eval_steps, do_eval); where names the
// config file.
void finish_args(TrainArgs& a, const std::string& where, const std::set<std::string>& given,
                 Problems& problems);

// A LLaMA-Factory v1 config (USE_V1=1 llamafactory-cli sft; docs/llamafactory-v1.md): whether a
// YAML mapping is one (train_dataset, or model with micro_batch_size / peft_config / dist_config
// and no model_name_or_path), and its keys mapped onto unillm's with v1's fixed semantics (stage
// sft, torch AdamW defaults with decay on every tensor, a constant learning rate). Every key it
// cannot take is reported at once with its line.
bool is_v1_config(const YAML::Node& root);
// The fields only a v1 translation sets (v1_train_dataset, v1_global_batch_size,
// decay_all_params); false for any other key.
bool set_v1_field(TrainArgs& a, const Field& f);
TrainArgs parse_v1_args(const YAML::Node& root, const std::string& source,
                        const std::vector<std::string>& overrides, ConfigUse use);

}  // namespace unillm::train::detail
