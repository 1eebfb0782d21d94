// Reference-device kernels of attention (the training causal attention with GQA and segment ids,
// the serving paged attention) and of the fused lm-head cross-entropy: naive per-row loops in
// double, written from the math in kernel_args.h. The backward kernels read the forward's lse
// (and out) as a real device's would, so a host that passes them wrongly fails the tests.
#include <algorithm>
#include <limits>

#include "kernel_util.h"

namespace unillm_ref {
namespace {

constexpr int32_t kIgnoreIndex = -100;

// ---- causal_attention(_backward) -----------------------------------------------------------

// What the forward and the backward share: the inputs, the sizes and the mask. A query row is
// r = (b·T + t)·H + h; its vector starts at r·D.
struct Causal {
  const void* q;       // [B, T, H, D]
  const void* k;       // [B, T, Hkv, D]
  const void* v;       // [B, T, Hkv, D]
  const int32_t* seg;  // [B, T] or null
  int64_t B, T, H, Hkv, D;
  double scale;
  unillm_dtype dt;

  int64_t kv_off(int64_t b, int64_t j, int64_t h) const {
    return ((b * T + j) * Hkv + h / (H / Hkv)) * D;
  }
  bool sees(int64_t b, int64_t t, int64_t j) const {
    return j <= t && (!seg || seg[b * T + j] == seg[b * T + t]);
  }
  double score(int64_t r, int64_t j) const {  // scale · q_r · k_j (k of r's batch and kv head)
    const int64_t b = r / (T * H), h = r % H, ko = kv_off(b, j, h);
    double dot = 0;
    for (int64_t i = 0; i < D; ++i) dot += load(q, dt, r * D + i) * load(k, dt, ko + i);
    return dot * scale;
  }
};

template <class A>
Causal causal_of(const A& a) {
  return Causal{a.q,     a.k,        a.v,        a.segment_ids, a.batch, a.tokens,
                a.heads, a.kv_heads, a.head_dim, a.scale,       a.dtype};
}

// Checks the dtype and the head grouping, then maps the inputs both directions read.
template <class A>
void resolve_causal_inputs(A& a, Resolver& r) {
  if (!is_f32_or_f64(a.dtype)) return r.fail("dtype must be f32 or f64");
  if (a.batch < 0 || a.tokens < 0 || a.head_dim < 0 || a.heads < 0 || a.kv_heads <= 0 ||
      a.heads % a.kv_heads != 0)
    return r.fail("bad sizes (heads must be a multiple of kv_heads > 0)");
  if (!a.q || !a.k || !a.v) return r.fail("q, k and v must not be null");
  const int64_t bt = a.batch * a.tokens;
  r.map(a.q, bt * a.heads * a.head_dim, a.dtype);
  r.map(a.k, bt * a.kv_heads * a.head_dim, a.dtype);
  r.map(a.v, bt * a.kv_heads * a.head_dim, a.dtype);
  r.map(a.segment_ids, bt, UNILLM_DTYPE_I32);
}

void causal_forward(const unillm_causal_attention_args& a) {
  const Causal c = causal_of(a);
  std::vector<double> p, acc(static_cast<size_t>(c.D));
  for (int64_t r = 0; r < c.B * c.T * c.H; ++r) {
    const int64_t b = r / (c.T * c.H), t = (r / c.H) % c.T, h = r % c.H;
    // p[j] = exp(score_j − max) over the keys row r sees (0 elsewhere).
    p.assign(static_cast<size_t>(t + 1), 0.0);
    double mx = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t j = 0; j <= t; ++j)
      if (c.sees(b, t, j)) mx = std::max(mx, p[j] = c.score(r, j));
    for (int64_t j = 0; j <= t; ++j)
      if (c.sees(b, t, j)) sum += (p[j] = std::exp(p[j] - mx));
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = 0; j <= t; ++j) {
      if (!c.sees(b, t, j)) continue;
      const int64_t vo = c.kv_off(b, j, h);
      for (int64_t i = 0; i < c.D; ++i) acc[i] += p[j] * load(c.v, c.dt, vo + i);
    }
    for (int64_t i = 0; i < c.D; ++i) store(a.out, c.dt, r * c.D + i, acc[i] / sum);
    // The row always sees itself, so sum >= 1.
    if (a.lse) store(a.lse, c.dt, r, mx + std::log(sum));
  }
}

unillm_status causal_attention(unillm_stream s, const void* args, size_t size) {
  using A = unillm_causal_attention_args;
  return launch<A>(
      s, args, size, "causal_attention",
      [](A& a, Resolver& r) {
        resolve_causal_inputs(a, r);
        if (!a.out) r.fail("out must not be null");
        const int64_t rows = a.batch * a.tokens * a.heads;
        r.map(a.out, rows * a.head_dim, a.dtype);
        r.map(a.lse, rows, a.dtype);
      },
      causal_forward);
}

struct CausalGrads {
  std::vector<double> dq, dk, dv;  // [B, T, H, D], [B, T, Hkv, D] ×2 (empty: not wanted)
};

// Row r's contribution (FlashAttention-2 style, from the saved lse and out): with
// p_j = exp(s_j − lse), dp_j = dO·v_j and Δ = dO·O: ds_j = p_j·(dp_j − Δ)·scale,
// dq += ds_j·k_j, dk_j += ds_j·q, dv_j += p_j·dO.
void causal_backward_row(const Causal& c, const unillm_causal_attention_backward_args& a, int64_t r,
                         CausalGrads& g) {
  const int64_t b = r / (c.T * c.H), t = (r / c.H) % c.T, h = r % c.H, d = c.D;
  std::vector<double> go(static_cast<size_t>(d)), qr(static_cast<size_t>(d));
  double delta = 0;
  for (int64_t i = 0; i < d; ++i) {
    go[i] = load(a.grad_out, c.dt, r * d + i);
    qr[i] = load(c.q, c.dt, r * d + i);
    delta += go[i] * load(a.out, c.dt, r * d + i);
  }
  const double lse = load(a.lse, c.dt, r);
  for (int64_t j = 0; j <= t; ++j) {
    if (!c.sees(b, t, j)) continue;
    const int64_t ko = c.kv_off(b, j, h);
    const double p = std::exp(c.score(r, j) - lse);
    double dp = 0;
    for (int64_t i = 0; i < d; ++i) dp += go[i] * load(c.v, c.dt, ko + i);
    const double ds = p * (dp - delta) * c.scale;
    for (int64_t i = 0; i < d; ++i) {
      if (!g.dq.empty()) g.dq[r * d + i] += ds * load(c.k, c.dt, ko + i);
      if (!g.dk.empty()) g.dk[ko + i] += ds * qr[i];
      if (!g.dv.empty()) g.dv[ko + i] += p * go[i];
    }
  }
}

void causal_backward(const unillm_causal_attention_backward_args& a) {
  const Causal c = causal_of(a);
  const int64_t rows = c.B * c.T * c.H;
  const size_t nq = static_cast<size_t>(rows * c.D),
               nkv = static_cast<size_t>(c.B * c.T * c.Hkv * c.D);
  CausalGrads g{std::vector<double>(a.grad_q ? nq : 0), std::vector<double>(a.grad_k ? nkv : 0),
                std::vector<double>(a.grad_v ? nkv : 0)};
  for (int64_t r = 0; r < rows; ++r) causal_backward_row(c, a, r, g);
  auto put = [&](void* dst, const std::vector<double>& src) {
    for (size_t i = 0; dst && i < src.size(); ++i)
      store(dst, c.dt, static_cast<int64_t>(i), src[i]);
  };
  put(a.grad_q, g.dq);
  put(a.grad_k, g.dk);
  put(a.grad_v, g.dv);
}

unillm_status causal_attention_backward(unillm_stream s, const void* args, size_t size) {
  using A = unillm_causal_attention_backward_args;
  return launch<A>(
      s, args, size, "causal_attention_backward",
      [](A& a, Resolver& r) {
        resolve_causal_inputs(a, r);
        if (!a.out || !a.lse || !a.grad_out) r.fail("out, lse and grad_out must not be null");
        const int64_t rows = a.batch * a.tokens * a.heads;
        const int64_t kv = a.batch * a.tokens * a.kv_heads * a.head_dim;
        r.map(a.out, rows * a.head_dim, a.dtype);
        r.map(a.lse, rows, a.dtype);
        r.map(a.grad_out, rows * a.head_dim, a.dtype);
        r.map(a.grad_q, rows * a.head_dim, a.dtype);
        r.map(a.grad_k, kv, a.dtype);
        r.map(a.grad_v, kv, a.dtype);
      },
      causal_backward);
}

// ---- paged_attention -------------------------------------------------------------------------

using PagedArgs = unillm_paged_attention_args;

// The metadata is written by queued copies, so the worker checks it once it is there: the layout,
// and that every query row and block it names lies inside num_rows and num_blocks (whose extents
// the calling thread mapped).
void check_paged_layout(const PagedArgs& a) {
  const int64_t ns = a.num_seqs, bs = a.block_size, mb = a.max_blocks;
  if (a.q_start[0] != 0 || a.q_start[ns] > a.num_rows)
    throw std::runtime_error("q_start must run from 0 to at most num_rows");
  for (int64_t s = 0; s < ns; ++s) {
    const int64_t q_len = a.q_start[s + 1] - a.q_start[s], kv = a.kv_len[s];
    if (q_len < 0 || q_len > kv || kv > mb * bs)
      throw std::runtime_error("sequence " + std::to_string(s) + ": bad q_len or kv_len");
    for (int64_t j = 0; j * bs < kv; ++j) {
      const int32_t blk = a.block_table[s * mb + j];
      if (blk < 0 || blk >= a.num_blocks)
        throw std::runtime_error("a used block-table entry is outside the cache's blocks");
    }
  }
}

// One query row and head: softmax over cache positions 0 ..= pos of sequence s.
void paged_row(const PagedArgs& a, int64_t s, int64_t row, int64_t pos, int64_t h) {
  const int64_t d = a.head_dim, bs = a.block_size, qo = (row * a.heads + h) * d;
  const int64_t g = h / (a.heads / a.kv_heads);
  auto kv_off = [&](int64_t p) {
    const int64_t blk = a.block_table[s * a.max_blocks + p / bs];
    return ((blk * bs + p % bs) * a.kv_heads + g) * d;
  };
  std::vector<double> w(static_cast<size_t>(pos + 1)), acc(static_cast<size_t>(d), 0.0);
  double mx = -std::numeric_limits<double>::infinity(), sum = 0;
  for (int64_t p = 0; p <= pos; ++p) {
    double dot = 0;
    for (int64_t i = 0; i < d; ++i)
      dot += load(a.q, a.dtype, qo + i) * load(a.k_cache, a.dtype, kv_off(p) + i);
    mx = std::max(mx, w[p] = dot * a.scale);
  }
  for (int64_t p = 0; p <= pos; ++p) {
    sum += (w[p] = std::exp(w[p] - mx));
    for (int64_t i = 0; i < d; ++i) acc[i] += w[p] * load(a.v_cache, a.dtype, kv_off(p) + i);
  }
  for (int64_t i = 0; i < d; ++i) store(a.out, a.dtype, qo + i, pos >= 0 ? acc[i] / sum : 0.0);
}

void paged_forward(const PagedArgs& a) {
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const int64_t q_len = a.q_start[s + 1] - a.q_start[s];
    for (int64_t j = 0; j < q_len; ++j)
      for (int64_t h = 0; h < a.heads; ++h)
        paged_row(a, s, a.q_start[s] + j, a.kv_len[s] - q_len + j, h);
  }
}

unillm_status paged_attention(unillm_stream s, const void* args, size_t size) {
  return launch<PagedArgs>(
      s, args, size, "paged_attention",
      [](PagedArgs& a, Resolver& r) {
        if (!is_f32_or_f64(a.dtype)) return r.fail("dtype must be f32 or f64");
        if (a.num_seqs < 0 || a.max_blocks < 0 || a.block_size <= 0 || a.heads < 0 ||
            a.head_dim < 0 || a.kv_heads <= 0 || a.heads % a.kv_heads != 0 || a.num_rows < 0 ||
            a.num_blocks < 0)
          return r.fail("bad sizes (heads must be a multiple of kv_heads > 0; block_size > 0)");
        if (!a.q || !a.k_cache || !a.v_cache || !a.out || !a.block_table || !a.q_start || !a.kv_len)
          return r.fail("a pointer is null");
        r.map(a.block_table, a.num_seqs * a.max_blocks, UNILLM_DTYPE_I32);
        r.map(a.q_start, a.num_seqs + 1, UNILLM_DTYPE_I32);
        r.map(a.kv_len, a.num_seqs, UNILLM_DTYPE_I32);
        const int64_t rows = a.num_rows * a.heads * a.head_dim;
        const int64_t cache = a.num_blocks * a.block_size * a.kv_heads * a.head_dim;
        r.map(a.q, rows, a.dtype);
        r.map(a.out, rows, a.dtype);
        r.map(a.k_cache, cache, a.dtype);
        r.map(a.v_cache, cache, a.dtype);
      },
      [](const PagedArgs& a) {
        check_paged_layout(a);
        paged_forward(a);
      });
}

// ---- linear_cross_entropy(_backward) -------------------------------------------------------

bool cross_entropy_dtypes_ok(unillm_dtype x, unillm_dtype w) {
  if (w == UNILLM_DTYPE_F64) return x == UNILLM_DTYPE_F64;
  return x == UNILLM_DTYPE_F32 &&
         (w == UNILLM_DTYPE_F32 || w == UNILLM_DTYPE_BF16 || w == UNILLM_DTYPE_F16);
}

// x [n, c] and the head w [v, c], with the labels.
struct Head {
  const void* x;
  const void* w;
  const int32_t* labels;
  int64_t n, c, v;
  unillm_dtype xt, wt;

  // The label of row i; one the host should have refused fails the stream, not the process.
  int32_t label(int64_t i) const {
    const int32_t l = labels[i];
    if (l != kIgnoreIndex && (l < 0 || l >= v))
      throw std::runtime_error("label " + std::to_string(l) + " at row " + std::to_string(i) +
                               " is outside [0, " + std::to_string(v) + ")");
    return l;
  }
  void logits(int64_t i, std::vector<double>& out) const {  // out[j] = x_i · w_j
    out.assign(static_cast<size_t>(v), 0.0);
    for (int64_t j = 0; j < v; ++j)
      for (int64_t p = 0; p < c; ++p) out[j] += load(x, xt, i * c + p) * load(w, wt, j * c + p);
  }
};

template <class A>
Head head_of(const A& a) {
  return Head{a.x, a.w, a.labels, a.n, a.c, a.v, a.x_dtype, a.w_dtype};
}

// Checks the dtype pair, then maps x, w and the labels.
template <class A>
void resolve_head(A& a, Resolver& r) {
  if (!cross_entropy_dtypes_ok(a.x_dtype, a.w_dtype))
    return r.fail("x must be f32 with an f32/bf16/f16 head, or f64 with an f64 head");
  if (!a.x || !a.w || !a.labels) return r.fail("x, w and labels must not be null");
  r.map(a.x, a.n * a.c, a.x_dtype);
  r.map(a.w, a.v * a.c, a.w_dtype);
  r.map(a.labels, a.n, UNILLM_DTYPE_I32);
}

void cross_entropy_forward(const unillm_linear_cross_entropy_args& a) {
  const Head hd = head_of(a);
  std::vector<double> z;  // [v] logits of one row
  for (int64_t i = 0; i < a.n; ++i) {
    const int32_t label = hd.label(i);
    double lse = 0, loss = 0;
    if (label != kIgnoreIndex) {
      hd.logits(i, z);
      const double mx = *std::max_element(z.begin(), z.end());
      double sum = 0;
      for (double e : z) sum += std::exp(e - mx);
      lse = mx + std::log(sum);
      loss = lse - z[label];
    }
    if (a.lse) store(a.lse, a.x_dtype, i, lse);
    if (a.loss) a.loss[i] = loss;
  }
}

unillm_status linear_cross_entropy(unillm_stream s, const void* args, size_t size) {
  using A = unillm_linear_cross_entropy_args;
  return launch<A>(
      s, args, size, "linear_cross_entropy",
      [](A& a, Resolver& r) {
        resolve_head(a, r);
        r.map(a.lse, a.n, a.x_dtype);
        r.map(a.loss, a.n, UNILLM_DTYPE_F64);
      },
      cross_entropy_forward);
}

// dlogits = (softmax − onehot)·grad_scale per labelled row, from the forward's lse;
// dx_i = dlogits·w, dw += dlogitsᵀ·x_i (summed in double, stored once).
void cross_entropy_backward(const unillm_linear_cross_entropy_backward_args& a) {
  const Head hd = head_of(a);
  const size_t nw = static_cast<size_t>(a.v * a.c);
  std::vector<double> z, dx_row(static_cast<size_t>(a.c)), dw(a.dw ? nw : 0);
  for (int64_t i = 0; i < a.n; ++i) {
    const int32_t label = hd.label(i);
    std::fill(dx_row.begin(), dx_row.end(), 0.0);
    if (label != kIgnoreIndex) {
      hd.logits(i, z);
      const double lse = load(a.lse, a.x_dtype, i);
      for (double& e : z) e = std::exp(e - lse) * a.grad_scale;
      z[label] -= a.grad_scale;  // now dlogits
      for (int64_t j = 0; j < a.v; ++j)
        for (int64_t p = 0; p < a.c; ++p) {
          if (a.dx) dx_row[p] += z[j] * load(a.w, a.w_dtype, j * a.c + p);
          if (a.dw) dw[j * a.c + p] += z[j] * load(a.x, a.x_dtype, i * a.c + p);
        }
    }
    for (int64_t p = 0; a.dx && p < a.c; ++p) store(a.dx, a.x_dtype, i * a.c + p, dx_row[p]);
  }
  for (size_t e = 0; e < dw.size(); ++e)
    store(a.dw, master_dtype(a.w_dtype), static_cast<int64_t>(e), dw[e]);
}

unillm_status linear_cross_entropy_backward(unillm_stream s, const void* args, size_t size) {
  using A = unillm_linear_cross_entropy_backward_args;
  return launch<A>(
      s, args, size, "linear_cross_entropy_backward",
      [](A& a, Resolver& r) {
        resolve_head(a, r);
        if (!a.lse) r.fail("lse must not be null");
        r.map(a.lse, a.n, a.x_dtype);
        r.map(a.dx, a.n * a.c, a.x_dtype);
        r.map(a.dw, a.v * a.c, master_dtype(a.w_dtype));
      },
      cross_entropy_backward);
}

}  // namespace

void add_attention_kernels(std::vector<unillm_kernel>& table) {
  for (unillm_dtype t : {UNILLM_DTYPE_F32, UNILLM_DTYPE_F64}) {
    table.push_back(entry("causal_attention", t, causal_attention));
    table.push_back(entry("causal_attention_backward", t, causal_attention_backward));
    table.push_back(entry("paged_attention", t, paged_attention));
  }
  // Keyed by the head's dtype: bf16/f16 heads go with f32 x.
  for (unillm_dtype t : {UNILLM_DTYPE_F32, UNILLM_DTYPE_BF16, UNILLM_DTYPE_F16, UNILLM_DTYPE_F64}) {
    table.push_back(entry("linear_cross_entropy", t, linear_cross_entropy));
    table.push_back(entry("linear_cross_entropy_backward", t, linear_cross_entropy_backward));
  }
}

}  // namespace unillm_ref
