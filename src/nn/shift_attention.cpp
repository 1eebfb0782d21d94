// S²-Attn: the shifted groups' layout and the attention through it (see shift_attention.h).
#include "nn/shift_attention.h"

#include <algorithm>

#include "core/error.h"
#include "ops/causal_attention.h"
#include "ops/gather.h"
#include "ops/shape.h"

namespace unillm::nn {

std::shared_ptr<const ShiftedGroups> make_shifted_groups(int64_t rows, int64_t tokens, double ratio,
                                                         const Tensor& segment_ids,
                                                         const std::vector<int32_t>& lengths, Device device) {
  const auto group = static_cast<int64_t>(static_cast<double>(tokens) * ratio);  // Python's int()
  if (group < 1 || tokens % group != 0)
    UNILLM_THROW(ConfigError, "[nn] shift_attn: a batch of ", tokens, " tokens cannot be cut into groups of ",
                 group, " (", ratio, " of the length; LLaMA-Factory asserts the same)");
  if (!lengths.empty() && static_cast<int64_t>(lengths.size()) != rows)
    UNILLM_THROW(ShapeError, "[nn] shift_attn: ", lengths.size(), " row lengths for ", rows, " rows");
  auto g = std::make_shared<ShiftedGroups>();
  g->rows = rows;
  g->tokens = tokens;
  g->group = group;
  g->shift = (group + 1) / 2;
  const int64_t n = rows * tokens, s = g->shift;
  // What a token may attend besides its group: its packed sample (or the row), never padding.
  Tensor seg = segment_ids.defined() ? segment_ids.to(Device()).contiguous() : Tensor();
  std::vector<int32_t> base(static_cast<size_t>(n), 1);
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t t = 0; t < tokens; ++t) {
      int32_t& v = base[static_cast<size_t>(b * tokens + t)];
      if (seg.defined()) v = seg.data<int32_t>()[b * tokens + t];
      if (!lengths.empty() && t >= lengths[static_cast<size_t>(b)]) v = 0;
    }
  const int32_t kinds = *std::max_element(base.begin(), base.end()) + 1;
  std::vector<int32_t> order(static_cast<size_t>(2 * n)), inverse(static_cast<size_t>(2 * n)),
      ids(static_cast<size_t>(2 * n));
  for (int64_t j = 0; j < 2; ++j)
    for (int64_t b = 0; b < rows; ++b)
      for (int64_t slot = 0; slot < tokens; ++slot) {
        const int64_t t = j == 0 ? slot : (slot + s) % tokens;  // the token at this slot
        const int64_t r = j * n + b * tokens + slot;              // gathered row
        const int64_t src = 2 * (b * tokens + t) + j;             // its row in the [2N, ·] view
        order[static_cast<size_t>(r)] = static_cast<int32_t>(src);
        inverse[static_cast<size_t>(src)] = static_cast<int32_t>(r);
        ids[static_cast<size_t>(r)] =
            static_cast<int32_t>(slot / group) * kinds + base[static_cast<size_t>(b * tokens + t)];
      }
  g->order = Tensor::from_ints(order, {2 * n});
  g->inverse = Tensor::from_ints(inverse, {2 * n});
  g->segment_ids = Tensor::from_ints(ids, {2 * rows, tokens}).to(device);
  return g;
}

namespace {

// k [N, Hkv, D] → [N, H, D], query head h's kv head h / (H / Hkv) repeated into place.
Tensor repeat_kv(const Tensor& k, int64_t heads) {
  const int64_t n = k.size(0), hkv = k.size(1), d = k.size(2), rep = heads / hkv;
  std::vector<int32_t> idx(static_cast<size_t>(n * heads));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < heads; ++h) idx[static_cast<size_t>(t * heads + h)] = static_cast<int32_t>(t * hkv + h / rep);
  Tensor rows = ops::gather_rows(ops::reshape(k, {n * hkv, d}), Tensor::from_ints(idx, {n * heads}));
  return ops::reshape(rows, {n, heads, d});
}

}  // namespace

Tensor shifted_group_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const ShiftedGroups& g,
                               float scale) {
  const int64_t n = q_in.size(0), h = q_in.size(1), d = q_in.size(2);
  int64_t hkv = k_in.size(1);
  if (n != g.rows * g.tokens)
    UNILLM_THROW(ShapeError, "[nn] shift_attn: ", n, " query rows for ", g.rows, " × ", g.tokens, " tokens");
  if (h % 2 != 0)
    UNILLM_THROW(ConfigError, "[nn] shift_attn needs an even number of attention heads (it shifts half of them), "
                 "not ", h);
  Tensor k = k_in, v = v_in;
  const int64_t rep = h / hkv;
  if (hkv % 2 != 0 || (h / 2) % rep != 0) {  // the halves would share a kv head
    k = repeat_kv(k, h);
    v = repeat_kv(v, h);
    hkv = h;
  }
  auto regroup = [&](const Tensor& x, int64_t heads) {  // [N, heads, D] → [2B, T, heads/2, D]
    Tensor halves = ops::gather_rows(ops::reshape(x, {2 * n, heads / 2 * d}), g.order);
    return ops::reshape(halves, {2 * g.rows, g.tokens, heads / 2, d});
  };
  Tensor o = ops::causal_attention(regroup(q_in, h), regroup(k, hkv), regroup(v, hkv), g.segment_ids, scale);
  Tensor back = ops::gather_rows(ops::reshape(o, {2 * n, h / 2 * d}), g.inverse);
  return ops::reshape(back, {n, h, d});
}

Tensor shifted_group_attention_part(const Tensor& q, const Tensor& k_in, const Tensor& v_in, const ShiftedGroups& g,
                                    float scale, int64_t first, int64_t total) {
  const int64_t n = q.size(0), h = q.size(1), d = q.size(2);
  if (first == 0 && h == total) return shifted_group_attention(q, k_in, v_in, g, scale);
  if (total % 2 != 0)
    UNILLM_THROW(ConfigError, "[nn] shift_attn needs an even number of attention heads (it shifts half of them), "
                 "not ", total);
  if (n != g.rows * g.tokens || first < 0 || first + h > total)
    UNILLM_THROW(ShapeError, "[nn] shift_attn: heads [", first, ", ", first + h, ") of ", total, " for ", n,
                 " query rows of ", g.rows, " × ", g.tokens, " tokens");
  Tensor k = k_in, v = v_in;
  if (k.size(1) != h) {  // one key/value head per query head, as the rows below take them
    k = repeat_kv(k, h);
    v = repeat_kv(v, h);
  }
  const int64_t rows = g.rows, t = g.tokens;
  const Tensor order_t = g.order.to(Device()).contiguous();
  const int32_t* order = order_t.data<int32_t>();
  const Tensor inverse_t = g.inverse.to(Device()).contiguous();
  const int32_t* inverse = inverse_t.data<int32_t>();
  const Tensor seg_t = g.segment_ids.to(Device()).contiguous();
  const int32_t* seg = seg_t.data<int32_t>();
  // Head j of the block is row block j of [h · B, T]: its tokens in its half's order (the [2N]
  // order's half-0 rows come first, row 2m + half = token m), its half's segment ids.
  std::vector<int32_t> in(static_cast<size_t>(h * n)), back(static_cast<size_t>(n * h)),
      ids(static_cast<size_t>(h * rows * t));
  for (int64_t j = 0; j < h; ++j) {
    const int64_t half = first + j >= total / 2 ? 1 : 0;
    for (int64_t r = 0; r < n; ++r) {
      const int32_t src = order[half * n + r];
      if (src % 2 != half) UNILLM_THROW(ShapeError, "[nn] shift_attn: the groups' order mixes the halves");
      in[static_cast<size_t>(j * n + r)] = static_cast<int32_t>(src / 2 * h + j);
    }
    for (int64_t m = 0; m < n; ++m)
      back[static_cast<size_t>(m * h + j)] = static_cast<int32_t>(j * n + inverse[2 * m + half] - half * n);
    std::copy_n(seg + half * rows * t, rows * t, ids.begin() + j * rows * t);
  }
  const Tensor in_t = Tensor::from_ints(in, {h * n});
  auto lay = [&](const Tensor& x) {  // [N, h, D] → [h · B, T, 1, D]
    return ops::reshape(ops::gather_rows(ops::reshape(x, {n * h, d}), in_t), {h * rows, t, 1, d});
  };
  Tensor o = ops::causal_attention(lay(q), lay(k), lay(v), Tensor::from_ints(ids, {h * rows, t}).to(q.device()), scale);
  Tensor out = ops::gather_rows(ops::reshape(o, {h * n, d}), Tensor::from_ints(back, {n * h}));
  return ops::reshape(out, {n, h, d});
}

}  // namespace unillm::nn
