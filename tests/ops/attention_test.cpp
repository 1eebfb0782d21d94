// paged_attention against a naive oracle that rebuilds each sequence's K/V from the block table:
// several sequences of different lengths, blocks scattered in the cache, block sizes that do not
// divide the lengths, GQA ratios 1/2/4, decode and chunked prefill in one batch; kv_cache_write.
#include "ops/attention.h"

#include <algorithm>
#include <numeric>

#include "op_test_util.h"

namespace unillm {
namespace {

struct Layout {
  std::vector<int32_t> q_len, kv_len;
  int64_t heads, kv_heads, head_dim, block_size;
};

struct Problem {
  Tensor q, k, v;
  ops::AttentionBatch batch;
  std::vector<int32_t> table, q_start;
  int64_t max_blocks;
};

// Blocks are handed out in a shuffled order so sequences are not contiguous in the cache; unused
// block-table entries are -1 (never read).
Problem make_problem(const Layout& l, DType t, uint64_t seed) {
  Problem p;
  const int64_t s = l.q_len.size();
  std::vector<int64_t> nblk(s);
  for (int64_t i = 0; i < s; ++i) nblk[i] = (l.kv_len[i] + l.block_size - 1) / l.block_size;
  p.max_blocks = *std::max_element(nblk.begin(), nblk.end()) + 1;
  const int64_t nb = std::accumulate(nblk.begin(), nblk.end(), int64_t{0}) + 2;
  std::vector<int32_t> ids(nb);
  std::iota(ids.begin(), ids.end(), 0);
  Rng rng(seed);
  for (int64_t i = nb - 1; i > 0; --i) std::swap(ids[i], ids[rng.next_u64() % (i + 1)]);
  p.table.assign(s * p.max_blocks, -1);
  int64_t next = 0;
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = 0; j < nblk[i]; ++j) p.table[i * p.max_blocks + j] = ids[next++];
  p.q_start = {0};
  for (int32_t q : l.q_len) p.q_start.push_back(p.q_start.back() + q);
  p.q = optest::randn({p.q_start.back(), l.heads, l.head_dim}, t, seed + 1);
  p.k = optest::randn({nb, l.block_size, l.kv_heads, l.head_dim}, t, seed + 2);
  p.v = optest::randn({nb, l.block_size, l.kv_heads, l.head_dim}, t, seed + 3);
  p.batch = {Tensor::from_ints(p.table, {s, p.max_blocks}), Tensor::from_ints(p.q_start, {s + 1}),
             Tensor::from_ints(l.kv_len, {s})};
  return p;
}

std::vector<double> oracle(const Layout& l, const Problem& p, double scale) {
  std::vector<double> q = optest::doubles(p.q), k = optest::doubles(p.k), v = optest::doubles(p.v);
  const int64_t H = l.heads, Hkv = l.kv_heads, D = l.head_dim, BS = l.block_size;
  std::vector<double> out(q.size());
  for (size_t s = 0; s < l.q_len.size(); ++s) {
    // This sequence's keys/values in position order: [kv_len, Hkv, D].
    std::vector<double> ks, vs;
    for (int64_t pos = 0; pos < l.kv_len[s]; ++pos) {
      int64_t blk = p.table[s * p.max_blocks + pos / BS], slot = pos % BS;
      int64_t o = (blk * BS + slot) * Hkv * D;
      ks.insert(ks.end(), k.begin() + o, k.begin() + o + Hkv * D);
      vs.insert(vs.end(), v.begin() + o, v.begin() + o + Hkv * D);
    }
    for (int64_t j = 0; j < l.q_len[s]; ++j) {
      const int64_t row = p.q_start[s] + j, last = l.kv_len[s] - l.q_len[s] + j;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h * Hkv / H;
        std::vector<double> w(last + 1);
        for (int64_t pos = 0; pos <= last; ++pos) {
          double d = 0;
          for (int64_t i = 0; i < D; ++i) d += q[(row * H + h) * D + i] * ks[(pos * Hkv + g) * D + i];
          w[pos] = d * scale;
        }
        double mx = *std::max_element(w.begin(), w.end()), sum = 0;
        for (double& e : w) sum += (e = std::exp(e - mx));
        for (int64_t i = 0; i < D; ++i) {
          double acc = 0;
          for (int64_t pos = 0; pos <= last; ++pos) acc += w[pos] * vs[(pos * Hkv + g) * D + i];
          out[(row * H + h) * D + i] = acc / sum;
        }
      }
    }
  }
  return out;
}

class AttentionTest : public optest::OpTest {
 protected:
  void check(const Layout& l, DType t, uint64_t seed) {
    Problem p = make_problem(l, t, seed);
    const float scale = 1.0f / std::sqrt(static_cast<float>(l.head_dim));
    std::vector<double> want = oracle(l, p, scale);
    const double tol = t == DType::f32 ? 2e-5 : 1e-12;
    optest::expect_near(ops::paged_attention(p.q, p.k, p.v, p.batch, scale), want, tol, tol);
    Tensor ref = Tensor::empty(p.q.shape(), t);
    ops::AttentionArgs a{p.q.raw_data(), p.k.raw_data(), p.v.raw_data(),
                         p.batch.block_table.data<int32_t>(), p.batch.q_start.data<int32_t>(),
                         p.batch.kv_len.data<int32_t>(), ref.raw_data(),
                         static_cast<int64_t>(l.q_len.size()), p.max_blocks, l.block_size,
                         l.heads, l.kv_heads, l.head_dim, scale, t, p.q.size(0), p.k.size(0), t};
    ops::attention_reference(a);
    optest::expect_near(ref, want, tol, tol);
  }
};

TEST_F(AttentionTest, DecodeSeveralSequencesAllGqaRatios) {
  for (DType t : {DType::f32, DType::f64})
    for (int64_t group : {1, 2, 4}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " group=" << group);
      check({{1, 1, 1, 1}, {1, 17, 40, 16}, 2 * group, 2, 64, 16}, t, 10 + group);
    }
}

TEST_F(AttentionTest, ChunkedPrefillWithPrefixAndOddSizes) {
  for (DType t : {DType::f32, DType::f64})
    for (int64_t group : {1, 2, 4}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " group=" << group);
      // prefill with a cached prefix, a fresh prefill, a decode row and an idle sequence
      check({{5, 7, 1, 0, 13}, {12, 7, 30, 9, 13}, 3 * group, 3, 20, 5}, t, 20 + group);
      check({{9}, {9}, 4 * group, 4, 37, 3}, t, 30 + group);
    }
}

// The AVX-512 kernel unrolls its dot products by head_dim / 16 (1 to 8 registers) and takes
// its generic loop otherwise: every unroll, one odd size and a GQA group, decode and prefill.
TEST_F(AttentionTest, EveryHeadDimTheWideKernelUnrolls) {
  for (int64_t d : {16, 32, 48, 80, 96, 112, 128, 24})
    for (int64_t group : {1, 4}) {
      SCOPED_TRACE(::testing::Message() << "head_dim=" << d << " group=" << group);
      check({{1, 6, 1}, {19, 6, 37}, 2 * group, 2, d, 8}, DType::f32, 50 + d + group);
    }
}

// --kv-cache-dtype bf16 / f16: f32 queries over a 16-bit cache. The oracle reads the same
// rounded cache values (in double), so only the kernel's f32 arithmetic differs.
TEST_F(AttentionTest, HalfPrecisionCachesUnderF32Queries) {
  for (DType cache : {DType::bf16, DType::f16})
    for (int64_t group : {1, 4}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(cache) << " group=" << group);
      const Layout l{{5, 1, 1, 0, 13}, {12, 40, 30, 9, 13}, 2 * group, 2, 64, 16};
      Problem p = make_problem(l, DType::f32, 40 + group);
      p.k = p.k.to(cache);
      p.v = p.v.to(cache);
      const float scale = 0.125f;
      Problem rounded = p;  // the oracle's f64 view of the rounded values
      rounded.k = p.k.to(DType::f32);
      rounded.v = p.v.to(DType::f32);
      const std::vector<double> want = oracle(l, rounded, scale);
      optest::expect_near(ops::paged_attention(p.q, p.k, p.v, p.batch, scale), want, 2e-5, 2e-5);
      // Only f32 queries take a 16-bit cache.
      EXPECT_THROW(ops::paged_attention(p.q.to(DType::f64), p.k, p.v, p.batch, scale), DTypeError);
    }
}

TEST_F(AttentionTest, ContiguousCacheIsTheOneBlockCase) {
  check({{6, 6}, {6, 10}, 4, 2, 16, 10}, DType::f32, 40);
  check({{33}, {33}, 8, 2, 128, 64}, DType::f32, 41);  // larger head dim, one 64-slot block
}

// ops::attention with a KV view: new k/v go into the cache; the rows of fresh prefills (nothing
// cached before) take the tiled training kernel with one segment per sequence, the others the
// paged kernel, in one batch. Against the oracle over what the cache then holds.
TEST_F(AttentionTest, TheOneOpWritesTheCacheAndTakesEitherKernel) {
  const Layout layouts[] = {
      {{5, 17, 30}, {5, 17, 30}, 4, 2, 20, 8},        // fresh prefills only: the tiled kernel
      {{5, 17, 1, 30}, {5, 17, 1, 30}, 4, 2, 20, 8},  // plus a one-token prompt: split
      {{5, 17, 1, 30}, {5, 20, 9, 30}, 4, 2, 20, 8},  // a cached prefix and a decode: split
      {{3, 1}, {7, 9}, 4, 2, 20, 8},                  // nothing fresh: the paged kernel
  };
  for (const Layout& l : layouts) {
    SCOPED_TRACE(::testing::Message() << "first kv_len " << l.kv_len[0] << ", " << l.q_len.size() << " sequences");
    Problem p = make_problem(l, DType::f32, 70);
    const int64_t n = p.q.size(0);
    Tensor k_new = optest::randn({n, l.kv_heads, l.head_dim}, DType::f32, 71);
    Tensor v_new = optest::randn({n, l.kv_heads, l.head_dim}, DType::f32, 72);
    std::vector<int32_t> slots;
    for (size_t s = 0; s < l.q_len.size(); ++s)
      for (int32_t j = 0; j < l.q_len[s]; ++j) {
        const int64_t pos = l.kv_len[s] - l.q_len[s] + j;
        slots.push_back(static_cast<int32_t>(p.table[s * p.max_blocks + pos / l.block_size] * l.block_size +
                                             pos % l.block_size));
      }
    ops::AttentionLayout layout;
    layout.k_cache = &p.k;
    layout.v_cache = &p.v;
    layout.slot_mapping = Tensor::from_ints(slots, {n});
    layout.batch = &p.batch;
    const float scale = 1.0f / std::sqrt(static_cast<float>(l.head_dim));
    Tensor out = ops::attention(p.q, k_new, v_new, layout, scale);
    optest::expect_near(out, oracle(l, p, scale), 2e-5, 2e-5);  // the cache holds the new rows now
  }
}

TEST_F(AttentionTest, BadLayoutsThrow) {
  Layout l{{2, 1}, {4, 3}, 4, 2, 8, 2};
  Problem p = make_problem(l, DType::f32, 50);
  Tensor q3 = optest::randn({3, 3, 8}, DType::f32, 1);  // 3 heads, 2 kv heads
  optest::expect_throw_with<ShapeError>(
      [&] { ops::paged_attention(q3, p.k, p.v, p.batch, 1.0f); },
      "[paged_attention] q has 3 heads, not a multiple of the 2 kv heads");
  ops::AttentionBatch bad = p.batch;
  bad.q_start = Tensor::from_ints({0, 2, 4}, {3});
  EXPECT_THROW(ops::paged_attention(p.q, p.k, p.v, bad, 1.0f), ShapeError);
  bad = p.batch;
  bad.kv_len = Tensor::from_ints({4, 0}, {2});  // q_len 1 > kv_len 0
  EXPECT_THROW(ops::paged_attention(p.q, p.k, p.v, bad, 1.0f), ShapeError);
  bad = p.batch;
  std::vector<int32_t> table = p.table;
  table[0] = 99;
  bad.block_table = Tensor::from_ints(table, {2, p.max_blocks});
  optest::expect_throw_with<ShapeError>([&] { ops::paged_attention(p.q, p.k, p.v, bad, 1.0f); },
                                        "block_table[0][0] = 99");
  EXPECT_THROW(ops::paged_attention(p.q, p.k.to(DType::f64), p.v, p.batch, 1.0f), DTypeError);
}

TEST_F(AttentionTest, KvCacheWriteFillsSlots) {
  Tensor cache = Tensor::zeros({3, 4, 2, 5}, DType::f32);  // 12 slots
  Tensor kv = optest::randn({4, 2, 5}, DType::f32, 60);
  ops::kv_cache_write(kv, cache, Tensor::from_ints({11, 0, -1, 5}, {4}));
  std::vector<double> c = optest::doubles(cache), k = optest::doubles(kv), want(c.size(), 0.0);
  const int32_t slots[] = {11, 0, -1, 5};
  for (int i = 0; i < 4; ++i)
    if (slots[i] >= 0) std::copy(k.begin() + i * 10, k.begin() + i * 10 + 10, want.begin() + slots[i] * 10);
  optest::expect_near(cache, want, 0, 0);
  optest::expect_throw_with<ShapeError>(
      [&] { ops::kv_cache_write(kv, cache, Tensor::from_ints({0, 1, 2, 12}, {4})); },
      "slot_mapping[3] = 12 is outside the cache's 12 slots");
  EXPECT_THROW(ops::kv_cache_write(kv, cache, Tensor::from_ints({0, 1}, {2})), ShapeError);
  EXPECT_THROW(ops::kv_cache_write(optest::randn({4, 3, 5}, DType::f32, 1), cache,
                                   Tensor::from_ints({0, 1, 2, 3}, {4})),
               ShapeError);
}

// An f32 row into a 16-bit cache is rounded to nearest even, element by element as
// f32_to_f16 / f32_to_bf16 do (the CPU's vectorised kernel against the scalar conversions), rows
// whose length is not a multiple of the vector width included; values span f16's subnormals and
// overflow.
TEST_F(AttentionTest, KvCacheWriteRoundsIntoSixteenBitCaches) {
  const int64_t row = 2 * 37;
  Tensor kv = optest::randn({3, 2, 37}, DType::f32, 61);
  float* x = kv.data<float>();
  const float specials[] = {1e-6f, -3e-5f, 65519.0f, 70000.0f, -1e9f, 1.0f + 1.0f / 2048, 0.0f, -0.0f};
  for (size_t i = 0; i < sizeof specials / sizeof *specials; ++i) x[5 * i + 3] = specials[i];
  for (DType t : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor cache = Tensor::zeros({2, 4, 2, 37}, t);  // 8 slots
    ops::kv_cache_write(kv, cache, Tensor::from_ints({6, -1, 1}, {3}));
    const auto* c = static_cast<const uint16_t*>(cache.raw_data());
    const int slots[] = {6, -1, 1};
    for (int i = 0; i < 3; ++i) {
      if (slots[i] < 0) continue;
      for (int64_t j = 0; j < row; ++j) {
        const float v = x[i * row + j];
        ASSERT_EQ(c[slots[i] * row + j], t == DType::f16 ? f32_to_f16(v) : f32_to_bf16(v)) << "row " << i << " elt " << j;
      }
    }
    for (int64_t j = 0; j < row; ++j) EXPECT_EQ(c[0 * row + j], 0) << "slot 0 untouched";
  }
}

}  // namespace
}  // namespace unillm
