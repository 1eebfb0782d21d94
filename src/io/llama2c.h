// llama2.c "legacy" (version 0) checkpoints: header, weights, and conversion of a checkpoint +
// tokenizer.bin into a Hugging Face Llama directory (config.json, model.safetensors,
// tokenizer.json, tokenizer_config.json, generation_config.json).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace unillm::io {

// The 7 int32 header values. vocab_size is stored negative when an unshared classifier (wcls)
// follows the weights; here vocab_size is always positive and shared_classifier says which.
struct Llama2cConfig {
  int64_t dim = 0;         // C
  int64_t hidden_dim = 0;  // F
  int64_t n_layers = 0;    // L
  int64_t n_heads = 0;     // H
  int64_t n_kv_heads = 0;  // Hkv
  int64_t vocab_size = 0;  // V
  int64_t seq_len = 0;
  bool shared_classifier = true;

  int64_t head_size() const { return dim / n_heads; }  // D
  int64_t kv_dim() const { return n_kv_heads * head_size(); }
  // Number of float32 values after the header (including the two legacy RoPE tables and wcls).
  int64_t float_count() const;
  int64_t file_bytes() const { return 28 + 4 * float_count(); }
  std::string str() const;  // "dim 64, hidden_dim 172, ..." for messages
};

// Validates the raw header (positive sizes, dim % n_heads, n_heads % n_kv_heads, even head size).
// Throws IoError "[llama2c] PATH: ...".
Llama2cConfig parse_llama2c_header(const int32_t raw[7], const std::string& path);
// Reads and validates the header of PATH, including that the file size matches it exactly.
Llama2cConfig read_llama2c_header(const std::string& path);
// True when PATH's header is valid and its size matches (used to explain what a .bin is).
bool looks_like_llama2c_checkpoint(const std::string& path);

// The weights in llama2.c layout; each matrix is (out_features, in_features) per layer.
struct Llama2cWeights {
  Llama2cConfig config;
  Tensor token_embedding;  // [V, C]
  Tensor rms_att;          // [L, C]
  Tensor wq;               // [L, C, C]
  Tensor wk;               // [L, Hkv*D, C]
  Tensor wv;               // [L, Hkv*D, C]
  Tensor wo;               // [L, C, C]
  Tensor rms_ffn;          // [L, C]
  Tensor w1;               // [L, F, C]  (gate)
  Tensor w2;               // [L, C, F]  (down)
  Tensor w3;               // [L, F, C]  (up)
  Tensor rms_final;        // [C]
  Tensor wcls;             // [V, C], undefined when shared with token_embedding
};
Llama2cWeights read_llama2c_checkpoint(const std::string& path);

// Reorders the rows of a q or k projection [n_heads*D, C] from llama2.c's adjacent-pair RoPE
// layout (x[2i], x[2i+1]) to HF's rotate_half layout (x[i], x[i+D/2]), as HF's
// convert_llama_weights_to_hf `permute` does: new row h*D + c*D/2 + i = old row h*D + 2i + c.
// For k use n_heads = n_kv_heads. Returns a new f32 CPU tensor.
Tensor permute_rope_rows(const Tensor& w, int64_t n_heads);

// The HF tensors of a checkpoint: model.embed_tokens.weight, model.layers.N.{self_attn.{q,k,v,o}_
// proj, mlp.{gate,up,down}_proj, input_layernorm, post_attention_layernorm}.weight,
// model.norm.weight, and lm_head.weight when the classifier is not shared.
std::vector<std::pair<std::string, Tensor>> llama2c_to_hf_tensors(const Llama2cWeights& w);

struct Llama2cConvertOptions {
  std::string checkpoint;  // llama2.c model .bin
  std::string tokenizer;   // llama2.c tokenizer.bin; empty = write no tokenizer files
  std::string out_dir;     // created; must be absent or empty unless force
  bool overwrite = false;  // write into a non-empty out_dir (our files are replaced)
};

// Reads and validates everything first, then writes the HF directory (each file atomically).
void convert_llama2c(const Llama2cConvertOptions& o);

}  // namespace unillm::io
