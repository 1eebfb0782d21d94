// SwiGLU MLP forward.
#include "nn/mlp.h"

#include "ops/swiglu.h"

namespace unillm::nn {

MLP::MLP(int64_t hidden, int64_t ffn, bool bias, DType weight_dtype)
    : gate_up_(hidden, {{"gate_proj", ffn}, {"up_proj", ffn}}, bias, weight_dtype),
      down_(ffn, hidden, bias, weight_dtype, "down_proj") {
  register_module("", &gate_up_);
  register_module("", &down_);
}

Tensor MLP::forward(const Tensor& x, const LoraRun* lora, ops::OutputUse use) const {
  return down_.forward(ops::swiglu(gate_up_.forward(x, lora)), lora, use);
}

}  // namespace unillm::nn
