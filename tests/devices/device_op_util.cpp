// The device × dtype op harness: see device_op_util.h.
#include "devices/device_op_util.h"

#include <algorithm>
#include <cmath>

#include "autograd/engine.h"
#include "backends/cpu/register.h"
#include "backends/plugin/plugin_loader.h"
#include "core/rng.h"
#include "support/expect.h"
#include "ops/cast.h"

namespace unillm::devtest {

namespace {

void load_once() {
  static const bool loaded = [] {
    testing::init_cpu();
    plugin::load_plugins(std::string(UNILLM_BINARY_DIR) + "/plugins:" + UNILLM_BINARY_DIR +
                         "/tests/plugins");
    return true;
  }();
  (void)loaded;
}

bool keeps(const Case& c, size_t i) {
  return std::find(c.keep_dtype.begin(), c.keep_dtype.end(), i) != c.keep_dtype.end();
}

struct Side {
  std::vector<Tensor> leaves;
  Tensor out;
};

// Runs fn on copies of the inputs made by `make`, with the fixed output gradient.
Side run_side(const Case& c, const OpFn& fn,
              const std::function<Tensor(const Tensor&, size_t)>& make) {
  Side s;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    Tensor t = make(c.inputs[i], i);
    if (c.grads && is_floating(t.dtype()) && !keeps(c, i)) t.set_requires_grad(true);
    s.leaves.push_back(t);
  }
  s.out = fn(s.leaves);
  if (c.grads) {
    Tensor g = random(s.out.shape(), 99, s.out.dtype());
    autograd::backward(s.out, s.out.device().is_cpu() ? g : g.to(s.out.device()));
  }
  return s;
}

void compare(const std::string& what, const std::string& part, const Tensor& got,
             const Tensor& want, double tol) {
  ASSERT_EQ(got.defined(), want.defined()) << what << ": " << part;
  if (!got.defined()) return;
  ASSERT_EQ(got.shape(), want.shape()) << what << ": " << part;
  const std::vector<double> a = host(got), b = host(want);
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_LE(std::fabs(a[i] - b[i]), tol * (1 + std::fabs(b[i])))
        << what << ": " << part << " element " << i << " is " << a[i] << ", oracle " << b[i];
}

}  // namespace

Device ref_device() {
  load_once();
  static const Device d = parse_device("ref");
  return d;
}

Device partial_device() {
  load_once();
  static const Device d = parse_device("ref_partial");
  return d;
}

Tensor random(const Shape& s, uint64_t seed, DType dt) {
  load_once();  // the CPU backend, for a test that makes tensors before asking for a device
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (auto& x : v) x = static_cast<float>(rng.uniform_double() * 2 - 1);
  return Tensor::from_vector(v, s, dt);
}

std::vector<double> host(const Tensor& t) {
  const Tensor h = t.to(Device{}).contiguous();
  std::vector<double> v(static_cast<size_t>(h.numel()));
  for (int64_t i = 0; i < h.numel(); ++i)
    v[static_cast<size_t>(i)] = load_scalar(h.raw_data(), h.dtype(), i);
  return v;
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, std::fabs(a[i] - b[i]) / (1 + std::fabs(b[i])));
  return m;
}

void expect_matches_oracle(const std::string& what, const Case& c, const OpFn& fn) {
  const Device dev = ref_device();
  Side oracle = run_side(c, fn, [&](const Tensor& t, size_t i) {
    return is_floating(t.dtype()) && !keeps(c, i) ? ops::cast(t, DType::f64) : t.clone();
  });
  Side cpu = run_side(c, fn, [](const Tensor& t, size_t) { return t.clone(); });
  Side ref = run_side(c, fn, [&](const Tensor& t, size_t) { return t.to(dev); });
  EXPECT_EQ(ref.out.device(), dev) << what;
  compare(what, "cpu forward", cpu.out, oracle.out, c.tol);
  compare(what, "ref forward", ref.out, oracle.out, c.tol);
  for (size_t i = 0; c.grads && i < c.inputs.size(); ++i) {
    if (!oracle.leaves[i].requires_grad()) continue;
    const std::string g = "gradient of input " + std::to_string(i);
    compare(what, "cpu " + g, cpu.leaves[i].grad(), oracle.leaves[i].grad(), c.tol);
    compare(what, "ref " + g, ref.leaves[i].grad(), oracle.leaves[i].grad(), c.tol);
  }
}

}  // namespace unillm::devtest
