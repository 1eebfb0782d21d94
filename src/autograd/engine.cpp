// Reverse-topological backward over the recorded graph.
#include "autograd/engine.h"

#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "core/device_ops.h"
#include "core/parallel.h"

namespace unillm::autograd {

void accumulate(Tensor& dst, const Tensor& src) {
  UNILLM_CHECK(dst.shape() == src.shape(), "[autograd] gradient shape ", shape_str(src.shape()),
               " for ", shape_str(dst.shape()));
  UNILLM_CHECK(dst.is_contiguous(), "[autograd] accumulate needs a contiguous dst");
  Tensor s = src.dtype() == dst.dtype() ? src.contiguous() : src.to(dst.dtype()).contiguous();
  if (!(s.device() == dst.device())) s = s.to(dst.device());
  int64_t n = dst.numel();
  if (!dst.device().is_cpu()) {  // the device's "accumulate" kernel (core/device_ops.h)
    UNILLM_CHECK(dst.dtype() == DType::f32 || dst.dtype() == DType::f64,
                 "[autograd] accumulate: unsupported dtype ", dtype_name(dst.dtype()));
    unillm_accumulate_args a{sizeof(unillm_accumulate_args), s.raw_data(), dst.raw_data(), n,
                             dtype_code(dst.dtype())};
    return device_accumulate(a, dst.device());
  }
  if (dst.dtype() == DType::f32) {
    float* d = dst.data<float>();
    const float* p = s.data<float>();
    parallel_for(n, 1 << 16, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) d[i] += p[i];
    });
  } else if (dst.dtype() == DType::f64) {
    double* d = dst.data<double>();
    const double* p = s.data<double>();
    parallel_for(n, 1 << 16, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) d[i] += p[i];
    });
  } else {
    UNILLM_THROW(DTypeError, "[autograd] accumulate: unsupported dtype ", dtype_name(dst.dtype()));
  }
}

namespace {
void add_into(Tensor& slot, const Tensor& g) {
  if (!g.defined()) return;
  if (!slot.defined()) {
    slot = g;
    return;
  }
  Tensor sum = slot.clone();  // never write into a tensor a node may still hold
  accumulate(sum, g);
  slot = sum;
}

std::vector<Node*> topo_order(Node* root) {
  std::vector<Node*> order;
  std::unordered_set<Node*> seen;
  std::vector<std::pair<Node*, size_t>> stack{{root, 0}};
  seen.insert(root);
  while (!stack.empty()) {
    auto& [n, i] = stack.back();
    if (i < n->next_edges.size()) {
      Node* child = n->next_edges[i++].node.get();
      if (child && seen.insert(child).second) stack.push_back({child, 0});
    } else {
      order.push_back(n);
      stack.pop_back();
    }
  }
  return {order.rbegin(), order.rend()};  // root first
}
}  // namespace

void backward(const Tensor& root, const Tensor& grad_output, const BackwardOptions& options) {
  UNILLM_CHECK(root.grad_fn() || root.requires_grad(), "[autograd] backward on a tensor that does not require grad");
  Tensor g0 = grad_output;
  if (!g0.defined()) {
    UNILLM_CHECK(root.numel() == 1, "[autograd] backward without a gradient needs a scalar root");
    g0 = Tensor::empty(root.shape(), root.dtype());
    g0.fill(1.0);
  }
  NoGradGuard no_grad;
  Tensor root_copy = root;
  if (!root.grad_fn()) {  // a leaf root
    Tensor g = root_copy.grad();
    add_into(g, g0);
    root_copy.set_grad(g);
    return;
  }
  std::unordered_map<Node*, std::vector<Tensor>> pending;
  Node* r = root.grad_fn().get();
  pending[r].resize(r->num_outputs);
  pending[r][root_copy.autograd_meta().output_index] = g0;
  for (Node* n : topo_order(r)) {
    std::vector<Tensor> grads = std::move(pending[n]);
    pending.erase(n);
    grads.resize(n->num_outputs);
    bool any = false;
    for (auto& g : grads) any = any || g.defined();
    if (!any) {  // no gradient reached this node (e.g. only through inputs that need none)
      if (!options.retain_graph) n->release_saved();
      continue;
    }
    std::vector<Tensor> in_grads = n->backward(grads);
    grads.clear();
    if (!options.retain_graph) n->release_saved();
    UNILLM_CHECK(in_grads.size() == n->next_edges.size(), "[autograd] ", n->name(), " returned ",
                 in_grads.size(), " gradients for ", n->next_edges.size(), " inputs");
    for (size_t i = 0; i < in_grads.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!in_grads[i].defined()) continue;
      if (e.node) {
        auto& slot = pending[e.node.get()];
        slot.resize(e.node->num_outputs);
        add_into(slot[e.output_index], in_grads[i]);
      } else if (e.leaf) {
        if (e.leaf->grad && e.leaf->grad->defined()) {
          accumulate(*e.leaf->grad, in_grads[i]);
        } else {
          e.leaf->grad = std::make_shared<Tensor>(in_grads[i].clone());
        }
      }
    }
  }
}

}  // namespace unillm::autograd
