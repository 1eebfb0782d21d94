// Thread-local grad mode (the single tolerated thread-local).
#include "autograd/grad_mode.h"

namespace unillm::autograd {

namespace {
thread_local bool g_grad_enabled = true;
}

bool grad_enabled() { return g_grad_enabled; }

GradModeGuard::GradModeGuard(bool enabled) : prev_(g_grad_enabled) { g_grad_enabled = enabled; }
GradModeGuard::~GradModeGuard() { g_grad_enabled = prev_; }

}  // namespace unillm::autograd
