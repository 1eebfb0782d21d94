// Self-attention of the Llama family: fused QKV projection (optional bias), optional per-head
// q/k RMSNorm (Qwen3), RoPE, a write of the new K/V into the paged cache, flash-style causal
// GQA attention through the block table, and the output projection.
#pragma once

#include <memory>
#include <vector>

#include "autograd/node.h"
#include "nn/linear.h"
#include "nn/norm.h"
#include "ops/attention.h"

namespace unillm::nn {

struct AttentionConfig {
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool qkv_bias = false, o_bias = false, qk_norm = false;
  double norm_eps = 1e-6;
  DType weight_dtype = DType::f32;
  Device device;
};

// What one forward call needs besides x: positions, where new K/V go, and the batch layout.
struct AttentionInputs {
  Tensor positions;  // [N] i32
  Tensor slot_mapping;  // [N] i32: cache slot of each new token
  const ops::AttentionBatch* batch = nullptr;
  const std::vector<float>* inv_freq = nullptr;  // RoPE inverse frequencies (all layers)
  const LoraRun* lora = nullptr;  // adapters of this call (nullptr: none)
};

// Training layout: N = B × T tokens of B rows of T; segments keep packed samples apart.
struct TrainInputs {
  Tensor positions;  // [N] i32
  Tensor segment_ids;  // [B, T] i32 or undefined (plain causal)
  int64_t batch = 0, seq = 0;  // B, T
  const std::vector<float>* inv_freq = nullptr;
  std::shared_ptr<const LoraRun> lora;  // adapters of this call (shared: lives until backward)
};

// What a recompute re-run of forward_train takes from its forward instead of recomputing: the
// attention kernel's out (a saved activation, [N, H·D]) and lse ([B, T, H]). The re-run still
// recomputes q, k and v (the backward needs them), but not the attention itself.
struct AttentionStash {
  autograd::SavedTensor out, lse;
};

class Attention : public Module {
 public:
  explicit Attention(const AttentionConfig& c);
  // x [N, C] -> [N, C]; k_cache/v_cache [NB, BS, Hkv, D] are written at slot_mapping.
  Tensor forward(const Tensor& x, const AttentionInputs& in, Tensor& k_cache, Tensor& v_cache) const;
  // Training forward without a cache (differentiable): x [N, C] -> [N, C]. use = kGradOnly: the
  // result's value is not needed (recompute re-run), so o_proj only records its backward node.
  // stash (recompute only): the kValue run fills it, the kGradOnly re-run replays it and empties it.
  Tensor forward_train(const Tensor& x, const TrainInputs& in,
                       ops::OutputUse use = ops::OutputUse::kValue,
                       AttentionStash* stash = nullptr) const;

 private:
  AttentionConfig c_;
  FusedLinear qkv_;
  Linear o_proj_;
  std::unique_ptr<RMSNorm> q_norm_, k_norm_;
};

}  // namespace unillm::nn
