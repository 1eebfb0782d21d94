// Module: a node of parameters and child modules. Each parameter is a real tensor owned by the
// module (the storage kernels use: fused QKV, fused gate/up); its Hugging Face names
// ("model.layers.0.self_attn.q_proj.weight") are row-range views of it. Load/save walk the HF
// names; optimizers, gradient arenas and sharding walk the real tensors.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace unillm::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// One HF-named view of a real parameter: rows [row_begin, row_end) of dim 0.
struct NamedPart {
  std::string name;
  int64_t row_begin = 0, row_end = 0;
};

// A real parameter and the HF names that view it.
struct ParamSlot {
  std::string local_name;  // for messages, e.g. "qkv.weight"
  Tensor* tensor = nullptr;
  std::vector<NamedPart> parts;  // empty: the tensor itself carries local_name as its HF name
};

// A real parameter as seen from the root: its tensor and the full HF names of its parts.
struct ParamRef {
  Tensor* tensor = nullptr;
  std::vector<std::string> hf_names;  // full names (prefix included)
};

class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  // (HF name, view) for every named part, depth first in registration order.
  void named_parameters(const std::string& prefix, NamedTensors& out) const;
  NamedTensors named_parameters() const;
  // The same walk over the parameters' gradients (undefined grads are skipped).
  NamedTensors named_grads() const;
  // Every real parameter once, with its HF names (for arenas, optimizers, freezing).
  void parameters(const std::string& prefix, std::vector<ParamRef>& out);
  std::vector<ParamRef> parameters();

 protected:
  // The tensor object must outlive the module (a member of the derived class).
  void register_parameter(const std::string& name, Tensor* t);
  // A fused parameter whose HF names are row ranges of t.
  void register_fused_parameter(const std::string& local_name, Tensor* t, std::vector<NamedPart> parts);
  void register_module(const std::string& name, Module* m);

 private:
  void walk_named(const std::string& prefix, NamedTensors& out, bool grads) const;
  std::vector<ParamSlot> params_;
  std::vector<std::pair<std::string, Module*>> children_;
};

// A module that only groups others under a name scope (e.g. HF's "model.").
class Scope : public Module {
 public:
  using Module::register_module;
  using Module::register_parameter;
};

}  // namespace unillm::nn
