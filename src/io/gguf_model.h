// What llama.cpp expects of a Llama-family GGUF, both ways: the architecture names, the
// hyper-parameter keys, the tensor-name map (HF "model.layers.3.self_attn.q_proj.weight" <->
// "blk.3.attn_q.weight") and the RoPE row permutation of q/k for the "llama" architecture.
// Pure functions over names, numbers and bytes: the model classes live above io.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/gguf.h"

namespace unillm::io {

// general.architecture for an HF model_type: "llama" for llama and mistral, "qwen2", "qwen3".
// Throws ConfigError naming the type otherwise.
std::string gguf_arch_for_model_type(const std::string& model_type);
// True for the architectures whose q/k rows llama.cpp expects in the GGUF rotary layout (it
// rotates adjacent pairs there; Qwen's NEOX RoPE uses the HF layout as is).
bool gguf_arch_permutes_qk(const std::string& arch);

// Mixture-of-experts layers (qwen2moe, qwen3moe): llama.cpp stacks one layer's experts into
// blk.N.ffn_{gate,up,down}_exps.weight [E, rows, cols], expert e's HF matrix at index e (its
// converter's torch.stack). split_expert_name: "model.layers.N.mlp.experts.E.<proj>.weight" ->
// N, E, proj ("gate_proj" | "up_proj" | "down_proj"); false for any other name.
bool split_expert_name(const std::string& hf_name, int64_t* layer, int64_t* expert, std::string* proj);
std::string gguf_experts_name(int64_t layer, const std::string& proj);
// blk.N.ffn_*_exps.weight -> N and proj; false for any other name.
bool split_gguf_experts_name(const std::string& gguf_name, int64_t* layer, std::string* proj);

// The GGUF name of an HF tensor, "" when llama.cpp has none for it (expert projections have
// none of their own: gguf_experts_name).
std::string gguf_tensor_name(const std::string& hf_name);
// The HF name of a GGUF tensor, "" when unknown (rope_freqs.weight has no HF tensor).
std::string hf_tensor_name(const std::string& gguf_name);

// Reorders the rows of a q or k projection (weight [n_heads·D, C] or bias [n_heads·D]) whose
// data is rows × row_bytes bytes (any element type: rows are moved whole). to_gguf: from HF's
// rotate_half layout (pair i = rows i, i + D/2 of a head) to GGUF's adjacent pairs (rows 2i,
// 2i+1): new row h·D + 2i + c = old row h·D + c·D/2 + i, the inverse of HF's conversion
// script; !to_gguf undoes it. Throws ConfigError when the rows do not split into even heads.
std::string permute_rope_rows(const uint8_t* data, int64_t rows, size_t row_bytes, int64_t n_heads,
                              bool to_gguf);

// The hyper-parameters written as "<arch>.*" keys.
struct GgufModelParams {
  std::string arch;  // gguf_arch_for_model_type
  std::string name;  // general.name
  int64_t context_length = 0, embedding_length = 0, block_count = 0, feed_forward_length = 0;
  int64_t head_count = 0, head_count_kv = 0, head_dim = 0, rope_dim = 0, vocab_size = 0;
  double rms_eps = 1e-6, rope_theta = 10000.0;
  // "", "linear" (factor written), "llama3" (rope_freqs tensor) or "yarn" (factor, original
  // context length, and attn_factor when not 1: llama.cpp multiplies it by 1 + 0.1·ln(factor)).
  std::string rope_scaling;
  double rope_factor = 1.0;
  int64_t rope_original_context = 0;
  double rope_attn_factor = 1.0;
  // Mixture of experts (written when expert_count > 0; the shared width when > 0).
  int64_t expert_count = 0, expert_used_count = 0, expert_feed_forward_length = 0;
  int64_t expert_shared_feed_forward_length = 0;
};
// Appends general.architecture, general.name and the "<arch>." keys (key_length/value_length
// only when head_dim differs from embedding_length / head_count).
void add_gguf_model_params(const GgufModelParams& p, GgufMetadata& md);

// Llama 3's per-frequency RoPE divisors as llama.cpp's rope_freqs tensor holds them ([rot_dim/2]
// f32; 1 for high frequencies, factor for low ones, blended between), computed as llama.cpp's
// converter does from the HF rope_scaling values.
std::vector<float> llama3_rope_factors(double theta, int64_t rot_dim, double factor,
                                       double low_freq_factor, double high_freq_factor,
                                       int64_t original_max_position);

// How export_gguf stores one HF tensor.
struct GgufTensorPlan {
  GgmlType type = GgmlType::kF32;  // the requested type for matrices
  std::string arch;
  int64_t head_count = 0, head_count_kv = 0;
};
// The GGUF tensor for an HF one: its GGUF name, its type (1-D tensors and routers F32; a matrix whose rows
// are not whole 32-blocks under Q8_0/Q4_0 falls back to F16, and *note says so), its bytes
// (q/k rows permuted for the "llama" architecture) encoded when the writer asks. ConfigError
// for a name llama.cpp has no tensor for.
GgufTensorOut gguf_tensor_from_hf(const std::string& hf_name, const Tensor& t,
                                  const GgufTensorPlan& plan, std::string* note);

// The stacked tensor of one layer's experts for one projection (each [rows, cols], in expert
// order), typed and encoded as gguf_tensor_from_hf does a matrix (no permutation).
GgufTensorOut gguf_experts_from_hf(const std::string& gguf_name, const std::vector<Tensor>& experts,
                                   const GgufTensorPlan& plan, std::string* note);

}  // namespace unillm::io
