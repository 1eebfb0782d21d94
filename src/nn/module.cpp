// Parameter walks over HF names and over real tensors.
#include "nn/module.h"

namespace unillm::nn {

Tensor placed_matrix(const Shape& shape, const ParamPlacement& where) {
  if (!where.lazy) return Tensor::zeros(shape, where.dtype, where.device);
  const auto bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(where.dtype);
  return Tensor(std::make_shared<Storage>(nullptr, bytes, where.device, nullptr), shape, where.dtype);
}

namespace {
std::string child_prefix(const std::string& prefix, const std::string& name) {
  return name.empty() ? prefix : prefix + name + ".";  // "" = flattened into the parent
}

}  // namespace

void Module::walk_named(const std::string& prefix, NamedTensors& out, bool grads,
                        const std::string& adapter) const {
  for (auto& slot : params_) {
    if (slot.adapter != adapter) continue;
    Tensor t = grads ? slot.tensor->grad() : *slot.tensor;
    if (!t.defined()) continue;
    if (slot.parts.empty()) {
      out.emplace_back(prefix + slot.local_name, t);
      continue;
    }
    for (auto& p : slot.parts) out.emplace_back(prefix + p.name, t.slice(0, p.row_begin, p.row_end));
  }
  for (auto& [name, m] : children_) m->walk_named(child_prefix(prefix, name), out, grads, adapter);
}

void Module::named_parameters(const std::string& prefix, NamedTensors& out) const {
  walk_named(prefix, out, false, "");
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  walk_named("", out, false, "");
  return out;
}

NamedTensors Module::named_grads() const {
  NamedTensors out;
  walk_named("", out, true, "");
  return out;
}

NamedTensors Module::named_adapter_parameters(const std::string& adapter, bool grads) const {
  UNILLM_CHECK(!adapter.empty(), "[nn] named_adapter_parameters needs an adapter name");
  NamedTensors out;
  walk_named("", out, grads, adapter);
  return out;
}

void Module::parameters(const std::string& prefix, std::vector<ParamRef>& out) {
  for (auto& slot : params_) {
    if (!slot.tensor->defined()) continue;
    ParamRef r{slot.tensor, {}, slot.adapter};
    if (slot.parts.empty()) r.hf_names.push_back(prefix + slot.local_name);
    for (auto& p : slot.parts) r.hf_names.push_back(prefix + p.name);
    out.push_back(r);
  }
  for (auto& [name, m] : children_) m->parameters(child_prefix(prefix, name), out);
}

std::vector<ParamRef> Module::parameters() {
  std::vector<ParamRef> out;
  parameters("", out);
  return out;
}

void Module::for_each_module(const std::string& prefix,
                             const std::function<void(const std::string&, Module&)>& fn) {
  fn(prefix, *this);
  for (auto& [name, m] : children_) m->for_each_module(child_prefix(prefix, name), fn);
}

void Module::register_parameter(const std::string& name, Tensor* t) { params_.push_back({name, t, {}, ""}); }

void Module::register_fused_parameter(const std::string& local_name, Tensor* t, std::vector<NamedPart> parts) {
  params_.push_back({local_name, t, std::move(parts), ""});
}

void Module::register_adapter_parameter(const std::string& adapter, const std::string& local_name,
                                        Tensor* t, std::vector<NamedPart> parts) {
  UNILLM_CHECK(!adapter.empty(), "[nn] adapter parameter without an adapter name");
  params_.push_back({local_name, t, std::move(parts), adapter});
}

void Module::unregister_adapter(const std::string& adapter) {
  std::erase_if(params_, [&](const ParamSlot& s) { return s.adapter == adapter; });
}

void Module::unregister_parameter(const Tensor* t) {
  std::erase_if(params_, [&](const ParamSlot& s) { return s.tensor == t; });
}

void Module::register_module(const std::string& name, Module* m) { children_.emplace_back(name, m); }

}  // namespace unillm::nn
