// rope_qkv: the fused path (no gradient needed, f32, a CPU tensor or a device kernel) or the
// composed split_last + reshape + rope, which also carry the backward.
#include "ops/rope_qkv.h"

#include <cmath>
#include <cstring>

#include "autograd/node.h"
#include "core/registry.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/rope.h"
#include "ops/shape.h"

namespace unillm::ops {
namespace {
constexpr const char* kOp = "rope_qkv";
}  // namespace

QkvHeads rope_qkv(const Tensor& qkv, const Tensor& positions, const std::vector<float>& inv_freq,
                  int64_t heads, int64_t kv_heads, int64_t head_dim) {
  check_defined(kOp, "qkv", qkv);
  check_defined(kOp, "positions", positions);
  check_ndim(kOp, "qkv", qkv, 2);
  const int64_t n = qkv.size(0), rot_dim = 2 * static_cast<int64_t>(inv_freq.size());
  if (qkv.size(1) != (heads + 2 * kv_heads) * head_dim)
    UNILLM_THROW(ShapeError, "[rope_qkv] qkv has ", qkv.size(1), " columns, expected (", heads, " + 2·", kv_heads,
                 ")·", head_dim, " = ", (heads + 2 * kv_heads) * head_dim);
  const bool fused = !autograd::needs_grad({qkv}) && qkv.dtype() == DType::f32 && positions.dtype() == DType::i32 &&
                     positions.numel() == n && rot_dim > 0 && rot_dim <= head_dim &&
                     (qkv.device().is_cpu() ||
                      kernel_registry().find_exact<RopeQkvKernel>(kOp, qkv.device().kind, DType::f32));
  if (!fused) {  // the composed ops check the rest and record the gradient
    auto parts = split_last(qkv, {heads * head_dim, kv_heads * head_dim, kv_heads * head_dim});
    return {rope(reshape(parts[0], {n, heads, head_dim}), positions, inv_freq),
            rope(reshape(parts[1], {n, kv_heads, head_dim}), positions, inv_freq),
            reshape(parts[2], {n, kv_heads, head_dim})};
  }
  const Device dev = qkv.device();
  Tensor x = qkv.contiguous(), pos = positions.contiguous().to(dev);
  QkvHeads r{Tensor::empty({n, heads, head_dim}, DType::f32, dev), Tensor::empty({n, kv_heads, head_dim}, DType::f32, dev),
             Tensor::empty({n, kv_heads, head_dim}, DType::f32, dev)};
  if (n == 0) return r;
  const Tensor freq = dev.is_cpu() ? Tensor() : Tensor::from_vector(inv_freq, {rot_dim / 2}).to(dev);
  RopeQkvArgs a{x.data<float>(), r.q.data<float>(), r.k.data<float>(), r.v.data<float>(), nullptr,
                freq.defined() ? nullptr : inv_freq.data(), n, heads, kv_heads, head_dim, rot_dim};
  KernelCall<RopeQkvArgs> call(kOp, dev, DType::f32, a);
  call.in(x, &a.qkv).out(r.q, &a.q).out(r.k, &a.k).out(r.v, &a.v).in(pos, &a.positions);
  if (freq.defined()) call.in(freq, &a.inv_freq);
  call.run(rope_qkv_reference);
  return r;
}

void rope_qkv_reference(const RopeQkvArgs& a) {
  const int64_t half = a.rot_dim / 2, d = a.head_dim, width = (a.heads + 2 * a.kv_heads) * d;
  for (int64_t t = 0; t < a.n; ++t) {
    const float* row = a.qkv + t * width;
    auto rotate = [&](const float* x, float* y) {
      for (int64_t i = 0; i < half; ++i) {
        const float ang = static_cast<float>(a.positions[t]) * a.inv_freq[i];
        const float c = std::cos(ang), s = std::sin(ang);
        y[i] = x[i] * c - x[i + half] * s;
        y[i + half] = x[i + half] * c + x[i] * s;
      }
      std::memcpy(y + a.rot_dim, x + a.rot_dim, static_cast<size_t>(d - a.rot_dim) * sizeof(float));
    };
    for (int64_t h = 0; h < a.heads; ++h) rotate(row + h * d, a.q + (t * a.heads + h) * d);
    for (int64_t h = 0; h < a.kv_heads; ++h) rotate(row + (a.heads + h) * d, a.k + (t * a.kv_heads + h) * d);
    std::memcpy(a.v + t * a.kv_heads * d, row + (a.heads + a.kv_heads) * d,
                static_cast<size_t>(a.kv_heads * d) * sizeof(float));
  }
}

}  // namespace unillm::ops
