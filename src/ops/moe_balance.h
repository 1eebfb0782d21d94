// The router load-balancing loss of a mixture-of-experts training forward: transformers'
// load_balancing_loss_func (Switch Transformer eq. 4–6), which Qwen2-MoE / Qwen3-MoE add to the
// token loss as router_aux_loss_coef · aux when output_router_logits is set (LLaMA-Factory's
// moe_aux_loss_coef). Over every sparse layer's routing of the forward's real tokens (the
// layers' rows concatenated, padding left out as HF's attention_mask does):
//   aux = E · Σ_e f_e · P_e,  f_e = (token-slots routed to e) / (L · N),  P_e = Σ p_e / (L · N)
// with L the sparse layers, N the real tokens, p the full softmax over the router's logits.
// f is not differentiable, so d aux / d p[l, n, e] = E · f_e / (L · N), the same for every layer
// and token — but f depends on every layer, so the gradient is known only once the forward has
// ended. One MoeBalance collects a forward's routing (moe_route records each sparse layer) and is
// read by the routers' backward nodes, which add seed · d aux / d logits to their gradients.
// Docs: docs/ARCHITECTURE.md, "Mixture of experts".
#pragma once

#include <cstdint>
#include <vector>

namespace unillm::ops {

class MoeBalance {
 public:
  // valid: one flag per row of the forward (B·T), 0 for padding. seed: what backward scales
  // d aux / d logits by (the trainer's coefficient × the micro-batch's share of the step); 0 when
  // only the value is wanted (evaluation).
  MoeBalance(int64_t experts, std::vector<uint8_t> valid, double seed);
  // One sparse layer's routing: probs [rows, E] (the softmax), chosen [rows · k]. rows must be
  // the forward's row count.
  void record(const std::vector<double>& probs, const std::vector<int32_t>& chosen, int64_t k);
  double loss() const;  // aux (0 before any layer or without real tokens)
  int64_t layers() const { return layers_; }
  double seed() const { return seed_; }
  // Adds seed · d aux / d logits of one layer's rows to dlogits [rows, E]; probs as recorded.
  void add_grad(const std::vector<double>& probs, std::vector<double>& dlogits) const;

  // Pipeline parallelism (train/pipeline.h), where a micro-batch's sparse layers run on several
  // processes, each with a balance of its own: the sums recorded so far ([routed E, Σp E, layers],
  // additive over layers) travel forward with the activations — a stage starts from its
  // predecessor's (set_totals) and records its own layers on top — so the last stage holds the
  // whole forward's, which travel back with the gradients and replace each stage's before its
  // backward, so every router's gradient reads the f of all layers.
  std::vector<double> totals() const;
  void set_totals(const std::vector<double>& t);  // ShapeError unless 2E + 1 values

 private:
  int64_t experts_;
  std::vector<uint8_t> valid_;
  int64_t real_ = 0;  // N
  int64_t layers_ = 0;  // L
  std::vector<double> routed_, prob_sum_;  // [E]: token-slots routed to e, Σ p_e over real rows
  double seed_;
};

}  // namespace unillm::ops
