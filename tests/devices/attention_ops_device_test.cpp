// The attention ops and the fused lm-head loss on the CPU and on the reference device against the
// f64 oracle (device_op_util.h): causal attention (GQA, segment ids, odd T) forward and
// backward, paged attention over a shuffled multi-block cache, linear_cross_entropy for every
// head dtype (ignored labels, both gradients), and a run of each with the host fallback refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <type_traits>

#include "autograd/engine.h"
#include "core/registry.h"
#include "devices/device_op_util.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/causal_attention.h"
#include "ops/cross_entropy.h"
#include "unillm/device_plugin.h"

namespace unillm {
namespace {

using devtest::Case;
using devtest::expect_matches_oracle;
using devtest::random;
using devtest::ref_device;

constexpr float kScale = 0.35f;
const char* name(DType t) { return dtype_name(t); }
double tol_for(DType t) { return t == DType::f64 ? 1e-9 : 1e-5; }

// Loads the CPU backend and the plugin before a test builds its inputs.
class AttentionOps : public ::testing::Test {
 protected:
  void SetUp() override { ref_device(); }
};

// The reference device alone against the oracle: it computes in double, so it must be closer than
// the CPU's f32 kernels; prints the largest relative difference of the output and each gradient.
void expect_ref_close(const std::string& what, const Case& c, const devtest::OpFn& fn, double tol) {
  double worst = 0;
  std::vector<std::vector<double>> sides[2];  // [oracle, ref]: output, then each input's gradient
  for (int side = 0; side < 2; ++side) {
    std::vector<Tensor> leaves;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const Tensor& t = c.inputs[i];
      const bool keep =
          std::find(c.keep_dtype.begin(), c.keep_dtype.end(), i) != c.keep_dtype.end();
      Tensor l = side == 0
                     ? (is_floating(t.dtype()) && !keep ? ops::cast(t, DType::f64) : t.clone())
                     : t.to(ref_device());
      if (c.grads && is_floating(t.dtype()) && !keep) l.set_requires_grad(true);
      leaves.push_back(l);
    }
    Tensor out = fn(leaves);
    if (c.grads) {
      Tensor g = random(out.shape(), 99, out.dtype());
      autograd::backward(out, side == 0 ? g : g.to(ref_device()));
    }
    sides[side].push_back(devtest::host(out));
    for (const Tensor& l : leaves)
      if (l.requires_grad()) sides[side].push_back(devtest::host(l.grad()));
  }
  ASSERT_EQ(sides[0].size(), sides[1].size()) << what;
  for (size_t i = 0; i < sides[0].size(); ++i)
    worst = std::max(worst, devtest::max_rel_diff(sides[1][i], sides[0][i]));
  std::printf("[ max rel diff ref vs f64 oracle ] %-40s %.3g\n", what.c_str(), worst);
  EXPECT_LE(worst, tol) << what;
}

// ---- causal attention ------------------------------------------------------------------------

// q [2, 7, 4, 8], k and v [2, 7, 2, 8] (GQA 2:1, odd T), segment ids [2, 7] (input 3).
Case causal_case(DType t, bool grads = true) {
  Case c;
  c.inputs = {random({2, 7, 4, 8}, 14, t), random({2, 7, 2, 8}, 15, t), random({2, 7, 2, 8}, 16, t),
              Tensor::from_ints({0, 0, 0, 1, 1, 2, 2, 5, 5, 5, 5, 9, 9, 9}, {2, 7})};
  c.grads = grads;
  c.tol = tol_for(t);
  c.keep_dtype = {3};
  return c;
}

Tensor causal_plain(const std::vector<Tensor>& in) {
  return ops::causal_attention(in[0], in[1], in[2], Tensor(), kScale);
}
Tensor causal_segments(const std::vector<Tensor>& in) {
  return ops::causal_attention(in[0], in[1], in[2], in[3], kScale);
}
Tensor causal_lse(const std::vector<Tensor>& in) {
  Tensor lse;
  ops::causal_attention(in[0], in[1], in[2], in[3], kScale, &lse);
  return lse;  // [B, T, H]
}

TEST_F(AttentionOps, CausalAttentionGqaWithAndWithoutSegments) {
  for (DType t : {DType::f32, DType::f64}) {
    expect_matches_oracle(std::string("causal_attention ") + name(t), causal_case(t), causal_plain);
    expect_matches_oracle(std::string("causal_attention segments ") + name(t), causal_case(t),
                          causal_segments);
    expect_ref_close(std::string("causal_attention ") + name(t), causal_case(t), causal_plain,
                     t == DType::f64 ? 1e-12 : 1e-6);
    expect_ref_close(std::string("causal_attention segments ") + name(t), causal_case(t),
                     causal_segments, t == DType::f64 ? 1e-12 : 1e-6);
  }
}

TEST_F(AttentionOps, CausalAttentionLseLayout) {
  for (DType t : {DType::f32, DType::f64}) {
    expect_matches_oracle(std::string("causal_attention lse ") + name(t), causal_case(t, false),
                          causal_lse);
    Tensor lse;
    const Case c = causal_case(t, false);
    ops::causal_attention(c.inputs[0].to(ref_device()), c.inputs[1].to(ref_device()),
                          c.inputs[2].to(ref_device()), c.inputs[3], kScale, &lse);
    EXPECT_EQ(lse.device(), ref_device());
    EXPECT_EQ(lse.dtype(), t);  // the data dtype, [B, T, H]
    EXPECT_EQ(lse.shape(), (Shape{2, 7, 4}));
  }
}

// Only some gradients requested: the device writes those and leaves the null ones alone.
TEST_F(AttentionOps, CausalAttentionBackwardWithNullGradients) {
  const Case c = causal_case(DType::f64, false);
  std::vector<Tensor> dev;
  for (const Tensor& t : c.inputs) dev.push_back(t.to(ref_device()));
  const ops::CausalAttentionSaved s =
      ops::causal_attention_forward(dev[0], dev[1], dev[2], dev[3], kScale);
  const Tensor go = random({2, 7, 4, 8}, 99, DType::f64).to(ref_device());
  const ops::CausalAttentionGrads all = ops::causal_attention_backward(s, go);
  for (int only = 0; only < 3; ++only) {
    std::array<bool, 3> need{only == 0, only == 1, only == 2};
    const ops::CausalAttentionGrads g = ops::causal_attention_backward(s, go, need);
    const Tensor got[3] = {g.dq, g.dk, g.dv}, want[3] = {all.dq, all.dk, all.dv};
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(got[i].defined(), i == only) << only << " " << i;
      if (i == only) {
        EXPECT_EQ(devtest::host(got[i]), devtest::host(want[i])) << i;
      }
    }
  }
}

// ---- paged attention -------------------------------------------------------------------------

// Three sequences in an 8-block cache of block size 4 (blocks handed out out of order, block 7
// unused, unused table entries -1): a chunked prefill (3 new of 7), a decode (1 of 10) and a
// fresh prefill (5 of 5).
constexpr int64_t kBlockSize = 4, kMaxBlocks = 3;
std::vector<int32_t> block_table() { return {4, 1, -1, 2, 5, 0, 3, 6, -1}; }  // [3, kMaxBlocks]
std::vector<int32_t> q_start() { return {0, 3, 4, 9}; }
std::vector<int32_t> kv_len() { return {7, 10, 5}; }

ops::AttentionBatch paged_batch() {
  return {Tensor::from_ints(block_table(), {3, kMaxBlocks}), Tensor::from_ints(q_start(), {4}),
          Tensor::from_ints(kv_len(), {3})};
}

// The cache slot of each query row's own token (where its new k/v go).
Tensor new_token_slots() {
  const std::vector<int32_t> table = block_table(), qs = q_start(), kv = kv_len();
  std::vector<int32_t> slots;
  for (size_t s = 0; s < kv.size(); ++s) {
    const int32_t q_len = qs[s + 1] - qs[s];
    for (int32_t p = kv[s] - q_len; p < kv[s]; ++p)
      slots.push_back(table[s * kMaxBlocks + p / kBlockSize] * kBlockSize + p % kBlockSize);
  }
  return Tensor::from_ints(slots, {static_cast<int64_t>(slots.size())});
}

// q [9, 4, 8], caches [8, 4, 2, 8]; with new_kv, k_new and v_new [9, 2, 8].
Case paged_case(DType t, bool new_kv) {
  Case c;
  c.inputs = {random({9, 4, 8}, 21, t), random({8, kBlockSize, 2, 8}, 22, t),
              random({8, kBlockSize, 2, 8}, 23, t)};
  if (new_kv) {
    c.inputs.push_back(random({9, 2, 8}, 24, t));
    c.inputs.push_back(random({9, 2, 8}, 25, t));
  }
  c.grads = false;
  c.tol = tol_for(t);
  return c;
}

Tensor paged(const std::vector<Tensor>& in) {
  return ops::paged_attention(in[0], in[1], in[2], paged_batch(), kScale);
}
Tensor paged_after_write(const std::vector<Tensor>& in) {
  Tensor k = in[1], v = in[2];  // the side's own copies, written in place
  ops::kv_cache_write(in[3], k, new_token_slots());
  ops::kv_cache_write(in[4], v, new_token_slots());
  return ops::paged_attention(in[0], k, v, paged_batch(), kScale);
}

TEST_F(AttentionOps, PagedAttentionShuffledBlocks) {
  for (DType t : {DType::f32, DType::f64}) {
    expect_matches_oracle(std::string("paged_attention ") + name(t), paged_case(t, false), paged);
    expect_matches_oracle(std::string("paged_attention after kv_cache_write ") + name(t),
                          paged_case(t, true), paged_after_write);
    expect_ref_close(std::string("paged_attention ") + name(t), paged_case(t, false), paged,
                     t == DType::f64 ? 1e-12 : 1e-6);
  }
}

// Metadata on the device is not checked by the host: a block id far outside device memory fails
// the stream (reported at the next synchronisation) instead of faulting the process.
TEST_F(AttentionOps, PagedAttentionBadDeviceBlockIdFailsTheStream) {
  const Case c = paged_case(DType::f32, false);
  std::vector<int32_t> table = block_table();
  table[1] = 2000000000;
  ops::AttentionBatch b{Tensor::from_ints(table, {3, kMaxBlocks}).to(ref_device()),
                        Tensor::from_ints(q_start(), {4}).to(ref_device()),
                        Tensor::from_ints(kv_len(), {3}).to(ref_device())};
  const Tensor q = c.inputs[0].to(ref_device()), k = c.inputs[1].to(ref_device()),
               v = c.inputs[2].to(ref_device());
  EXPECT_THROW(devtest::host(ops::paged_attention(q, k, v, b, kScale)), DeviceError);
  // The stream works again afterwards.
  EXPECT_EQ(devtest::host(ops::paged_attention(q, k, v, paged_batch(), kScale)),
            devtest::host(ops::paged_attention(q, k, v, paged_batch(), kScale)));
}

// ---- linear cross-entropy --------------------------------------------------------------------

// x [7, 16] and the head w [30, 16]; rows 2 and 5 are ignored.
Case cross_entropy_case(DType x, DType w) {
  Case c;
  c.inputs = {random({7, 16}, 17, x), random({30, 16}, 18, w)};
  c.tol = tol_for(x);
  return c;
}
Tensor labels() { return Tensor::from_ints({1, 5, -100, 29, 0, -100, 3}, {7}); }
Tensor cross_entropy(const std::vector<Tensor>& in) {
  return ops::linear_cross_entropy(in[0], in[1], labels(), 3).loss_sum;
}
Tensor cross_entropy_eager(const std::vector<Tensor>& in) {
  return ops::linear_cross_entropy_eager_grad(in[0], in[1], labels(), 0.25, 3).loss_sum;
}

// (x, w) dtype pairs the op takes.
std::vector<std::pair<DType, DType>> head_dtypes() {
  return {{DType::f32, DType::f32},
          {DType::f32, DType::bf16},
          {DType::f32, DType::f16},
          {DType::f64, DType::f64}};
}

TEST_F(AttentionOps, LinearCrossEntropyEveryHeadDtype) {
  for (auto [x, w] : head_dtypes()) {
    const std::string what = std::string("linear_cross_entropy x ") + name(x) + " w " + name(w);
    expect_matches_oracle(what, cross_entropy_case(x, w), cross_entropy);
    expect_matches_oracle(what + " eager", cross_entropy_case(x, w), cross_entropy_eager);
    expect_ref_close(what, cross_entropy_case(x, w), cross_entropy, x == DType::f64 ? 1e-12 : 1e-6);
  }
}

// Every row ignored: the loss is 0 and the backward kernel writes zero gradients (so the op must
// keep the saved lse on x's device even when it runs no forward kernel).
TEST_F(AttentionOps, LinearCrossEntropyAllRowsIgnored) {
  Tensor x = random({3, 16}, 30).to(ref_device()), w = random({30, 16}, 31).to(ref_device());
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  ops::CrossEntropyResult r =
      ops::linear_cross_entropy(x, w, Tensor::from_ints({-100, -100, -100}, {3}));
  EXPECT_EQ(r.count, 0);
  EXPECT_EQ(devtest::host(r.loss_sum), std::vector<double>{0.0});
  autograd::backward(r.loss_sum, random({}, 32).to(ref_device()));
  EXPECT_EQ(devtest::host(x.grad()), std::vector<double>(size_t{48}, 0.0));
  EXPECT_EQ(devtest::host(w.grad()), std::vector<double>(size_t{480}, 0.0));
}

// ---- registration and the refused fallback ---------------------------------------------------

TEST_F(AttentionOps, KernelsRegisteredForEveryKeyDtype) {
  using Fn = std::remove_pointer_t<unillm_kernel_fn>;
  const DeviceKind kind = ref_device().kind;
  for (const char* op : {"causal_attention", "causal_attention_backward", "paged_attention"})
    for (DType t : {DType::f32, DType::f64})
      EXPECT_NE(kernel_registry().find_exact<Fn>(op, kind, t), nullptr) << op << " " << name(t);
  for (const char* op : {"linear_cross_entropy", "linear_cross_entropy_backward"})
    for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f64})
      EXPECT_NE(kernel_registry().find_exact<Fn>(op, kind, t), nullptr) << op << " " << name(t);
}

// Every op of this group, forward and backward, with the host fallback refused: each runs its
// device kernel (eager_grad goes the two-kernel way on a device without a fused kernel).
TEST_F(AttentionOps, NoHostFallbackForAttentionAndLoss) {
  devtest::FallbackPolicy guard(KernelRegistry::Fallback::error);
  for (DType t : {DType::f32, DType::f64}) {
    expect_matches_oracle(std::string("refused fallback causal ") + name(t), causal_case(t),
                          causal_segments);
    expect_matches_oracle(std::string("refused fallback paged ") + name(t), paged_case(t, false),
                          paged);
  }
  for (auto [x, w] : head_dtypes()) {
    const std::string what = std::string("refused fallback cross entropy ") + name(w);
    expect_matches_oracle(what, cross_entropy_case(x, w), cross_entropy);
    expect_matches_oracle(what + " eager", cross_entropy_case(x, w), cross_entropy_eager);
  }
}

}  // namespace
}  // namespace unillm
