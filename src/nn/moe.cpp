// SparseMoE forward (nn/moe.h).
#include "nn/moe.h"

#include <algorithm>
#include <string>
#include <tuple>

#include "ops/elementwise.h"
#include "ops/gather.h"
#include "nn/expert_parallel.h"
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
                          bool record, Collective* experts_group) const {
  const int64_t n = x.size(0), k = c_.top_k;
  Collective* ep = experts_group && experts_group->size() > 1 ? experts_group : nullptr;
  // Under expert parallelism every rank of the group takes part, whatever its row count.
  const std::vector<int64_t> counts = ep ? ep_counts(n, *ep) : std::vector<int64_t>{n};
  const int64_t most = *std::max_element(counts.begin(), counts.end());
  if (most == 0) return Tensor::zeros({0, c_.hidden}, x.dtype(), x.device());
  ops::MoeRouting route;
  if (n > 0) {
    route = ops::moe_route(gate_.forward(x, lora), k, c_.norm_topk_prob, balance, record);
  } else {
    route.weights = Tensor::zeros({0, k}, DType::f32, x.device());
  }
  // The rows the experts run on: this process's, or under expert parallelism every rank's of the
  // group (rank r's at [r · most, r · most + counts[r])), with their routing weights and choices.
  Tensor xs = x, ws = route.weights.to(x.dtype());
  std::vector<int32_t> chosen = route.experts;
  int64_t rows = n, e_lo = 0, e_hi = c_.experts;
  if (ep) {
    std::vector<Tensor> g = ep_gather({x, ws}, most, *ep);
    xs = g[0];
    ws = g[1];
    Tensor mine = Tensor::empty({n, k}, DType::i32);
    std::copy(route.experts.begin(), route.experts.end(), mine.data<int32_t>());
    const Tensor all = ep_gather_ints(mine, most, *ep);
    chosen.assign(all.data<int32_t>(), all.data<int32_t>() + all.numel());
    rows = most * ep->size();
    std::tie(e_lo, e_hi) = ep_experts(c_.experts, *ep);
  }
  // The (token, slot) pairs of this process's experts in expert order, tokens increasing within
  // an expert (padding rows skipped).
  auto real = [&](int64_t row) { return !ep || row % most < counts[static_cast<size_t>(row / most)]; };
  std::vector<int64_t> count(static_cast<size_t>(c_.experts), 0);
  for (int64_t s = 0; s < rows * k; ++s)
    if (real(s / k)) ++count[static_cast<size_t>(chosen[static_cast<size_t>(s)])];
  std::vector<int64_t> start(static_cast<size_t>(c_.experts) + 1, 0);
  for (int64_t e = 0; e < c_.experts; ++e) start[e + 1] = start[e] + (e >= e_lo && e < e_hi ? count[e] : 0);
  const auto pairs = static_cast<size_t>(start[c_.experts]);
  std::vector<int32_t> tokens(pairs), slots(pairs);
  std::vector<int64_t> at(start.begin(), start.end() - 1);
  for (int64_t s = 0; s < rows * k; ++s) {
    const auto e = static_cast<size_t>(chosen[static_cast<size_t>(s)]);
    if (!real(s / k) || static_cast<int64_t>(e) < e_lo || static_cast<int64_t>(e) >= e_hi) continue;
    tokens[static_cast<size_t>(at[e])] = static_cast<int32_t>(s / k);
    slots[static_cast<size_t>(at[e]++)] = static_cast<int32_t>(s);
  }
  Tensor out = Tensor::zeros({rows, c_.hidden}, x.dtype(), x.device());
  if (pairs > 0) {
    const Tensor token_idx = i32_tensor(tokens);
    std::vector<int64_t> used_sizes;
    std::vector<int64_t> used;
    for (int64_t e = e_lo; e < e_hi; ++e)
      if (count[e] > 0) used.push_back(e), used_sizes.push_back(count[e]);
    const std::vector<Tensor> parts = ops::split_rows(ops::gather_rows(xs, token_idx), used_sizes);
    std::vector<Tensor> ys;
    for (size_t u = 0; u < used.size(); ++u) {
      const int64_t e = used[u];
      if (lora && !lora->rows.empty()) {
        const LoraRun own = rows_for_expert(*lora, tokens.data() + start[e], count[e]);
        ys.push_back(experts_[e]->forward(parts[u], &own));
      } else {
        ys.push_back(experts_[e]->forward(parts[u], lora));
      }
    }
    const Tensor w = ops::reshape(ops::gather_rows(ops::reshape(ws, {rows * k, 1}), i32_tensor(slots)), {static_cast<int64_t>(pairs)});
    out = ops::moe_combine(ops::concat_rows(ys), w, token_idx, rows);
  }
  // Each rank's rows back, summed over the experts of the group.
  if (ep) out = ep_scatter(out, most, n, *ep, {xs, ws});
  if (shared_) {
    std::vector<int32_t> all(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    const Tensor g = ops::reshape(ops::sigmoid(shared_gate_->forward(x, lora)), {n});
    out = ops::add(out, ops::moe_combine(shared_->forward(x, lora), g.to(x.dtype()), i32_tensor(all), n));
  }
  return out;
}

void SparseMoE::check_experts_split(int size) const {
  if (size > 1 && c_.experts % size != 0)
    UNILLM_THROW(ConfigError, "[moe] ", c_.experts, " experts cannot be split evenly over ", size,
                 " processes of expert parallelism");
}

void SparseMoE::check_split(int size) const {
  if (size > 1)
    UNILLM_THROW(NotImplemented, "[moe] tensor parallelism over a mixture-of-experts layer is not implemented "
                 "(split its experts over processes with expert_parallel_degree instead); train it with data "
                 "parallelism, expert parallelism or ZeRO");
}

}  // namespace unillm::nn
