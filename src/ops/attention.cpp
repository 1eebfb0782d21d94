// paged_attention and kv_cache_write: checks of the paged layout (block table, query starts, kv
// lengths), dispatch (kernel key = q's dtype) and the per-query double-precision reference; and
// attention, the one entry the model calls (paged with a KV view, causal_attention without).
// Backward (a flash-style recompute from q, k, v and the row log-sum-exp) goes beside the forward.
#include "ops/attention.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/gather.h"
#include "ops/shape.h"
#include "ops/kernel_call.h"
#include "ops/plugin_args.h"

namespace unillm::ops {
namespace {

constexpr const char* kOp = "paged_attention";

void check_caches(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache) {
  check_defined(kOp, "q", q);
  check_f32_or_f64(kOp, "q", q);
  check_ndim(kOp, "q", q, 3);
  check_ndim(kOp, "k_cache", k_cache, 4);
  // A 16-bit cache under f32 queries (--kv-cache-dtype bf16/f16) is read by the CPU kernels,
  // which widen its rows as they load them; elsewhere the cache has the queries' dtype.
  const bool half_cache = q.dtype() == DType::f32 && q.device().is_cpu() &&
                          (k_cache.dtype() == DType::bf16 || k_cache.dtype() == DType::f16);
  check_dtype(kOp, "k_cache", k_cache, half_cache ? k_cache.dtype() : q.dtype());
  check_dtype(kOp, "v_cache", v_cache, k_cache.dtype());
  check_same_device(kOp, q, k_cache);
  check_same_device(kOp, q, v_cache);
  if (v_cache.shape() != k_cache.shape())
    UNILLM_THROW(ShapeError, "[paged_attention] v_cache has shape ", shape_str(v_cache.shape()),
                 ", expected k_cache's ", shape_str(k_cache.shape()));
  const int64_t heads = q.size(1), kv_heads = k_cache.size(2);
  if (k_cache.size(3) != q.size(2))
    UNILLM_THROW(ShapeError, "[paged_attention] k_cache has head dim ", k_cache.size(3),
                 ", expected ", q.size(2), " (q's)");
  if (kv_heads == 0 || heads % kv_heads != 0)
    UNILLM_THROW(ShapeError, "[paged_attention] q has ", heads, " heads, not a multiple of the ",
                 kv_heads, " kv heads");
}

void check_batch(const AttentionBatch& b, int64_t n_rows, int64_t num_blocks, int64_t block_size) {
  check_defined(kOp, "block_table", b.block_table);
  check_dtype(kOp, "block_table", b.block_table, DType::i32);
  check_dtype(kOp, "q_start", b.q_start, DType::i32);
  check_dtype(kOp, "kv_len", b.kv_len, DType::i32);
  check_ndim(kOp, "block_table", b.block_table, 2);
  const int64_t s = b.block_table.size(0), mb = b.block_table.size(1);
  if (b.q_start.numel() != s + 1 || b.kv_len.numel() != s)
    UNILLM_THROW(ShapeError, "[paged_attention] q_start has ", b.q_start.numel(),
                 " elements and kv_len ", b.kv_len.numel(), ", expected ", s + 1, " and ", s);
  if (!b.block_table.device().is_cpu()) return;  // device metadata is trusted
  const int32_t* qs = b.q_start.data<int32_t>();
  const int32_t* kl = b.kv_len.data<int32_t>();
  const int32_t* bt = b.block_table.data<int32_t>();
  if (qs[0] != 0 || qs[s] != n_rows)
    UNILLM_THROW(ShapeError, "[paged_attention] q_start runs from ", qs[0], " to ", qs[s],
                 ", expected 0 to ", n_rows, " (q's rows)");
  for (int64_t i = 0; i < s; ++i) {
    const int64_t q_len = qs[i + 1] - qs[i];
    if (q_len < 0 || q_len > kl[i] || kl[i] > mb * block_size)
      UNILLM_THROW(ShapeError, "[paged_attention] sequence ", i, " has ", q_len,
                   " query rows and kv_len ", kl[i], ", expected 0 <= q_len <= kv_len <= ",
                   mb * block_size);
    for (int64_t j = 0; j * block_size < kl[i]; ++j)
      if (bt[i * mb + j] < 0 || bt[i * mb + j] >= num_blocks)
        UNILLM_THROW(ShapeError, "[paged_attention] block_table[", i, "][", j, "] = ",
                     bt[i * mb + j], " is outside [0, ", num_blocks, ")");
  }
}

Tensor attention_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                         const AttentionBatch& batch, float scale) {
  check_caches(q_in, k_in, v_in);
  check_batch(batch, q_in.size(0), k_in.size(0), k_in.size(1));
  Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  // The metadata was checked on the host; the kernel reads it on q's device.
  Tensor bt = batch.block_table.contiguous().to(q.device());
  Tensor qs = batch.q_start.contiguous().to(q.device()), kl = batch.kv_len.contiguous().to(q.device());
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  if (out.numel() == 0) return out;
  AttentionArgs a{q.raw_data(), k.raw_data(), v.raw_data(), bt.data<int32_t>(),
                  qs.data<int32_t>(), kl.data<int32_t>(), out.raw_data(), bt.size(0), bt.size(1),
                  k.size(1), q.size(1), k.size(2), q.size(2), scale, q.dtype(), q.size(0), k.size(0),
                  k.dtype()};
  KernelCall<AttentionArgs>(kOp, q.device(), q.dtype(), a)
      .in(q, &a.q).in(k, &a.k_cache).in(v, &a.v_cache).in(bt, &a.block_table)
      .in(qs, &a.q_start).in(kl, &a.kv_len).out(out, &a.out)
      .run(attention_reference);
  return out;
}

}  // namespace

Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const AttentionBatch& batch, float scale) {
  return attention_forward(q, k_cache, v_cache, batch, scale);
}

namespace {
// The sequences of a KV view that start empty (kv_len == their query count: a fresh prefill,
// nothing cached before it) read nothing from the cache. Their rows go to the training kernel,
// the others' to the paged one. Only with host metadata (a device's is trusted, not read).
struct FreshSplit {
  std::vector<int32_t> fresh_rows, fresh_seg, other_rows;  // rows of q; segment id per fresh row
  std::vector<int32_t> other_seqs;                           // sequences left to the paged kernel
};

bool split_fresh(const AttentionBatch& b, int64_t n, FreshSplit& out) {
  if (!b.q_start.device().is_cpu() || !b.kv_len.device().is_cpu()) return false;
  const int64_t s = b.kv_len.numel();
  const int32_t* qs = b.q_start.data<int32_t>();
  const int32_t* kl = b.kv_len.data<int32_t>();
  if (s < 1 || qs[0] != 0 || qs[s] != n) return false;  // paged_attention reports the error
  for (int32_t i = 0; i < s; ++i) {
    const int32_t q_len = qs[i + 1] - qs[i];
    const bool fresh = kl[i] == q_len && q_len > 1;  // a single row gains nothing from tiles
    for (int32_t r = qs[i]; r < qs[i + 1]; ++r) {
      (fresh ? out.fresh_rows : out.other_rows).push_back(r);
      if (fresh) out.fresh_seg.push_back(i);
    }
    if (!fresh) out.other_seqs.push_back(i);
  }
  return !out.fresh_rows.empty();
}

// Causal attention over the fresh rows (one segment per sequence), tiled.
Tensor fresh_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                       const std::vector<int32_t>& seg, float scale) {
  const int64_t n = q.size(0), h = q.size(1), d = q.size(2), hkv = k.size(1);
  bool one = true;
  for (int32_t x : seg) one = one && x == seg.front();
  Tensor ids = one ? Tensor() : Tensor::from_ints(seg, {1, n}).to(q.device());
  Tensor o = causal_attention(reshape(q, {1, n, h, d}), reshape(k, {1, n, hkv, d}),
                              reshape(v, {1, n, hkv, d}), ids, scale);
  return reshape(o, {n, h, d});
}

// rows [m] of x [N, A, B] → [m, A, B]
Tensor take_rows(const Tensor& x, const std::vector<int32_t>& rows) {
  Tensor idx = Tensor::from_ints(rows, {static_cast<int64_t>(rows.size())});
  return reshape(gather_rows(reshape(x, {x.size(0), x.size(1) * x.size(2)}), idx),
                 {static_cast<int64_t>(rows.size()), x.size(1), x.size(2)});
}

// The batch of the sequences `seqs` only, their query rows renumbered from 0.
AttentionBatch sub_batch(const AttentionBatch& b, const std::vector<int32_t>& seqs) {
  const int64_t mb = b.block_table.size(1);
  const int32_t* bt = b.block_table.data<int32_t>();
  const int32_t* qs = b.q_start.data<int32_t>();
  const int32_t* kl = b.kv_len.data<int32_t>();
  std::vector<int32_t> table, q_start{0}, kv_len;
  for (int32_t i : seqs) {
    table.insert(table.end(), bt + i * mb, bt + (i + 1) * mb);
    q_start.push_back(q_start.back() + qs[i + 1] - qs[i]);
    kv_len.push_back(kl[i]);
  }
  const auto s = static_cast<int64_t>(seqs.size());
  return {Tensor::from_ints(table, {s, mb}).to(b.block_table.device()),
          Tensor::from_ints(q_start, {s + 1}), Tensor::from_ints(kv_len, {s})};
}
}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayout& l,
                 float scale, AttentionSaves* saves) {
  if (l.paged()) {
    UNILLM_CHECK(l.v_cache && l.batch, "[attention] a KV view needs both caches and a batch");
    kv_cache_write(k, *l.k_cache, l.slot_mapping);
    kv_cache_write(v, *l.v_cache, l.slot_mapping);
    // Fresh prefills read nothing from the cache: their attention is the training kernel's over
    // the new k and v, one segment per sequence. That kernel works in tiles of queries × keys
    // (small GEMMs); the paged one goes key by key, 3-4x slower at prompt lengths. A batch that
    // mixes them with decodes or continued prompts splits its rows between the two kernels.
    FreshSplit split;
    const int64_t n = q.size(0);
    if (split_fresh(*l.batch, n, split) && l.batch->block_table.device().is_cpu()) {
      if (split.other_rows.empty()) return fresh_attention(q, k, v, split.fresh_seg, scale);
      const Tensor of = fresh_attention(take_rows(q, split.fresh_rows), take_rows(k, split.fresh_rows),
                                        take_rows(v, split.fresh_rows), split.fresh_seg, scale);
      const Tensor oo = paged_attention(take_rows(q, split.other_rows), *l.k_cache, *l.v_cache,
                                        sub_batch(*l.batch, split.other_seqs), scale);
      const int64_t hd = q.size(1) * q.size(2);
      auto rows_of = [](const std::vector<int32_t>& r) {
        return Tensor::from_ints(r, {static_cast<int64_t>(r.size())});
      };
      Tensor out = add(scatter_add_rows(reshape(of, {of.size(0), hd}), rows_of(split.fresh_rows), n),
                       scatter_add_rows(reshape(oo, {oo.size(0), hd}), rows_of(split.other_rows), n));
      return reshape(out, {n, q.size(1), q.size(2)});
    }
    return paged_attention(q, *l.k_cache, *l.v_cache, *l.batch, scale);
  }
  const int64_t n = q.size(0), h = q.size(1), d = q.size(2), hkv = k.size(1);
  if (l.rows * l.tokens != n)
    UNILLM_THROW(ShapeError, "[attention] ", n, " query rows are not ", l.rows, " rows of ",
                 l.tokens, " tokens");
  Tensor q4 = reshape(q, {l.rows, l.tokens, h, d}), k4 = reshape(k, {l.rows, l.tokens, hkv, d});
  Tensor v4 = reshape(v, {l.rows, l.tokens, hkv, d}), o;
  if (saves && saves->mode == AttentionSaves::kReplay) {
    o = causal_attention_replay(q4, k4, v4, l.segment_ids, scale, saves->out, saves->lse);
  } else {
    o = causal_attention(q4, k4, v4, l.segment_ids, scale, saves ? &saves->lse : nullptr);
    if (saves) saves->out = o;
  }
  return reshape(o, {n, h, d});
}

void attention_reference(const AttentionArgs& a) {
  const int64_t group = a.heads / a.kv_heads, d = a.head_dim;
  std::vector<double> p;
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const int64_t q_len = a.q_start[s + 1] - a.q_start[s];
    for (int64_t j = 0; j < q_len; ++j) {
      const int64_t row = a.q_start[s] + j, pos = a.kv_len[s] - q_len + j;
      for (int64_t h = 0; h < a.heads; ++h) {
        const int64_t g = h / group, qo = (row * a.heads + h) * d;
        auto kv_off = [&](int64_t t) {
          int64_t blk = a.block_table[s * a.max_blocks + t / a.block_size];
          return ((blk * a.block_size + t % a.block_size) * a.kv_heads + g) * d;
        };
        p.assign(static_cast<size_t>(pos + 1), 0.0);
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t t = 0; t <= pos; ++t) {
          double dot = 0;
          for (int64_t i = 0; i < d; ++i)
            dot += load_scalar(a.q, a.dtype, qo + i) * load_scalar(a.k_cache, a.cache_dtype, kv_off(t) + i);
          p[t] = dot * a.scale;
          mx = std::max(mx, p[t]);
        }
        for (auto& e : p) sum += (e = std::exp(e - mx));
        for (int64_t i = 0; i < d; ++i) {
          double acc = 0;
          for (int64_t t = 0; t <= pos; ++t)
            acc += p[t] * load_scalar(a.v_cache, a.cache_dtype, kv_off(t) + i);
          store_scalar(a.out, a.dtype, qo + i, pos >= 0 ? acc / sum : 0.0);
        }
      }
    }
  }
}

void kv_cache_write(const Tensor& kv_in, Tensor& cache, const Tensor& slot_mapping) {
  const char* op = "kv_cache_write";
  check_defined(op, "kv", kv_in);
  check_defined(op, "cache", cache);
  check_ndim(op, "kv", kv_in, 3);
  check_ndim(op, "cache", cache, 4);
  check_dtype(op, "slot_mapping", slot_mapping, DType::i32);
  check_same_device(op, kv_in, cache);
  if (!slot_mapping.device().is_cpu())
    UNILLM_THROW(DeviceError, "[kv_cache_write] slot_mapping must be on the CPU");
  if (kv_in.size(1) != cache.size(2) || kv_in.size(2) != cache.size(3))
    UNILLM_THROW(ShapeError, "[kv_cache_write] kv has shape ", shape_str(kv_in.shape()),
                 ", expected [N, ", cache.size(2), ", ", cache.size(3), "] for cache ",
                 shape_str(cache.shape()));
  if (slot_mapping.numel() != kv_in.size(0))
    UNILLM_THROW(ShapeError, "[kv_cache_write] slot_mapping has ", slot_mapping.numel(),
                 " elements, expected ", kv_in.size(0));
  if (!cache.is_contiguous())
    UNILLM_THROW(ShapeError, "[kv_cache_write] cache must be contiguous (it is written in place)");
  if (kv_in.dtype() != cache.dtype() && !cache.device().is_cpu())
    UNILLM_THROW(DTypeError, "[kv_cache_write] kv has dtype ", dtype_name(kv_in.dtype()),
                 ", expected the cache's ", dtype_name(cache.dtype()));
  Tensor kv = kv_in.contiguous(), slots = slot_mapping.contiguous();
  const int64_t n_slots = cache.size(0) * cache.size(1), row = cache.size(2) * cache.size(3);
  const int32_t* sp = slots.data<int32_t>();
  for (int64_t i = 0; i < kv.size(0); ++i)
    if (sp[i] >= n_slots)
      UNILLM_THROW(ShapeError, "[kv_cache_write] slot_mapping[", i, "] = ", sp[i],
                   " is outside the cache's ", n_slots, " slots");
  if (kv.size(0) == 0) return;
  // The slots (checked here) go to the cache's device for the kernel.
  const Tensor dev_slots = slots.to(cache.device());
  KvCacheWriteArgs a{nullptr, nullptr, nullptr, kv.size(0), row, kv.dtype(), cache.dtype()};
  KernelCall<KvCacheWriteArgs>(op, cache.device(), cache.dtype(), a)
      .in(kv, &a.kv).inout(cache, &a.cache).in(dev_slots, &a.slots).run(kv_cache_write_reference);
}

void kv_cache_write_reference(const KvCacheWriteArgs& a) {
  const size_t src_es = dtype_size(a.kv_dtype), dst_es = dtype_size(a.dtype);
  auto* src = static_cast<const char*>(a.kv);
  auto* dst = static_cast<char*>(a.cache);
  for (int64_t i = 0; i < a.n; ++i) {
    if (a.slots[i] < 0) continue;  // padding slot
    const char* s = src + i * a.row * static_cast<int64_t>(src_es);
    char* d = dst + a.slots[i] * a.row * static_cast<int64_t>(dst_es);
    if (a.kv_dtype == a.dtype)
      std::memcpy(d, s, static_cast<size_t>(a.row) * src_es);
    else
      convert_elements(s, a.kv_dtype, d, a.dtype, static_cast<size_t>(a.row));
  }
}

}  // namespace unillm::ops
