// on_backward's node (see backward_hook.h).
#include "autograd/backward_hook.h"

#include <memory>
#include <string>

#include "autograd/node.h"

namespace unillm::autograd {
namespace {

class BackwardHookNode : public Node {
 public:
  explicit BackwardHookNode(std::function<void()> fn) : fn_(std::move(fn)) {}
  std::string name() const override { return "backward_hook"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    fn_();
    return g;
  }

 private:
  std::function<void()> fn_;
};

}  // namespace

std::vector<Tensor> on_backward(const std::vector<Tensor>& xs, std::function<void()> fn) {
  std::vector<Tensor> in, out;
  for (const Tensor& x : xs)
    if (x.defined()) in.push_back(x);
  if (!needs_grad(in)) return xs;
  for (const Tensor& x : in) out.push_back(x.detach());  // the same storage, a node of its own
  auto node = std::make_shared<BackwardHookNode>(std::move(fn));
  node->num_outputs = static_cast<int>(out.size());
  std::vector<Tensor*> outs;
  for (Tensor& t : out) outs.push_back(&t);
  record(node, in, outs);
  std::vector<Tensor> result;
  size_t k = 0;
  for (const Tensor& x : xs) result.push_back(x.defined() ? out[k++] : Tensor());
  return result;
}

}  // namespace unillm::autograd
