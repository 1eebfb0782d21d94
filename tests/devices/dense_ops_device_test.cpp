// The dense and data-movement ops on the CPU and on the reference device against the f64 oracle
// (device_op_util.h), for every dtype the CPU takes: linear, LoRA, embedding, gather/scatter,
// add/mul, cast, Tensor copies (strided, converting), gradient accumulation, the KV-cache write.
#include <gtest/gtest.h>

#include <type_traits>

#include "core/registry.h"
#include "unillm/kernel_args.h"
#include "devices/device_op_util.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gather.h"
#include "ops/linear.h"
#include "ops/lora_linear.h"

namespace unillm {
namespace {

using devtest::Case;
using devtest::expect_matches_oracle;
using devtest::random;
using devtest::ref_device;

// Every test here runs with the host fallback refused: each op must have its device kernel.
class DenseOps : public ::testing::Test {
 protected:
  void SetUp() override {
    ref_device();
    kernel_registry().set_fallback(KernelRegistry::Fallback::error, nullptr);
  }
  void TearDown() override {
    kernel_registry().set_fallback(KernelRegistry::Fallback::warn, nullptr);
  }
};

const char* name(DType t) { return dtype_name(t); }

TEST_F(DenseOps, Linear) {
  for (DType x : {DType::f32, DType::f64}) {
    Case c{{random({6, 16}, 1, x), random({24, 16}, 2, x), random({24}, 3, x)}, true, 1e-5, {}};
    expect_matches_oracle(std::string("linear+bias ") + name(x), c,
                          [](const auto& in) { return ops::linear(in[0], in[1], in[2]); });
  }
  for (DType w : {DType::bf16, DType::f16}) {  // frozen low-precision weights (LoRA's base)
    Case c{{random({5, 16}, 4), random({12, 16}, 5, w)}, true, 1e-5, {}};
    expect_matches_oracle(std::string("linear w ") + name(w), c,
                          [](const auto& in) { return ops::linear(in[0], in[1].detach()); });
  }
}

TEST_F(DenseOps, LoraLinear) {
  for (DType x : {DType::f32, DType::f64}) {
    Case c{{random({5, 16}, 19, x), random({24, 16}, 20, x), random({8, 16}, 21, x),
            random({24, 4}, 22, x)},
           true,
           1e-5,
           {}};
    expect_matches_oracle(std::string("lora_linear ") + name(x), c, [](const auto& in) {
      ops::LoraAdapterInput a;
      a.a = in[2];
      a.b = in[3];
      a.parts = {{0, 8, 0}, {16, 8, 8}};
      a.scaling = 0.5;
      return ops::lora_linear(in[0], in[1], Tensor(), {a});
    });
  }
}

TEST_F(DenseOps, EmbeddingAndGather) {
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    Case c{{random({10, 8}, 12, t)}, true, 1e-5, {}};
    c.grads = t == DType::f32 || t == DType::f64;
    expect_matches_oracle(std::string("embedding ") + name(t), c, [](const auto& in) {
      return ops::embedding(Tensor::from_ints({3, 1, 4, 1, 5, 9}, {6}), in[0]);
    });
  }
  for (DType t : {DType::f32, DType::f64}) {
    expect_matches_oracle(std::string("gather_rows ") + name(t),
                          Case{{random({10, 8}, 13, t)}, true, 1e-5, {}}, [](const auto& in) {
                            return ops::gather_rows(in[0], Tensor::from_ints({9, 0, 9, 2}, {4}));
                          });
  }
}

TEST_F(DenseOps, AddMulAndAccumulation) {
  for (DType t : {DType::f32, DType::f64}) {
    // x is used three times, so its gradient is accumulated on the device.
    expect_matches_oracle(
        std::string("add/mul ") + name(t),
        Case{{random({4, 20}, 9, t), random({4, 20}, 10, t)}, true, 1e-5, {}},
        [](const auto& in) { return ops::mul(ops::add(in[0], in[1]), ops::add(in[0], in[0])); });
  }
}

TEST_F(DenseOps, CastBothWays) {
  for (DType low : {DType::bf16, DType::f16}) {
    Tensor x = random({4, 20}, 11);
    Tensor cpu = ops::cast(ops::cast(x, low), DType::f32);
    Tensor dev_low = ops::cast(x.to(ref_device()), low);
    EXPECT_EQ(dev_low.device(), ref_device());
    EXPECT_EQ(devtest::host(dev_low), devtest::host(ops::cast(x, low))) << name(low);
    EXPECT_EQ(devtest::host(ops::cast(dev_low, DType::f32)), devtest::host(cpu)) << name(low);
  }
  Tensor d = random({3, 5}, 12, DType::f64);
  EXPECT_EQ(devtest::host(ops::cast(d.to(ref_device()), DType::f32)),
            devtest::host(ops::cast(d, DType::f32)));
}

TEST_F(DenseOps, StridedAndConvertingCopies) {
  Tensor x = random({3, 4, 5}, 14);
  Tensor t = x.transpose(0, 2);  // [5, 4, 3], not contiguous
  Tensor dev = x.to(ref_device()).transpose(0, 2).contiguous();
  EXPECT_EQ(devtest::host(dev), devtest::host(t.contiguous()));
  Tensor s = x.to(ref_device()).slice(1, 1, 3).to(DType::bf16);  // strided and converting
  EXPECT_EQ(devtest::host(s), devtest::host(x.slice(1, 1, 3).to(DType::bf16)));
  Tensor ids = Tensor::empty({3}, DType::i64);
  ids.data<int64_t>()[0] = (int64_t{1} << 60) + 1;  // not representable in a double
  ids.data<int64_t>()[1] = -7;
  ids.data<int64_t>()[2] = 0;
  Tensor back = ids.to(ref_device()).to(Device{});
  EXPECT_EQ(back.data<int64_t>()[0], (int64_t{1} << 60) + 1);
  EXPECT_EQ(back.data<int64_t>()[1], -7);
}

TEST_F(DenseOps, KvCacheWrite) {
  for (DType t : {DType::f32, DType::f64}) {
    Tensor kv = random({5, 2, 4}, 15, t);
    Tensor slots = Tensor::from_ints({7, 0, -1, 12, 3}, {5});
    Tensor cpu = Tensor::zeros({4, 4, 2, 4}, t);
    Tensor dev = Tensor::zeros({4, 4, 2, 4}, t, ref_device());
    ops::kv_cache_write(kv, cpu, slots);
    ops::kv_cache_write(kv.to(ref_device()), dev, slots);
    EXPECT_EQ(devtest::host(dev), devtest::host(cpu)) << name(t);
  }
}

// A kernel called with a required pointer left null, or an extent that overflows, answers with a
// status on the calling thread instead of faulting on the stream's worker.
TEST_F(DenseOps, BadArgumentsAreAStatusNotAFault) {
  const Device dev = ref_device();
  using Fn = std::remove_pointer_t<unillm_kernel_fn>;
  Fn* linear = kernel_registry().find_exact<Fn>("linear", dev.kind, DType::f32);
  ASSERT_NE(linear, nullptr);
  auto stream = static_cast<unillm_stream>(backend_for(dev).stream(dev.index));
  Tensor w = random({4, 3}, 30).to(dev), y = Tensor::empty({2, 4}, DType::f32, dev);
  unillm_linear_args a{sizeof a, nullptr, w.raw_data(), nullptr, y.raw_data(), 2, 3, 4,
                       UNILLM_DTYPE_F32, UNILLM_DTYPE_F32};
  EXPECT_EQ(linear(stream, &a, sizeof a), UNILLM_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(backend_for(dev).last_error().find("x is null"), std::string::npos)
      << backend_for(dev).last_error();
  a.x = w.raw_data();
  a.m = int64_t{1} << 62;  // m·k overflows
  EXPECT_EQ(linear(stream, &a, sizeof a), UNILLM_ERROR_INVALID_ARGUMENT);
  a.m = 2;
  EXPECT_EQ(linear(stream, &a, sizeof a - 8), UNILLM_ERROR_INVALID_ARGUMENT);  // struct too small
}

}  // namespace
}  // namespace unillm
