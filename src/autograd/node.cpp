// Recording helpers.
#include "autograd/node.h"

#include "autograd/grad_mode.h"

namespace unillm::autograd {

SavedTensor SavedTensor::activation(const Tensor& t) {
  auto hooks = saved_tensor_hooks();
  if (!t.defined() || !hooks) return SavedTensor(t);
  SavedTensor s(hooks->pack(t.detach()));
  s.hooks_ = std::move(hooks);
  return s;
}

const Tensor& SavedTensor::get() const {
  if (!tensor_.defined() && saved_)
    UNILLM_THROW(Error, "[autograd] saved tensor used after it was released: backward ran "
                        "through this graph already (pass retain_graph to run it twice)");
  UNILLM_CHECK(tensor_.defined(), "[autograd] get() of an empty SavedTensor");
  // A storage whose memory comes and goes (ZeRO-3's gathered parameters, Storage::refill) must
  // hold it again when backward reads it.
  UNILLM_CHECK(tensor_.storage()->holds_memory(), "[autograd] a saved tensor's memory was released and not refilled");
  if (!hooks_) return tensor_;
  if (!unpacked_.defined()) unpacked_ = hooks_->unpack(tensor_);
  return unpacked_;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (auto& t : inputs)
    if (t.defined() && (t.requires_grad() || t.grad_fn())) return true;
  return false;
}

void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
            std::vector<Tensor*> outputs) {
  if (!needs_grad(inputs)) return;
  node->next_edges.clear();
  for (auto t : inputs) {
    Edge e;
    if (t.defined() && t.grad_fn()) {
      e.node = t.grad_fn();
      e.output_index = t.autograd_meta().output_index;
    } else if (t.defined() && t.requires_grad()) {
      // Leaf: share its meta so .grad lands on the caller's tensor handle.
      e.leaf = t.autograd_meta_ptr();
    }
    node->next_edges.push_back(e);
  }
  node->num_outputs = static_cast<int>(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto& m = outputs[i]->autograd_meta();
    m.grad_fn = node;
    m.output_index = static_cast<int>(i);
    m.requires_grad = true;
  }
}

}  // namespace unillm::autograd
