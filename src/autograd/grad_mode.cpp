// The thread-local autograd mode (the single tolerated thread-local): grad mode and the
// saved-tensor hooks.
#include "autograd/grad_mode.h"

namespace unillm::autograd {

namespace {
struct Mode {
  bool grad_enabled = true;
  std::shared_ptr<const SavedTensorHooks> hooks;
};
thread_local Mode g_mode;
}  // namespace

bool grad_enabled() { return g_mode.grad_enabled; }

GradModeGuard::GradModeGuard(bool enabled) : prev_(g_mode.grad_enabled) { g_mode.grad_enabled = enabled; }
GradModeGuard::~GradModeGuard() { g_mode.grad_enabled = prev_; }

std::shared_ptr<const SavedTensorHooks> saved_tensor_hooks() { return g_mode.hooks; }

SavedTensorHooksGuard::SavedTensorHooksGuard(std::shared_ptr<const SavedTensorHooks> hooks)
    : prev_(std::move(g_mode.hooks)) {
  g_mode.hooks = std::move(hooks);
}
SavedTensorHooksGuard::~SavedTensorHooksGuard() { g_mode.hooks = std::move(prev_); }

}  // namespace unillm::autograd
