// The sparse mixture-of-experts block of Qwen2-MoE and Qwen3-MoE (HF's *SparseMoeBlock): a router
// `gate` [E, C] picks k experts per token (ops::moe_route), each expert is a SwiGLU MLP of
// moe_intermediate_size, and their outputs are added with the router's weights
// (ops::moe_combine); qwen2_moe adds a shared expert scaled by sigmoid(shared_expert_gate(x)).
// Work and gradient memory are O(N·k·C): each expert runs only on the tokens routed to it.
// docs/ARCHITECTURE.md, "Mixture of experts".
#pragma once

#include <memory>
#include <vector>

#include "nn/mlp.h"
#include "ops/moe.h"

namespace unillm::nn {

struct MoeConfig {
  int64_t hidden = 0;  // C
  int64_t experts = 0;  // E
  int64_t top_k = 0;  // k
  int64_t ffn = 0;  // moe_intermediate_size
  int64_t shared_ffn = 0;  // shared_expert_intermediate_size; 0 = no shared expert
  bool norm_topk_prob = false;  // renormalise the k weights to sum to 1
};

class SparseMoE : public Module {
 public:
  SparseMoE(const MoeConfig& c, ParamPlacement weights);
  // [N, C] -> [N, C], the experts' projections with the adapters of lora (nullptr: none).
  // balance: the training forward's router load-balancing loss (ops/moe_balance.h), which the
  // routing is recorded in when `record` (not in a recompute re-run); null = none.
  // experts_group: training under expert parallelism (nn/expert_parallel.h): x is this process's
  // rows, its experts run on the group's tokens routed to them and the result is this process's
  // rows summed over all experts; null (or one process): every expert here.
  Tensor forward(const Tensor& x, const LoraRun* lora = nullptr,
                 const std::shared_ptr<ops::MoeBalance>& balance = nullptr, bool record = true,
                 Collective* experts_group = nullptr) const;
  // Tensor parallelism is not built for sparse layers: throws NotImplemented for size > 1.
  void check_split(int size) const;
  // Expert parallelism over size processes: ConfigError unless they split the experts evenly.
  void check_experts_split(int size) const;
  int64_t num_experts() const { return c_.experts; }

 private:
  MoeConfig c_;
  Linear gate_;
  std::vector<std::unique_ptr<MLP>> experts_;
  std::unique_ptr<MLP> shared_;
  std::unique_ptr<Linear> shared_gate_;
};

}  // namespace unillm::nn
