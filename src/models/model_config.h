// The architecture hyper-parameters of a Llama-family model, read from HF config.json.
// Family differences are flags here (qkv bias, qk-norm, tied embeddings, head_dim, RoPE scaling).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/tokenizer.h"
#include "ops/rope.h"

namespace unillm::models {

struct ModelConfig {
  std::string architecture;  // e.g. LlamaForCausalLM
  // A *ForTokenClassification model with one label (LLaMA-Factory v1's reward model): the
  // decoder with a per-token score head (score.weight, score.bias) and no lm_head. Only the
  // reward-model stage reads one (train/stages/reward.h); loading leaves the lm_head zero.
  bool token_classification = false;
  std::string model_type;  // llama, mistral, qwen2, qwen3, qwen2_moe, qwen3_moe
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;  // C
  int64_t intermediate_size = 0;  // F
  int64_t num_layers = 0;  // L
  int64_t num_heads = 0;  // H
  int64_t num_kv_heads = 0;  // Hkv
  int64_t head_dim = 0;  // D
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // bias on q/k/v projections (qwen2: always)
  bool o_bias = false;  // bias on o_proj (llama attention_bias: true)
  bool mlp_bias = false;
  bool qk_norm = false;  // qwen3: RMSNorm over head_dim on q and k per head
  ops::RopeConfig rope;
  int64_t sliding_window = 0;  // 0 = none
  // Mixture of experts (qwen2_moe, qwen3_moe; nn/moe.h). num_experts 0 = every layer dense.
  int64_t num_experts = 0;  // E
  int64_t num_experts_per_tok = 0;  // k
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;  // qwen2_moe; 0 = none
  bool norm_topk_prob = false;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  // HF then adds router_aux_loss_coef × the router load-balancing loss (ops/moe_balance.h) to the
  // training loss.
  bool output_router_logits = false;
  double router_aux_loss_coef = 0.001;
  // The coefficient the training loss adds the load-balancing loss with: router_aux_loss_coef
  // for a mixture-of-experts model trained with it (output_router_logits), else 0.
  double router_aux_loss() const { return num_experts > 0 && output_router_logits ? router_aux_loss_coef : 0.0; }
  // HF's rule: layer l is sparse when E > 0, l is not in mlp_only_layers and (l + 1) is a
  // multiple of decoder_sparse_step.
  bool sparse_layer(int64_t l) const;
  // Mixture-of-depths (the mixture-of-depth package LLaMA-Factory's `mixture_of_depths` uses;
  // models/mixture_of_depths.h): every odd layer becomes a router ("router.weight_predictor",
  // a [1, C] weight and a bias, f32) around the layer (its weights under "block."). Set from
  // config.json's architectures (*MoDForCausalLM, `mixture_of_depths: load`) or by the trainer
  // (`convert`, whose checkpoint has plain layers: mod_convert, routers drawn from mod_seed).
  bool mixture_of_depths = false;
  bool mod_convert = false;
  uint64_t mod_seed = 0;
  bool mod_layer(int64_t l) const { return mixture_of_depths && l % 2 == 1; }
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;
  std::string torch_dtype;  // as written in config.json ("" when absent)
  double initializer_range = 0.02;
  int32_t pad_token_id = -1;
  std::string raw_json;  // the config.json text, written back by save_pretrained
};

// Parses PATH (a config.json). Throws ConfigError naming the file and key on missing or
// mistyped keys and on an unsupported model_type / architecture (listing the supported ones).
ModelConfig load_model_config(const std::string& path);
// The same for the text of a config.json; path names it in messages.
ModelConfig parse_model_config(const std::string& text, const std::string& path);
// LLaMA-Factory's moe_aux_loss_coef on a mixture-of-experts config (its configure_moe): sets
// output_router_logits and router_aux_loss_coef, in the fields and in raw_json (so the saved
// config.json says them too, as LLaMA-Factory's does). Dense configs are left as they are.
void set_router_aux_loss(ModelConfig& config, double coef);
// Throws ConfigError when tokenizer has ids beyond the embedding rows of the model whose
// config.json is config_path (such a token would fail only when it is used): names both files.
void check_tokenizer_fits(const io::Tokenizer& tokenizer, const ModelConfig& config,
                          const std::string& config_path);
// The model types this build can run.
const std::vector<std::string>& supported_model_types();

}  // namespace unillm::models
