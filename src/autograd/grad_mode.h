// Grad mode: whether ops record autograd nodes. The scoped guard is the one tolerated
// thread-local (STYLE.md); inference runs under NoGradGuard.
#pragma once

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

}  // namespace unillm::autograd
