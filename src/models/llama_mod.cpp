// Mixture-of-depths layers of the Llama family (models/mixture_of_depths.h): the router, each
// row's kept tokens through the layer as a sequence of their own, and the recombination.
#include <memory>
#include <vector>

#include "core/error.h"
#include "models/llama.h"
#include "models/mixture_of_depths.h"
#include "ops/elementwise.h"
#include "ops/gather.h"
#include "ops/linear.h"
#include "ops/matmul_compute.h"
#include "ops/moe.h"
#include "ops/shape.h"

namespace unillm::models {

void Llama::set_mod_calls(int64_t calls) {
  mod_calls_ = calls;
  mod_capacity_ = mod_capacity(calls);
}

DecoderLayer::Stream Llama::mod_layer(size_t i, const DecoderLayer::Stream& stream, const nn::AttentionInputs& in) const {
  const DecoderLayer& layer = *layers_[i];
  const Tensor x = stream.delta.defined() ? ops::add(stream.sum, stream.delta) : stream.sum;  // [N, C]
  const int64_t rows = in.rows, t = in.tokens, n = x.size(0);
  if (x.dtype() != DType::f32 || rows * t != n)
    UNILLM_THROW(NotImplemented, "[llama] a mixture-of-depths layer needs f32 hidden states of whole rows");
  if (in.segment_ids.defined() || in.shift || in.tp.active())
    UNILLM_THROW(NotImplemented, "[llama] a mixture-of-depths layer with packed segments (neat_packing), shift_attn "
                 "or tensor/sequence parallelism is not implemented");
  Tensor w;  // [N, 1], the router's f32 score per token (the package's f32 predictor)
  {
    ops::MatmulComputeScope f32(ops::MatmulCompute::f32);
    w = ops::linear(x, layer.router_weight(), layer.router_bias());
  }
  const Tensor scores = w.to(Device{}).contiguous();
  const Tensor positions = in.positions.to(Device{}).contiguous();
  const int64_t k = mod_tokens(mod_capacity_, t);
  std::vector<int32_t> picked, kept;  // rows of x: the routed ones (row by row), the passed-through
  std::vector<Tensor> pieces;  // each row's routed tokens after the layer
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<int32_t> sel = mod_select(scores.data<float>() + r * t, t, k);
    size_t next = 0;
    for (int64_t j = 0; j < t; ++j) {
      const auto at = static_cast<int32_t>(r * t + j);
      if (next < sel.size() && sel[next] == j) {
        ++next;
      } else {
        kept.push_back(at);
      }
    }
    if (sel.empty()) continue;  // (ties above k − 1 tokens: the package routes none of the row)
    std::vector<int32_t> idx, pos;
    for (int32_t j : sel) {
      idx.push_back(static_cast<int32_t>(r * t + j));
      pos.push_back(positions.data<int32_t>()[r * t + j]);
    }
    const auto m = static_cast<int64_t>(idx.size());
    nn::AttentionInputs sub = in;  // one row of m tokens at their own positions
    sub.rows = 1;
    sub.tokens = m;
    sub.positions = Tensor::from_ints(pos, {m}).to(in.positions.device());
    sub.inv_freq = rope_table(sub.positions);
    sub.tp = nn::TensorParallel{};
    if (in.lora && in.lora->dropout) {  // adapter dropout: row r's own masks (rows r·t.., not row 0's)
      auto lora = std::make_shared<nn::LoraRun>(*in.lora);
      lora->mask_row_begin += r * t;
      sub.lora = std::move(lora);
    }
    const DecoderLayer::Stream out = layer.forward({ops::gather_rows(x, Tensor::from_ints(idx, {m})), Tensor()}, sub);
    pieces.push_back(out.delta.defined() ? ops::add(out.sum, out.delta) : out.sum);
    picked.insert(picked.end(), idx.begin(), idx.end());
  }
  if (picked.empty()) return {x, Tensor()};
  // out[picked[i]] = w · layer(x)[i], out[kept[j]] = 1 · x[kept[j]]: one combine, each output row
  // from one source (exact), differentiable in the layer's output, the router's weight and x.
  const auto np = static_cast<int64_t>(picked.size()), nk = static_cast<int64_t>(kept.size());
  std::vector<Tensor> weights = {ops::gather_rows(w, Tensor::from_ints(picked, {np}))};
  std::vector<int32_t> dest = picked;
  if (nk > 0) {
    pieces.push_back(ops::gather_rows(x, Tensor::from_ints(kept, {nk})));
    weights.push_back(Tensor::from_vector(std::vector<float>(static_cast<size_t>(nk), 1.0f), {nk, 1}).to(x.device()));
    dest.insert(dest.end(), kept.begin(), kept.end());
  }
  const Tensor y = ops::concat_rows(pieces);
  const Tensor wy = ops::reshape(ops::concat_rows(weights), {n});
  return {ops::moe_combine(y, wy, Tensor::from_ints(dest, {n}), n), Tensor()};
}

}  // namespace unillm::models
