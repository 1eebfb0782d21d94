// Module: a node of parameters and child modules. Each parameter is a real tensor owned by the
// module (the storage kernels use: fused QKV, fused gate/up); its Hugging Face names
// ("model.layers.0.self_attn.q_proj.weight") are row-range views of it. Load/save walk the HF
// names; optimizers, gradient arenas and sharding walk the real tensors.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace unillm::nn {

// Where a module's parameters are made: the dtype of its matrices (norms and biases are f32) and
// the device. Converts from a DType for the CPU. lazy: the matrices hold no memory until their
// storage is refilled or they are re-pointed (a frozen model loaded straight into ZeRO-3's
// shards, train/param_shards.h); reading one before that is an error.
struct ParamPlacement {
  ParamPlacement(DType d = DType::f32, Device dev = {}, bool lazy_ = false)  // NOLINT
      : dtype(d), device(dev), lazy(lazy_) {}
  DType dtype;
  Device device;
  bool lazy = false;
};

// A matrix parameter of `shape` as `where` places it: zeros, or lazy (no memory yet).
Tensor placed_matrix(const Shape& shape, const ParamPlacement& where);


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
  std::string adapter;  // "" = a base weight; else the adapter (LoRA) it belongs to
};

// A real parameter as seen from the root: its tensor and the full HF names of its parts.
struct ParamRef {
  Tensor* tensor = nullptr;
  std::vector<std::string> hf_names;  // full names (prefix included)
  std::string adapter;  // "" = a base weight; else its adapter's name
};

class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  // (HF name, view) for every named part of the BASE weights, depth first in registration
  // order (adapter weights are left out: loading and saving the base model walk this).
  void named_parameters(const std::string& prefix, NamedTensors& out) const;
  NamedTensors named_parameters() const;
  // The same walk over the base parameters' gradients (undefined grads are skipped).
  NamedTensors named_grads() const;
  // The named parts of one adapter's weights (e.g. "model.layers.0.self_attn.q_proj.lora_A.
  // default.weight"), or their gradients; same order rules.
  NamedTensors named_adapter_parameters(const std::string& adapter, bool grads = false) const;
  // Every real parameter once, base and adapters, with its HF names (for arenas, optimizers,
  // freezing; ParamRef::adapter tells them apart).
  void parameters(const std::string& prefix, std::vector<ParamRef>& out);
  std::vector<ParamRef> parameters();
  // Calls fn(prefix, module) for this module and every descendant, depth first; prefix is the
  // HF name prefix of the module's parameters ("model.layers.0.self_attn.").
  void for_each_module(const std::string& prefix,
                       const std::function<void(const std::string&, Module&)>& fn);

 protected:
  // The tensor object must outlive the module (a member of the derived class).
  void register_parameter(const std::string& name, Tensor* t);
  // A fused parameter whose HF names are row ranges of t.
  void register_fused_parameter(const std::string& local_name, Tensor* t, std::vector<NamedPart> parts);
  void register_module(const std::string& name, Module* m);
  // Drops the slot of t (a weight replaced by a quantised form).
  void unregister_parameter(const Tensor* t);
  // An adapter's parameter (listed by parameters() and named_adapter_parameters(), never by
  // named_parameters()); unregister_adapter drops every slot of that adapter.
  void register_adapter_parameter(const std::string& adapter, const std::string& local_name,
                                  Tensor* t, std::vector<NamedPart> parts);
  void unregister_adapter(const std::string& adapter);

 private:
  void walk_named(const std::string& prefix, NamedTensors& out, bool grads,
                  const std::string& adapter) const;
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
