// The host fallback, on ref_partial: the reference plugin built without its rms_norm kernel.
// There rms_norm runs the CPU kernel on host copies of its tensors — bit-identical to the CPU, and
// a binding the op forgot would hand a device pointer to a CPU kernel, which faults on the
// plugin's guarded memory instead of passing — reported once per op, or refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/engine.h"
#include "core/error.h"
#include "core/registry.h"
#include "devices/device_op_util.h"
#include "ops/rms_norm.h"
#include "ops/swiglu.h"

namespace unillm {
namespace {

using devtest::FallbackPolicy;
using devtest::host;
using devtest::partial_device;
using devtest::random;

// rms_norm on ref_partial: the forward runs on the host (the CPU's bits, reported once), the
// backward on the plugin's own kernel.
TEST(Fallback, RunsTheCpuKernelOnHostCopies) {
  const Device dev = partial_device();
  std::vector<std::string> reports;
  FallbackPolicy p(KernelRegistry::Fallback::warn,
                   [&](const std::string& s) { reports.push_back(s); });
  Tensor x = random({5, 32}, 4), w = random({32}, 5), g = random({5, 32}, 6);
  Tensor xc = x.clone().set_requires_grad(true), wc = w.clone().set_requires_grad(true);
  Tensor xd = x.to(dev).set_requires_grad(true), wd = w.to(dev).set_requires_grad(true);
  Tensor yc = ops::rms_norm(xc, wc, 1e-5f), yd = ops::rms_norm(xd, wd, 1e-5f);
  ops::rms_norm(xd.detach(), wd.detach(), 1e-5f);  // a second call is not reported again
  autograd::backward(yc, g);
  autograd::backward(yd, g.to(dev));
  EXPECT_EQ(yd.device(), dev);
  EXPECT_EQ(host(yd), host(yc));
  EXPECT_LE(devtest::max_rel_diff(host(xd.grad()), host(xc.grad())), 1e-5);
  EXPECT_LE(devtest::max_rel_diff(host(wd.grad()), host(wc.grad())), 1e-5);
  ASSERT_EQ(reports.size(), 1u);  // rms_norm; its backward has a kernel on ref_partial
  EXPECT_NE(reports[0].find("rms_norm"), std::string::npos) << reports[0];
  EXPECT_NE(reports[0].find("ref_partial"), std::string::npos) << reports[0];
}

TEST(Fallback, ErrorPolicyRefusesNamingOpDeviceAndDtype) {
  const Device dev = partial_device();
  FallbackPolicy p(KernelRegistry::Fallback::error, nullptr);
  Tensor x = random({3, 8}, 7).to(dev), w = random({8}, 8, DType::bf16).to(dev);
  try {
    ops::rms_norm(x, w, 1e-5f);
    ADD_FAILURE() << "rms_norm ran without a kernel under the error policy";
  } catch (const NotImplemented& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rms_norm"), std::string::npos) << m;
    EXPECT_NE(m.find("ref_partial"), std::string::npos) << m;
    EXPECT_NE(m.find("bf16"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(ops::swiglu(random({3, 8}, 9).to(dev)));  // the ops it has still run
}

}  // namespace
}  // namespace unillm
