// SwiGLU MLP forward.
#include "nn/mlp.h"

#include "ops/swiglu.h"

namespace unillm::nn {

MLP::MLP(int64_t hidden, int64_t ffn, bool bias, ParamPlacement weights)
    : gate_up_(hidden, {{"gate_proj", ffn}, {"up_proj", ffn}}, bias, weights),
      down_(ffn, hidden, bias, weights, "down_proj") {
  register_module("", &gate_up_);
  register_module("", &down_);
  gate_up_.set_split(TpSplit::kColumn);
  down_.set_split(TpSplit::kRow);
}

Tensor MLP::forward(const Tensor& x, const LoraRun* lora, ops::OutputUse use, const TensorParallel* tp) const {
  if (tp && !tp->active()) tp = nullptr;
  return down_.forward(ops::swiglu(gate_up_.forward(x, lora, ops::OutputUse::kValue, tp)), lora, use, tp);
}

void MLP::check_split(int size) const {
  gate_up_.check_split(size);
  down_.check_split(size);
}

void MLP::split_tensors(std::vector<const Tensor*>& out) const {
  gate_up_.split_tensors(out);
  down_.split_tensors(out);
}

}  // namespace unillm::nn
