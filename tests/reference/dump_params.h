// Shared by the optimiser dump drivers (optim_dump, low_rank_dump, muon_adam_mini_dump,
// badam_dump, badam_ratio_dump): a module holding named trainable tensors read from the Python
// side's safetensors file, in the order they are added, for a ParamArena to pack.
#pragma once

#include <deque>
#include <string>

#include "nn/module.h"

namespace unillm::testing {

class DumpParams : public nn::Module {
 public:
  void add(const std::string& name, const Tensor& value) {
    tensors_.push_back(value.contiguous().clone());
    tensors_.back().set_requires_grad(true);
    register_parameter(name, &tensors_.back());
  }
  std::deque<Tensor> tensors_;  // stable addresses for register_parameter
};

}  // namespace unillm::testing
