// nn::shifted_group_attention (S²-Attn) against a naive f64 loop written from the definition:
// token t of head h sits at slot t (first half of the heads) or (t − S) mod T (second half); it
// attends the tokens of its row whose slot is in its group of G slots, not after its own, and of
// its packed segment (padding only padding). Packed rows with padding, GQA split into halves and
// MQA (kv heads repeated) — the layouts tests/reference/shift_attn_check.py (transformers) cannot
// give, packing in particular. Bad layouts are refused.
#include "nn/shift_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "support/expect.h"

namespace unillm::nn {
namespace {

Tensor randn(const Shape& shape, uint64_t seed) {
  Rng rng(seed);
  Tensor t = Tensor::empty(shape, DType::f64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = rng.normal();
  return t;
}

// out [N, H, D] by the definition above.
std::vector<double> naive(const Tensor& q, const Tensor& k, const Tensor& v, int64_t rows, int64_t tokens,
                          const std::vector<int32_t>& seg, const std::vector<int32_t>& lengths, float scale) {
  const int64_t h = q.size(1), hkv = k.size(1), d = q.size(2), group = tokens / 4, shift = (group + 1) / 2;
  std::vector<double> out(static_cast<size_t>(q.numel()));
  auto kind = [&](int64_t b, int64_t t) {  // 0 = padding
    if (t >= lengths[static_cast<size_t>(b)]) return 0;
    return seg.empty() ? 1 : seg[static_cast<size_t>(b * tokens + t)];
  };
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t head = 0; head < h; ++head) {
      const bool shifted = head >= h / 2;
      auto slot = [&](int64_t t) { return shifted ? (t - shift + tokens) % tokens : t; };
      const int64_t kvh = head / (h / hkv);
      for (int64_t t = 0; t < tokens; ++t) {
        std::vector<double> w(static_cast<size_t>(tokens), -INFINITY);
        double mx = -INFINITY;
        for (int64_t u = 0; u < tokens; ++u) {
          if (slot(u) / group != slot(t) / group || slot(u) > slot(t) || kind(b, u) != kind(b, t)) continue;
          double s = 0;
          for (int64_t i = 0; i < d; ++i)
            s += q.data<double>()[((b * tokens + t) * h + head) * d + i] * k.data<double>()[((b * tokens + u) * hkv + kvh) * d + i];
          w[static_cast<size_t>(u)] = s * scale;
          mx = std::max(mx, s * scale);
        }
        double z = 0;
        for (double& e : w) z += (e = std::exp(e - mx));
        for (int64_t i = 0; i < d; ++i) {
          double acc = 0;
          for (int64_t u = 0; u < tokens; ++u)
            acc += w[static_cast<size_t>(u)] / z * v.data<double>()[((b * tokens + u) * hkv + kvh) * d + i];
          out[static_cast<size_t>(((b * tokens + t) * h + head) * d + i)] = acc;
        }
      }
    }
  return out;
}

void expect_matches(int64_t heads, int64_t kv_heads, int64_t tokens, const std::vector<int32_t>& seg,
                    const std::vector<int32_t>& lengths) {
  testing::init_cpu();
  const int64_t rows = static_cast<int64_t>(lengths.size()), n = rows * tokens, d = 5;
  const Tensor q = randn({n, heads, d}, 1), k = randn({n, kv_heads, d}, 2), v = randn({n, kv_heads, d}, 3);
  const Tensor segs = seg.empty() ? Tensor() : Tensor::from_ints(seg, {rows, tokens});
  const float scale = 0.45f;
  const auto g = make_shifted_groups(rows, tokens, 0.25, segs, lengths, Device());
  EXPECT_EQ(g->group, tokens / 4);
  const Tensor out = shifted_group_attention(q, k, v, *g, scale).contiguous();
  const std::vector<double> want = naive(q, k, v, rows, tokens, seg, lengths, scale);
  ASSERT_EQ(out.numel(), static_cast<int64_t>(want.size()));
  double worst = 0;
  for (int64_t i = 0; i < out.numel(); ++i) worst = std::max(worst, std::fabs(out.data<double>()[i] - want[static_cast<size_t>(i)]));
  EXPECT_LT(worst, 1e-12) << heads << " heads, " << kv_heads << " kv heads, T " << tokens;
}

TEST(ShiftAttention, MatchesTheDefinitionOnPlainRows) {
  expect_matches(4, 2, 16, {}, {16, 16});  // GQA, kv heads split with their halves
  expect_matches(4, 4, 20, {}, {20});      // odd group (5): shift 3
}

TEST(ShiftAttention, MatchesTheDefinitionWithPaddingPackingAndRepeatedKv) {
  std::vector<int32_t> seg(2 * 24, 0);
  for (int t = 0; t < 24; ++t) {
    seg[static_cast<size_t>(t)] = t < 9 ? 1 : t < 20 ? 2 : 0;  // two packed samples, then padding
    seg[static_cast<size_t>(24 + t)] = t < 13 ? 1 : 0;
  }
  expect_matches(4, 2, 24, seg, {20, 13});
  expect_matches(4, 1, 24, {}, {24, 11});  // MQA: the kv head repeated to every query head
  expect_matches(6, 3, 24, {}, {24, 7});   // halves of 3 heads over kv pairs: repeated
}

// Heads [a, b) of x [N, H, D] as a tensor of their own.
Tensor heads_of(const Tensor& x, int64_t a, int64_t b) {
  const int64_t n = x.size(0), h = x.size(1), d = x.size(2);
  Tensor out = Tensor::empty({n, b - a, d}, DType::f64);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = a; j < b; ++j)
      for (int64_t i = 0; i < d; ++i)
        out.data<double>()[(t * (b - a) + j - a) * d + i] = x.data<double>()[(t * h + j) * d + i];
  return out;
}

// Tensor parallelism's blocks: the model's heads cut at `cuts`, each block attended alone with its
// offset (its key/value heads with it, as a rank holds them: kv heads split with their query
// heads) and put side by side give the definition over all heads, wherever the cuts fall relative
// to the shifted half.
void expect_blocks_match(int64_t heads, int64_t kv_heads, const std::vector<int64_t>& cuts,
                         const std::vector<int32_t>& lengths) {
  testing::init_cpu();
  const int64_t rows = static_cast<int64_t>(lengths.size()), tokens = 16, n = rows * tokens, d = 3;
  const Tensor q = randn({n, heads, d}, 4), k = randn({n, kv_heads, d}, 5), v = randn({n, kv_heads, d}, 6);
  const float scale = 0.6f;
  const auto g = make_shifted_groups(rows, tokens, 0.25, Tensor(), lengths, Device());
  const std::vector<double> want = naive(q, k, v, rows, tokens, {}, lengths, scale);
  const int64_t rep = heads / kv_heads;
  double worst = 0;
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const int64_t a = cuts[c], b = cuts[c + 1];
    ASSERT_EQ(a % rep, 0);  // a rank's query heads bring their whole kv heads
    const Tensor o = shifted_group_attention_part(heads_of(q, a, b), heads_of(k, a / rep, b / rep),
                                                  heads_of(v, a / rep, b / rep), *g, scale, a, heads)
                         .contiguous();
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = a; j < b; ++j)
        for (int64_t i = 0; i < d; ++i)
          worst = std::max(worst, std::fabs(o.data<double>()[(t * (b - a) + j - a) * d + i] -
                                            want[static_cast<size_t>((t * heads + j) * d + i)]));
  }
  EXPECT_LT(worst, 1e-12) << heads << " heads in " << cuts.size() - 1 << " blocks";
}

TEST(ShiftAttention, BlocksOfHeadsGiveTheWholeUnderTensorParallelism) {
  expect_blocks_match(8, 4, {0, 4, 8}, {16, 11});         // tp 2: one half each
  expect_blocks_match(8, 4, {0, 2, 4, 6, 8}, {16, 11});   // tp 4
  expect_blocks_match(6, 6, {0, 2, 4, 6}, {16, 9});       // tp 3: the middle block holds both halves
  expect_blocks_match(6, 3, {0, 2, 4, 6}, {16});          // with GQA
  expect_blocks_match(4, 2, {0, 4}, {16, 5});             // one block: the whole (the plain path)
}

TEST(ShiftAttention, RefusesLayoutsItCannotCut) {
  testing::init_cpu();
  EXPECT_THROW(make_shifted_groups(1, 3, 0.25, Tensor(), {}, Device()), ConfigError);   // group 0
  EXPECT_THROW(make_shifted_groups(1, 14, 0.25, Tensor(), {}, Device()), ConfigError);  // 14 % 3
  const auto g = make_shifted_groups(1, 8, 0.25, Tensor(), {}, Device());
  EXPECT_THROW(shifted_group_attention(randn({8, 3, 4}, 1), randn({8, 3, 4}, 2), randn({8, 3, 4}, 3), *g, 1.0f),
               ConfigError);  // odd heads
}

}  // namespace
}  // namespace unillm::nn
