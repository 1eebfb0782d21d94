// Grad mode and saved-tensor hooks: whether ops record autograd nodes, and how the activations
// they save for backward are stored. Both live in the one tolerated thread-local (STYLE.md), set
// by scoped guards; inference runs under NoGradGuard.
#pragma once

#include <functional>
#include <memory>

#include "core/tensor.h"

namespace unillm::autograd {

bool grad_enabled();

class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled);
  ~GradModeGuard();
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

struct NoGradGuard : GradModeGuard {
  NoGradGuard() : GradModeGuard(false) {}
};

// Pack/unpack hooks for activations saved for backward (PyTorch's saved_tensors_hooks): pack
// runs when an op saves an activation (SavedTensor::activation) and returns what is kept; unpack
// runs once when backward first reads it and must return a tensor of the original shape and
// dtype. Mixed precision uses them to keep saved activations in bf16/f16 (nn/low_precision_saves.h).
struct SavedTensorHooks {
  std::function<Tensor(const Tensor&)> pack;
  std::function<Tensor(const Tensor&)> unpack;
};

// The hooks in force (nullptr: activations are saved as they are).
std::shared_ptr<const SavedTensorHooks> saved_tensor_hooks();

// Installs hooks for its scope. The recompute node captures the hooks of the forward and
// re-installs them for its backward re-run, so a whole step sees the same policy.
class SavedTensorHooksGuard {
 public:
  explicit SavedTensorHooksGuard(std::shared_ptr<const SavedTensorHooks> hooks);
  ~SavedTensorHooksGuard();
  SavedTensorHooksGuard(const SavedTensorHooksGuard&) = delete;
  SavedTensorHooksGuard& operator=(const SavedTensorHooksGuard&) = delete;

 private:
  std::shared_ptr<const SavedTensorHooks> prev_;
};

}  // namespace unillm::autograd
