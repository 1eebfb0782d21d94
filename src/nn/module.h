// Module: a node of named parameters and child modules. Names are Hugging Face's
// ("model.layers.0.self_attn.q_proj.weight"); a parameter may be a view into fused storage
// (QKV, gate/up), so load/save is a walk over names, never a per-model conversion table.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace unillm::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  // Appends (prefix + name, tensor) for every parameter, depth first in registration order.
  void named_parameters(const std::string& prefix, NamedTensors& out) const;
  NamedTensors named_parameters() const;

 protected:
  // The tensor object must outlive the module (it is a member of the derived class).
  void register_parameter(const std::string& name, Tensor* t);
  void register_module(const std::string& name, Module* m);

 private:
  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<std::pair<std::string, Module*>> children_;
};

// A module that only groups others under a name scope (e.g. HF's "model.").
class Scope : public Module {
 public:
  using Module::register_module;
  using Module::register_parameter;
};

}  // namespace unillm::nn
