// Autograd graph nodes. An op that records itself creates a Node subclass naming the tensors it
// saves (SavedTensor), links one Edge per differentiable input, and implements backward():
// output gradients in, input gradients out (undefined Tensor = no gradient). backward() returns
// fresh tensors (or tensors it no longer needs); the engine never writes into them in place
// except a leaf's .grad, which it owns. The engine calls backward() only when at least one
// output received a gradient; outputs that received none arrive as undefined tensors.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/tensor.h"

namespace unillm::autograd {

class Node;

// Where an input's gradient goes: another node's output, or a leaf's .grad (accumulated +=).
struct Edge {
  std::shared_ptr<Node> node;
  int output_index = 0;
  std::shared_ptr<AutogradMeta> leaf;  // set for leaves that require grad
  bool valid() const { return node || leaf; }
};

// A tensor kept for backward. It keeps a detached view (no autograd state, so saving an op's own
// output cannot form a node -> tensor -> node cycle); saved tensors are never written in place by
// the ops (DESIGN.md). Its storage may give its memory back and be refilled with the same values
// before backward (ZeRO-3's parameters, Storage::refill); get() catches one that was not refilled.
// get() after release() throws (backward ran without retain_graph).
//
// Weights and index tensors are saved with the constructor, as they are. Activations (values
// computed in the forward that backward reads) are saved with activation(): when saved-tensor
// hooks are in force (grad_mode.h) the hooks' pack result is kept instead, and get() unpacks it
// once (kept until release()).
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t)
      : tensor_(t.detach()), saved_(t.defined()) {}
  static SavedTensor activation(const Tensor& t);
  // The saved tensor (the unpacked one for a packed activation).
  const Tensor& get() const;
  // True when a (defined) tensor was saved, even after release().
  bool saved() const { return saved_; }
  void release() {
    tensor_ = Tensor();
    unpacked_ = Tensor();
    hooks_.reset();
  }

 private:
  Tensor tensor_;  // what is kept: the tensor itself, or the hooks' pack result
  bool saved_ = false;
  std::shared_ptr<const SavedTensorHooks> hooks_;  // set when tensor_ is packed
  mutable Tensor unpacked_;
};

class Node {
 public:
  virtual ~Node() = default;
  virtual std::string name() const = 0;
  virtual std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) = 0;
  // Frees saved tensors once backward has run (unless the graph is retained).
  virtual void release_saved() {}

  // True when input i's gradient goes somewhere (skip its work otherwise: e.g. no weight-gradient
  // GEMM for a frozen weight).
  bool needs_input_grad(size_t i) const { return i < next_edges.size() && next_edges[i].valid(); }

  std::vector<Edge> next_edges;  // one per input, in input order
  int num_outputs = 1;
};

// True when grad mode is on and any input requires grad.
bool needs_grad(const std::vector<Tensor>& inputs);
// Links node to inputs and marks outputs as its results. No-op unless needs_grad(inputs).
void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
            std::vector<Tensor*> outputs);

}  // namespace unillm::autograd
