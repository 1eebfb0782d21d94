// Parameter name walk.
#include "nn/module.h"

namespace unillm::nn {

void Module::named_parameters(const std::string& prefix, NamedTensors& out) const {
  for (auto& [name, t] : params_)
    if (t->defined()) out.emplace_back(prefix + name, *t);
  for (auto& [name, m] : children_)
    m->named_parameters(name.empty() ? prefix : prefix + name + ".", out);  // "" = flattened
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  named_parameters("", out);
  return out;
}

void Module::register_parameter(const std::string& name, Tensor* t) { params_.emplace_back(name, t); }

void Module::register_module(const std::string& name, Module* m) { children_.emplace_back(name, m); }

}  // namespace unillm::nn
