// SwiGLU MLP: down(silu(gate(x)) * up(x)) with gate and up fused into one [2F, C] weight.
#pragma once

#include "nn/linear.h"

namespace unillm::nn {

class MLP : public Module {
 public:
  MLP(int64_t hidden, int64_t ffn, bool bias, ParamPlacement weights);
  // [N, C] -> [N, C], with the adapters of lora (nullptr: none). use = kGradOnly: the result's
  // value is not needed (recompute re-run), so down_proj only records its backward node.
  // tp: tensor parallelism (gate/up column-parallel, down row-parallel; nn/tensor_parallel.h).
  Tensor forward(const Tensor& x, const LoraRun* lora = nullptr,
                 ops::OutputUse use = ops::OutputUse::kValue, const TensorParallel* tp = nullptr) const;
  void check_split(int size) const;
  void split_tensors(std::vector<const Tensor*>& out) const;
  // The linears tensor parallelism splits (gate/up column-, down_proj row-parallel).
  void split_linears(std::vector<FusedLinear*>& out) { out.insert(out.end(), {&gate_up_, &down_}); }

 private:
  FusedLinear gate_up_;
  Linear down_;
};

}  // namespace unillm::nn
