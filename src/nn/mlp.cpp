// SwiGLU MLP forward.
#include "nn/mlp.h"

#include "ops/swiglu.h"

namespace unillm::nn {

MLP::MLP(int64_t hidden, int64_t ffn, bool bias, ParamPlacement weights)
    : gate_up_(hidden, {{"gate_proj", ffn}, {"up_proj", ffn}}, bias, weights),
      down_(ffn, hidden, bias, weights, "down_proj") {
  register_module("", &gate_up_);
  register_module("", &down_);
}

Tensor MLP::forward(const Tensor& x, const LoraRun* lora, ops::OutputUse use) const {
  return down_.forward(ops::swiglu(gate_up_.forward(x, lora)), lora, use);
}

}  // namespace unillm::nn
