// FusedLinear under tensor parallelism (nn/tensor_parallel.h). Column-parallel: rank r computes
// rows [r·out_p/n, (r+1)·out_p/n) of every part p (so a fused QKV gives its q, k and v heads),
// LoRA's B split the same way and A whole. Row-parallel: rank r multiplies input columns
// [r·in/n, (r+1)·in/n) (A split the same way, B whole), the group sums the partial outputs, and
// the bias is added by rank 0 alone (once in the sum). A weight held as its block (hold_block) is
// that block already.
#include "nn/linear.h"

#include "ops/lora_linear.h"
#include "ops/take.h"

namespace unillm::nn {

void FusedLinear::check_split(int size) const {
  if (split_ == TpSplit::kNone || size == 1) return;
  const std::string name = parts_.empty() ? std::string("?") : parts_[0].name;
  if (qweight_.defined())
    UNILLM_THROW(ConfigError, "[nn] tensor parallelism over a quantised weight (", name,
                 ", QLoRA) is not implemented");
  for (const auto& [adapter, w] : lora_)
    if (w->magnitude.defined() || w->oft_r.defined())
      UNILLM_THROW(ConfigError, "[nn] tensor parallelism with ", w->oft_r.defined() ? "OFT" : "DoRA (use_dora)",
                   " adapter '", adapter, "' on ", name, " is not implemented");
  if (split_ == TpSplit::kColumn) {
    for (const auto& p : parts_)
      if (p.out_features % size != 0)
        UNILLM_THROW(ConfigError, "[nn] ", p.name, " has ", p.out_features,
                     " output rows, which tensor_parallel_degree ", size, " does not divide");
  } else if (in_ % size != 0) {
    UNILLM_THROW(ConfigError, "[nn] ", name, " has ", in_, " input columns, which tensor_parallel_degree ", size,
                 " does not divide");
  }
}

void FusedLinear::split_tensors(std::vector<const Tensor*>& out) const {
  if (split_ == TpSplit::kNone) return;
  if (weight_.defined()) out.push_back(&weight_);
  if (bias_.defined()) out.push_back(&bias_);
  for (const auto& [name, w] : lora_) {
    out.push_back(&w->a);
    out.push_back(&w->b);
  }
}

Tensor FusedLinear::forward_split(const Tensor& x, const LoraRun* lora, ops::OutputUse use, const TensorParallel& tp) const {
  const int n = tp.group->size(), r = tp.group->rank();
  if (block_group_ && (n != block_group_->size() || r != block_group_->rank()))
    UNILLM_THROW(ShapeError, "[nn] ", parts_[0].name, ": its block was cut for rank ", block_group_->rank(), " of ",
                 block_group_->size(), ", the call splits it for rank ", r, " of ", n);
  std::vector<ops::LoraAdapterInput> adapters;
  auto adapter = [&](size_t i) -> const LoraWeights* {
    if (!lora) return nullptr;
    auto it = lora_.find(lora->active[i]);
    return it == lora_.end() ? nullptr : it->second.get();
  };
  if (split_ == TpSplit::kColumn) {
    std::vector<std::pair<int64_t, int64_t>> rows;  // this rank's rows of W
    for (size_t p = 0; p < parts_.size(); ++p) {
      const auto [lo, hi] = tp_share(parts_[p].out_features, n, r);
      rows.emplace_back(part_begin(p) + lo, part_begin(p) + hi);
    }
    for (size_t i = 0; lora && i < lora->active.size(); ++i) {
      const LoraWeights* w = adapter(i);
      if (!w) continue;
      ops::LoraAdapterInput in{w->a, Tensor(), {}, w->scaling, lora->dropout ? w->dropout : 0.0,
                               mix_seed(lora->seed, w->stream)};
      in.mask_row_begin = lora->mask_row_begin;
      std::vector<std::pair<int64_t, int64_t>> b_rows;  // this rank's rows of B, part by part
      int64_t b_row = 0, local_b = 0;
      for (size_t p : w->parts) {
        const auto [lo, hi] = tp_share(parts_[p].out_features, n, r);
        b_rows.emplace_back(b_row + lo, b_row + hi);
        // The part's columns of the local output: its local rows follow the earlier parts'.
        int64_t col = 0;
        for (size_t q = 0; q < p; ++q) col += parts_[q].out_features / n;
        in.parts.push_back({col, hi - lo, local_b});
        local_b += hi - lo;
        b_row += parts_[p].out_features;
      }
      in.b = ops::take_rows(w->b, b_rows);
      adapters.push_back(std::move(in));
    }
    const Tensor xr = tp_enter(x, tp);
    const Tensor wr = block_.defined() ? block_ : ops::take_rows(weight_, rows);
    const Tensor br = bias_.defined() ? ops::take_rows(bias_, rows) : Tensor();
    return adapters.empty() ? ops::linear(xr, wr, br, use) : ops::lora_linear(xr, wr, br, adapters, use);
  }
  const auto [c0, c1] = tp_share(in_, n, r);
  for (size_t i = 0; lora && i < lora->active.size(); ++i) {
    const LoraWeights* w = adapter(i);
    if (!w) continue;
    ops::LoraAdapterInput in{ops::take_cols(w->a, c0, c1), w->b, {}, w->scaling,
                             lora->dropout ? w->dropout : 0.0, mix_seed(lora->seed, w->stream)};
    // The dropout masks are the whole input's (one process's), cut to this rank's columns.
    in.mask_col_begin = c0;
    in.mask_cols = in_;
    in.mask_row_begin = lora->mask_row_begin;
    int64_t b_row = 0;
    for (size_t p : w->parts) {
      in.parts.push_back({part_begin(p), parts_[p].out_features, b_row});
      b_row += parts_[p].out_features;
    }
    adapters.push_back(std::move(in));
  }
  const Tensor wc = block_.defined() ? block_ : ops::take_cols(weight_, c0, c1);
  // Row-parallel input comes from this rank's column-parallel layers (the gathered tokens under
  // sequence parallelism).
  const Tensor bias = r == 0 ? bias_ : Tensor();
  const Tensor partial = adapters.empty() ? ops::linear(x, wc, bias, use) : ops::lora_linear(x, wc, bias, adapters, use);
  return tp_exit(partial, tp, use);
}

}  // namespace unillm::nn
