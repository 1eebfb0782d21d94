// Autograd graph nodes. An op that records itself creates a Node subclass naming the tensors it
// saves (SavedTensor), links one Edge per differentiable input, and implements backward():
// output gradients in, input gradients out (undefined Tensor = no gradient).
#pragma once

#include <memory>
#include <string>
#include <vector>

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

// A tensor kept for backward. It records the storage and view at save time; saved tensors
// are never written in place by the ops (DESIGN.md), and check() catches violations of that
// contract cheaply by comparing the view.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t) : tensor_(t), data_(t.defined() ? t.raw_data() : nullptr) {}
  const Tensor& get() const;
  void release() { tensor_ = Tensor(); }

 private:
  Tensor tensor_;
  void* data_ = nullptr;
};

class Node {
 public:
  virtual ~Node() = default;
  virtual std::string name() const = 0;
  virtual std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) = 0;
  // Frees saved tensors once backward has run (unless the graph is retained).
  virtual void release_saved() {}

  std::vector<Edge> next_edges;  // one per input, in input order
  int num_outputs = 1;
};

// True when grad mode is on and any input requires grad.
bool needs_grad(const std::vector<Tensor>& inputs);
// Links node to inputs and marks outputs as its results. No-op unless needs_grad(inputs).
void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
            std::vector<Tensor*> outputs);

}  // namespace unillm::autograd
