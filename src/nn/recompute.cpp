// The recompute node: saves the input, replays the forward in backward (graph only: kGradOnly).
#include "nn/recompute.h"

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace unillm::nn {

namespace {

// A handle on the same data without autograd history (a fresh leaf).
Tensor detached(const Tensor& t) { return t.contiguous().view(t.shape()); }

class RecomputeNode : public autograd::Node {
 public:
  RecomputeNode(SegmentFn fn, const Tensor& x)
      : fn_(std::move(fn)), x_(autograd::SavedTensor::activation(detached(x))), hooks_(autograd::saved_tensor_hooks()) {}
  std::string name() const override { return "recompute"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (!g[0].defined()) return {Tensor()};
    autograd::GradModeGuard grad_on(true);
    autograd::SavedTensorHooksGuard same_saves(hooks_);  // the re-run saves as the forward would have
    Tensor xin = detached(x_.get());
    xin.set_requires_grad(true);
    Tensor out = fn_(xin, ops::OutputUse::kGradOnly);  // value unused: only its graph
    autograd::backward(out, g[0]);
    return {xin.grad()};
  }
  void release_saved() override { x_.release(); }

 private:
  SegmentFn fn_;
  autograd::SavedTensor x_;
  std::shared_ptr<const autograd::SavedTensorHooks> hooks_;
};

}  // namespace

Tensor recompute(const SegmentFn& fn, const Tensor& x, bool params_need_grad) {
  bool x_needs = x.requires_grad() || x.grad_fn();
  if (!autograd::grad_enabled() || (!x_needs && !params_need_grad))
    return fn(x, ops::OutputUse::kValue);
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    out = fn(x, ops::OutputUse::kValue);
  }
  auto node = std::make_shared<RecomputeNode>(fn, x);
  autograd::Edge e;
  Tensor xh = x;
  if (x.grad_fn()) {
    e.node = x.grad_fn();
    e.output_index = xh.autograd_meta().output_index;
  } else if (x.requires_grad()) {
    e.leaf = xh.autograd_meta_ptr();
  }
  node->next_edges = {e};
  node->num_outputs = 1;
  auto& m = out.autograd_meta();
  m.grad_fn = node;
  m.output_index = 0;
  m.requires_grad = true;
  return out;
}

}  // namespace unillm::nn
