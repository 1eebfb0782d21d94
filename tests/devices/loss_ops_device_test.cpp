// The SFT loss variants' ops on every device × lm_head dtype against the f64 CPU oracle
// (devices/device_op_util.h): weighted_cross_entropy (DFT, EAFT) and asft_cross_entropy, loss and
// both gradients. The reference plugin has no kernels for them, so its side runs the CPU kernels
// on host copies (KernelCall's fallback) and must still match.
#include <gtest/gtest.h>

#include <string>

#include "devices/device_op_util.h"
#include "ops/asft_cross_entropy.h"
#include "ops/weighted_cross_entropy.h"

namespace unillm {
namespace {

using devtest::Case;
using devtest::random;

class LossOps : public ::testing::Test {
 protected:
  void SetUp() override { devtest::ref_device(); }
};

// x [7, 16] and the head w [30, 16]; rows 2 and 5 are ignored.
Case head_case(DType x, DType w) {
  Case c;
  c.inputs = {random({7, 16}, 41, x), random({30, 16}, 42, w)};
  c.tol = x == DType::f64 ? 1e-9 : 1e-5;
  return c;
}
Tensor labels() { return Tensor::from_ints({1, 5, -100, 29, 0, -100, 3}, {7}); }

Tensor dft(const std::vector<Tensor>& in) {
  return ops::weighted_cross_entropy(in[0], in[1], labels(),
                                     {ops::TokenWeighting::Kind::kDft, 1.0, 20, 3})
      .loss_sum;
}
Tensor eaft(const std::vector<Tensor>& in) {
  return ops::weighted_cross_entropy(in[0], in[1], labels(),
                                     {ops::TokenWeighting::Kind::kEaft, 0.7, 20, 3})
      .loss_sum;
}
// The reference's rows and head: constants made in f32 and cast to the side's x dtype, so every
// side sees the same values (the oracle's f64 copies are exact).
Tensor asft(const std::vector<Tensor>& in) {
  const Tensor xr = random({7, 16}, 43, DType::f32).to(in[0].dtype()).to(in[0].device());
  const Tensor wr = random({30, 16}, 44, DType::f32).to(in[0].dtype()).to(in[0].device());
  return ops::asft_cross_entropy(in[0], in[1], xr, wr, labels(), {0.3, 0.5, 3}).loss_sum;
}

TEST_F(LossOps, SftLossVariantsEveryHeadDtype) {
  const std::pair<DType, DType> dtypes[] = {{DType::f32, DType::f32},
                                            {DType::f32, DType::bf16},
                                            {DType::f32, DType::f16},
                                            {DType::f64, DType::f64}};
  for (const auto& d : dtypes) {
    const std::string what =
        std::string(" x ") + dtype_name(d.first) + " w " + dtype_name(d.second);
    devtest::expect_matches_oracle("dft" + what, head_case(d.first, d.second), dft);
    devtest::expect_matches_oracle("eaft" + what, head_case(d.first, d.second), eaft);
    devtest::expect_matches_oracle("asft" + what, head_case(d.first, d.second), asft);
  }
}

}  // namespace
}  // namespace unillm
