// Self-attention of the Llama family: fused QKV projection (optional bias), optional per-head
// q/k RMSNorm (Qwen3), RoPE, then ops::attention — with a KV view a write of the new K/V into the
// paged cache and flash-style GQA attention through the block tables, without one the training
// kernel — and the output projection. One forward serves inference and training.
#pragma once

#include <memory>
#include <vector>

#include "autograd/node.h"
#include "nn/linear.h"
#include "nn/norm.h"
#include "nn/shift_attention.h"
#include "ops/attention.h"

namespace unillm::ops {
class MoeBalance;
}

namespace unillm::nn {

struct AttentionConfig {
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool qkv_bias = false, o_bias = false, qk_norm = false;
  double norm_eps = 1e-6;
  DType weight_dtype = DType::f32;
  Device device;
  bool lazy_weights = false;  // ParamPlacement::lazy
  // Multiplies the softmax scale 1/√D: YaRN's attention factor m scales q and k, so m² (see
  // ops::rope_attention_factor).
  double score_scale = 1.0;
};

// What one forward call needs besides x, shared by every layer. Inference fills the KV view's
// slot_mapping and batch (each layer brings its own caches, LayerCache); training fills the
// B rows × T tokens layout and leaves the caches out.
struct AttentionInputs {
  Tensor positions;  // [N] i32
  const std::vector<float>* inv_freq = nullptr;  // RoPE inverse frequencies (all layers)
  std::shared_ptr<const LoraRun> lora;  // adapters of this call (shared: lives until backward)
  // Inference: the cache slot of each new token and the ragged batch (block tables, q_start,
  // kv_len).
  Tensor slot_mapping;  // [N] i32
  const ops::AttentionBatch* batch = nullptr;
  // Training: rows × tokens = N; segments keep packed samples apart (undefined: plain causal).
  int64_t rows = 0, tokens = 0;
  Tensor segment_ids;  // [rows, tokens] i32
  // Training under tensor parallelism (nn/tensor_parallel.h): the group this call's split layers
  // run over (each rank its share of the heads and of the MLP; under sequence parallelism x is
  // the rank's token rows and so is the result); no group: the whole layer.
  TensorParallel tp;
  // Tensor beside context parallelism: the group the MLPs split over (a run of tp.nest ranks of
  // tp's group) and the rows of this rank's context shard it gathers; inactive otherwise.
  TensorParallel mlp_tp;
  // Context parallelism with adapter dropout: the MLPs' adapters, whose input rows start at
  // mask_row_begin of the call's tokens (this rank's rows, or its shard's); null: lora.
  std::shared_ptr<const LoraRun> mlp_lora;
  // Training under expert parallelism (nn/expert_parallel.h): the group this call's sparse layers
  // split their experts over; null: every expert on this process.
  Collective* experts = nullptr;
  // Training with LongLoRA's S²-Attn (shift_attn): the groups of this call; null = plain causal.
  std::shared_ptr<const ShiftedGroups> shift;
  // Training with the router load-balancing loss: what this call's sparse layers record their
  // routing in (ops/moe_balance.h); null = none.
  std::shared_ptr<ops::MoeBalance> moe_balance;
};

// One layer's paged K/V storage [NB, BS, Hkv, D]; both null in training (no cache).
struct LayerCache {
  Tensor* k = nullptr;
  Tensor* v = nullptr;
};

// What a recompute re-run of a training forward takes from its forward instead of recomputing:
// the attention kernel's out (a saved activation, [B, T, H, D]) and lse ([B, T, H]). The re-run
// still recomputes q, k and v (the backward needs them), but not the attention itself.
struct AttentionStash {
  autograd::SavedTensor out, lse;
};

class Attention : public Module {
 public:
  explicit Attention(const AttentionConfig& c);
  // x [N, C] -> [N, C], the one forward of inference and training. With a cache the new K/V are
  // written at in.slot_mapping and attention reads the blocks (no grad); without, it is the
  // differentiable causal attention over in.rows × in.tokens. use = kGradOnly: the result's
  // value is not needed (recompute re-run), so o_proj only records its backward node. stash
  // (training recompute only): the kValue run fills it, the kGradOnly re-run replays it and
  // empties it.
  Tensor forward(const Tensor& x, const AttentionInputs& in, LayerCache cache = {},
                 ops::OutputUse use = ops::OutputUse::kValue, AttentionStash* stash = nullptr) const;
  // The fuse_rope_into_qk pass: q/k/v come out of the projection through one ops::rope_qkv
  // instead of a split and two ropes (same values). Layers with q/k norms (Qwen3) normalise
  // between the split and the rotation, so they keep the separate ops; returns whether it applies.
  bool set_fused_rope(bool on);
  bool fused_rope() const { return fused_rope_; }
  // Tensor parallelism: q/k/v column-parallel (heads split), o_proj row-parallel. Throws
  // ConfigError when the heads, the kv heads or a projection cannot be split over size ranks.
  void check_split(int size) const;
  // The tensors whose gradient is a rank's own share (nn/linear.h), and the q/k norms' weights
  // (each rank's heads add their part of the gradient).
  void split_tensors(std::vector<const Tensor*>& out) const;
  // The linears tensor parallelism splits (q/k/v column-, o_proj row-parallel).
  void split_linears(std::vector<FusedLinear*>& out) { out.insert(out.end(), {&qkv_, &o_proj_}); }

 private:
  AttentionConfig c_;
  bool fused_rope_ = false;
  FusedLinear qkv_;
  Linear o_proj_;
  std::unique_ptr<RMSNorm> q_norm_, k_norm_;
};

}  // namespace unillm::nn
