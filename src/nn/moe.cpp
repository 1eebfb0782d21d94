// SparseMoE forward (nn/moe.h).
#include "nn/moe.h"

#include <algorithm>
#include <string>

#include "ops/elementwise.h"
#include "ops/gather.h"
#include "ops/moe.h"
#include "ops/shape.h"

namespace unillm::nn {

SparseMoE::SparseMoE(const MoeConfig& c, ParamPlacement weights)
    : c_(c), gate_(c.hidden, c.experts, false, weights, "gate") {
  if (c.experts < 1 || c.top_k < 1 || c.top_k > c.experts || c.ffn < 1)
    UNILLM_THROW(ConfigError, "[moe] ", c.top_k, " of ", c.experts, " experts of width ", c.ffn,
                 ": need 1 <= num_experts_per_tok <= num_experts and moe_intermediate_size > 0");
  register_module("", &gate_);
  for (int64_t e = 0; e < c.experts; ++e) {
    experts_.push_back(std::make_unique<MLP>(c.hidden, c.ffn, false, weights));
    register_module("experts." + std::to_string(e), experts_.back().get());
  }
  if (c.shared_ffn > 0) {
    shared_ = std::make_unique<MLP>(c.hidden, c.shared_ffn, false, weights);
    shared_gate_ = std::make_unique<Linear>(c.hidden, 1, false, weights, "shared_expert_gate");
    register_module("shared_expert", shared_.get());
    register_module("", shared_gate_.get());
  }
}

namespace {

Tensor i32_tensor(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i32, Device{});
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

// The adapters' per-row ranges (a serving step mixing adapters) as ranges of an expert's rows:
// its tokens are increasing, so token range [a, b) is the rows [lower_bound(a), lower_bound(b)).
LoraRun rows_for_expert(const LoraRun& lora, const int32_t* tokens, int64_t count) {
  LoraRun out = lora;
  for (auto& [a, b] : out.rows) {
    a = std::lower_bound(tokens, tokens + count, static_cast<int32_t>(a)) - tokens;
    b = std::lower_bound(tokens, tokens + count, static_cast<int32_t>(b)) - tokens;
  }
  return out;
}

}  // namespace

Tensor SparseMoE::forward(const Tensor& x, const LoraRun* lora, const std::shared_ptr<ops::MoeBalance>& balance,
                          bool record) const {
  const int64_t n = x.size(0), k = c_.top_k;
  if (n == 0) return Tensor::zeros({0, c_.hidden}, x.dtype(), x.device());
  const ops::MoeRouting route = ops::moe_route(gate_.forward(x, lora), k, c_.norm_topk_prob, balance, record);
  // The N·k (token, slot) pairs in expert order, tokens increasing within an expert.
  std::vector<int64_t> counts(static_cast<size_t>(c_.experts), 0);
  for (int32_t e : route.experts) ++counts[static_cast<size_t>(e)];
  std::vector<int64_t> start(static_cast<size_t>(c_.experts) + 1, 0);
  for (int64_t e = 0; e < c_.experts; ++e) start[e + 1] = start[e] + counts[e];
  std::vector<int32_t> tokens(static_cast<size_t>(n * k)), slots(static_cast<size_t>(n * k));
  std::vector<int64_t> at(start.begin(), start.end() - 1);
  for (int64_t s = 0; s < n * k; ++s) {
    const auto e = static_cast<size_t>(route.experts[static_cast<size_t>(s)]);
    tokens[static_cast<size_t>(at[e])] = static_cast<int32_t>(s / k);
    slots[static_cast<size_t>(at[e]++)] = static_cast<int32_t>(s);
  }
  const Tensor token_idx = i32_tensor(tokens);
  std::vector<int64_t> used_sizes;
  std::vector<int64_t> used;
  for (int64_t e = 0; e < c_.experts; ++e)
    if (counts[e] > 0) used.push_back(e), used_sizes.push_back(counts[e]);
  const std::vector<Tensor> xs = ops::split_rows(ops::gather_rows(x, token_idx), used_sizes);
  std::vector<Tensor> ys;
  for (size_t u = 0; u < used.size(); ++u) {
    const int64_t e = used[u];
    if (lora && !lora->rows.empty()) {
      const LoraRun mine = rows_for_expert(*lora, tokens.data() + start[e], counts[e]);
      ys.push_back(experts_[e]->forward(xs[u], &mine));
    } else {
      ys.push_back(experts_[e]->forward(xs[u], lora));
    }
  }
  const Tensor w = ops::reshape(ops::gather_rows(ops::reshape(route.weights, {n * k, 1}), i32_tensor(slots)), {n * k});
  Tensor out = ops::moe_combine(ops::concat_rows(ys), w.to(x.dtype()), token_idx, n);
  if (shared_) {
    std::vector<int32_t> all(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    const Tensor g = ops::reshape(ops::sigmoid(shared_gate_->forward(x, lora)), {n});
    out = ops::add(out, ops::moe_combine(shared_->forward(x, lora), g.to(x.dtype()), i32_tensor(all), n));
  }
  return out;
}

void SparseMoE::check_split(int size) const {
  if (size > 1)
    UNILLM_THROW(NotImplemented, "[moe] tensor parallelism over a mixture-of-experts layer is not implemented "
                 "(its experts would need expert parallelism); train it with data parallelism or ZeRO");
}

}  // namespace unillm::nn
