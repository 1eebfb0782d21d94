// rope_qkv (the fuse_rope_into_qk op): exactly the bits of split_last + reshape + rope for GQA
// and MHA shapes, full and partial rotary, many tokens (thread split) and one; the reference
// against a naive double oracle; with gradients it is the composed ops.
#include "ops/rope_qkv.h"

#include "grad_check_util.h"
#include "ops/rope.h"
#include "ops/shape.h"

namespace unillm {
namespace {

// The rotation in double from the f32 angle (the angle is f32 in HF and in both kernels).
std::vector<double> rotate_oracle(const std::vector<double>& x, int64_t n, int64_t heads, int64_t d,
                                  const std::vector<int32_t>& pos, const std::vector<float>& f) {
  std::vector<double> y = x;
  const auto half = static_cast<int64_t>(f.size());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const float ang = static_cast<float>(pos[t]) * f[i];
        const double c = std::cos(static_cast<double>(ang)), s = std::sin(static_cast<double>(ang));
        const size_t b = static_cast<size_t>((t * heads + h) * d);
        y[b + i] = x[b + i] * c - x[b + i + half] * s;
        y[b + i + half] = x[b + i + half] * c + x[b + i] * s;
      }
  return y;
}

class RopeQkvTest : public optest::OpTest {};

TEST_F(RopeQkvTest, FusedEqualsSplitAndRopeBitForBit) {
  struct Case {
    int64_t n, heads, kv_heads, d, rot;
  };
  uint64_t seed = 1;
  for (Case c : {Case{1, 4, 2, 16, 16}, Case{37, 4, 4, 8, 8}, Case{300, 6, 2, 32, 16}, Case{5, 2, 1, 12, 4}}) {
    SCOPED_TRACE(::testing::Message() << "n=" << c.n << " h=" << c.heads << " hkv=" << c.kv_heads << " d=" << c.d
                                      << " rot=" << c.rot);
    const int64_t width = (c.heads + 2 * c.kv_heads) * c.d;
    Tensor qkv = optest::randn({c.n, width}, DType::f32, seed++);
    std::vector<int32_t> pos(static_cast<size_t>(c.n));
    for (int64_t t = 0; t < c.n; ++t) pos[t] = static_cast<int32_t>(3 * t + 11);
    Tensor positions = Tensor::from_ints(pos, {c.n});
    ops::RopeConfig rc;
    rc.rot_dim = c.rot;
    const std::vector<float> f = ops::rope_inv_freq(rc);
    ops::QkvHeads got = ops::rope_qkv(qkv, positions, f, c.heads, c.kv_heads, c.d);
    auto parts = ops::split_last(qkv, {c.heads * c.d, c.kv_heads * c.d, c.kv_heads * c.d});
    Tensor q = ops::rope(ops::reshape(parts[0], {c.n, c.heads, c.d}), positions, f);
    Tensor k = ops::rope(ops::reshape(parts[1], {c.n, c.kv_heads, c.d}), positions, f);
    EXPECT_EQ(got.q.shape(), q.shape());
    EXPECT_EQ(got.q.to_float_vector(), q.to_float_vector());
    EXPECT_EQ(got.k.to_float_vector(), k.to_float_vector());
    EXPECT_EQ(got.v.to_float_vector(), parts[2].contiguous().to_float_vector());
    optest::expect_near(got.q, rotate_oracle(optest::doubles(parts[0].contiguous()), c.n, c.heads, c.d, pos, f), 1e-6,
                        1e-5);
    // The reference, as a device without the kernel runs it on the host.
    Tensor rq = Tensor::empty({c.n, c.heads, c.d}, DType::f32), rk = Tensor::empty({c.n, c.kv_heads, c.d}, DType::f32);
    Tensor rv = Tensor::empty({c.n, c.kv_heads, c.d}, DType::f32);
    ops::rope_qkv_reference({qkv.data<float>(), rq.data<float>(), rk.data<float>(), rv.data<float>(), pos.data(),
                             f.data(), c.n, c.heads, c.kv_heads, c.d, c.rot});
    optest::expect_near(rk, rotate_oracle(optest::doubles(parts[1].contiguous()), c.n, c.kv_heads, c.d, pos, f), 1e-6,
                        1e-5);
    EXPECT_EQ(rv.to_float_vector(), got.v.to_float_vector());
    optest::expect_near(rq, optest::doubles(got.q), 1e-6, 1e-5);
  }
}

TEST_F(RopeQkvTest, WithGradientsItIsTheComposedOps) {
  Tensor qkv = optest::leaf({7, (2 + 2) * 8}, DType::f32, 2);
  Tensor positions = Tensor::from_ints({0, 1, 2, 3, 4, 5, 6}, {7});
  ops::RopeConfig rc;
  rc.rot_dim = 8;
  const std::vector<float> f = ops::rope_inv_freq(rc);
  ops::QkvHeads h = ops::rope_qkv(qkv, positions, f, 2, 1, 8);
  Tensor r = optest::randn({7, 2, 8}, DType::f32, 3);
  autograd::backward(h.q, r);
  Tensor qkv2 = qkv.detach().clone().set_requires_grad(true);
  auto parts = ops::split_last(qkv2, {16, 8, 8});
  autograd::backward(ops::rope(ops::reshape(parts[0], {7, 2, 8}), positions, f), r);
  EXPECT_EQ(qkv.grad().to_float_vector(), qkv2.grad().to_float_vector());
}

TEST_F(RopeQkvTest, WrongWidthIsAClearError) {
  ops::RopeConfig rc;
  rc.rot_dim = 8;
  optest::expect_throw_with<ShapeError>(
      [&] {
        ops::rope_qkv(optest::randn({2, 40}, DType::f32, 1), Tensor::from_ints({0, 1}, {2}), ops::rope_inv_freq(rc), 2,
                      1, 8);
      },
      "[rope_qkv] qkv has 40 columns, expected (2 + 2·1)·8 = 32");
}

}  // namespace
}  // namespace unillm
