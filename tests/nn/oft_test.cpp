// OFT's config rules (nn/oft.h): exactly one of oft_rank / oft_block_size, and the block size a
// layer gets — PEFT 0.17.1's adjust_oft_parameters, whose outputs for these (in_features, value)
// pairs were printed by PEFT itself (OFTLayer.adjust_oft_parameters) and are pasted here. And
// QOFT: an OFT adapter over a 4-bit FusedLinear computes what it computes over the dequantised
// weight, gradients included.
#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "core/error.h"
#include "core/rng.h"
#include "nn/linear.h"
#include "nn/oft.h"
#include "ops/quant_4bit.h"
#include "support/expect.h"

namespace unillm {
namespace {

struct Adjusted {
  int64_t in, asked, peft;
};

// (in_features, asked value, PEFT's value), for block sizes and ranks alike.
constexpr Adjusted kPeft[] = {{172, 16, 4}, {176, 32, 22}, {48, 32, 24}, {10, 32, 10},   {64, 32, 32},
                              {90, 7, 6},   {97, 8, 1},    {100, 100, 100}, {12, 5, 4}, {4096, 32, 32},
                              {14336, 32, 32}, {11008, 32, 32}, {18944, 32, 32}};

TEST(OftConfig, BlockSizesFollowPeftsAdjustment) {
  for (const Adjusted& c : kPeft) {
    SCOPED_TRACE(std::to_string(c.in) + " inputs, asked " + std::to_string(c.asked));
    nn::OftConfig by_size;
    by_size.block_size = c.asked;
    const nn::OftBlocks s = nn::oft_blocks(by_size, c.in);
    EXPECT_EQ(s.block_size, c.peft);
    EXPECT_EQ(s.blocks * s.block_size, c.in);
    EXPECT_EQ(s.adjusted, c.in % c.asked != 0 || c.asked > c.in);
    nn::OftConfig by_rank;
    by_rank.rank = c.asked;
    by_rank.block_size = 0;
    const nn::OftBlocks r = nn::oft_blocks(by_rank, c.in);
    EXPECT_EQ(r.blocks, c.peft);
    EXPECT_EQ(r.blocks * r.block_size, c.in);
  }
}

TEST(OftConfig, ConfigNeedsExactlyOneOfRankAndBlockSize) {
  nn::OftConfig c;
  EXPECT_NO_THROW(nn::validate_oft_config(c));  // PEFT's defaults: r 0, oft_block_size 32
  c.rank = 4;
  testing::expect_throw_with<ConfigError>([&] { nn::validate_oft_config(c); }, "exactly one of oft_rank");
  c.block_size = 0;
  EXPECT_NO_THROW(nn::validate_oft_config(c));
  c.rank = 0;
  testing::expect_throw_with<ConfigError>([&] { nn::validate_oft_config(c); }, "exactly one of oft_rank");
  c.block_size = 8;
  c.module_dropout = 1.0;
  testing::expect_throw_with<ConfigError>([&] { nn::validate_oft_config(c); }, "module_dropout");
}

Tensor random(const Shape& shape, uint64_t seed, double scale) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (auto& x : v) x = static_cast<float>(scale * (2 * rng.uniform_double() - 1));
  return Tensor::from_vector(v, shape);
}

TEST(OftConfig, QuantisedBaseEqualsItsDequantisedWeight) {
  testing::init_cpu();
  const std::vector<nn::LinearPart> parts{{"q_proj", 8}, {"k_proj", 4}, {"v_proj", 8}};
  nn::FusedLinear dense(16, parts, true, DType::f32), quant(16, parts, true, DType::f32);
  const ops::QuantizedWeight q = ops::quantize_4bit(random({20, 16}, 1, 0.5), ops::QuantType::nf4, {});
  Tensor(dense.weight()).copy_from(ops::dequantize_4bit(q));
  for (nn::FusedLinear* f : {&dense, &quant}) Tensor(f->bias()).copy_from(random({20}, 2, 0.3));
  quant.set_quantized(q);
  nn::OftConfig c;
  c.block_size = 4;
  std::vector<Tensor> x, grads;
  std::vector<std::vector<float>> y;
  for (nn::FusedLinear* f : {&dense, &quant}) {
    f->add_oft("o", c, {0, 2});
    f->lora("o")->oft_r.detach().copy_from(random({8, 6}, 3, 0.3));
    x.push_back(random({5, 16}, 4, 1.0));
    x.back().set_requires_grad(true);
    nn::LoraRun run;
    run.active = {"o"};
    Tensor out = f->forward(x.back(), &run);
    y.push_back(out.to_float_vector());
    autograd::backward(out, random({5, 20}, 5, 1.0));
  }
  EXPECT_LE(testing::max_abs_diff(Tensor::from_vector(y[0], {5, 20}), Tensor::from_vector(y[1], {5, 20})), 1e-4);
  EXPECT_LE(testing::max_abs_diff(x[0].grad(), x[1].grad()), 1e-4);
  EXPECT_LE(testing::max_abs_diff(dense.lora("o")->oft_r.grad(), quant.lora("o")->oft_r.grad()), 1e-4);
  EXPECT_GT(testing::max_abs_diff(dense.lora("o")->oft_r.grad(), Tensor::zeros({8, 6}, DType::f32)), 1e-3);
}

}  // namespace
}  // namespace unillm
