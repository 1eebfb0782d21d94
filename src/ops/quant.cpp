// Quantising and dequantising weights (on the host: a load-time step), and linear_q's checks,
// dispatch (kernel key = the codes' dtype) and backward (dx through the dequantised W).
#include "ops/quant.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "core/parallel.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/linear.h"
#include "ops/lora_linear.h"
#include "ops/quant_4bit.h"
#include "ops/quant_codes.h"

namespace unillm::ops {
namespace quant_detail {

int code_of(float w, const GroupScale& g, QuantType t, bool symmetric) {
  if (t == QuantType::int8) {
    if (g.scale == 0) return 0;
    return static_cast<int>(std::clamp(std::nearbyint(w / g.scale), -127.0f, 127.0f));
  }
  if (symmetric) {
    if (g.scale == 0) return 8;
    return static_cast<int>(std::clamp(std::nearbyint(w / g.scale), -8.0f, 7.0f)) + 8;
  }
  if (g.scale == 0) return 0;
  return static_cast<int>(std::clamp(std::nearbyint((w - g.lo) / g.scale), 0.0f, 15.0f));
}

namespace {

double group_error(const float* w, int64_t len, const GroupScale& g, QuantType t, bool symmetric) {
  double e = 0;
  for (int64_t i = 0; i < len; ++i) {
    const double d = w[i] - value_of(code_of(w[i], g, t, symmetric), g.scale, g.lo, t, symmetric);
    e += d * d;
  }
  return e;
}

// int4: starting from the min/max scale, alternately round to the nearest codes and refit the
// scale (and low end) to those codes by least squares, keeping the lowest squared error. Each
// code stays the nearest one for its group's final scale; only the scale moves.
GroupScale refine_int4(const float* w, int64_t len, GroupScale g, bool symmetric) {
  GroupScale best = g;
  double best_err = group_error(w, len, g, QuantType::int4, symmetric);
  for (int it = 0; it < 20 && g.scale > 0; ++it) {
    double sc = 0, scc = 0, sw = 0, swc = 0;
    for (int64_t i = 0; i < len; ++i) {
      const double c = code_of(w[i], g, QuantType::int4, symmetric) - (symmetric ? 8 : 0);
      sc += c, scc += c * c, sw += w[i], swc += w[i] * c;
    }
    GroupScale next;
    if (symmetric) {
      if (scc == 0) break;
      next.scale = static_cast<float>(swc / scc);
    } else {
      const double det = len * scc - sc * sc;
      if (det <= 0) break;
      next.scale = static_cast<float>((len * swc - sc * sw) / det);
      next.lo = static_cast<float>((sw - next.scale * sc) / len);
    }
    if (!(next.scale > 0)) break;
    const double err = group_error(w, len, next, QuantType::int4, symmetric);
    if (!(err < best_err)) break;
    best = g = next;
    best_err = err;
  }
  return best;
}

}  // namespace

GroupScale group_scale(const float* w, int64_t len, QuantType t, bool symmetric) {
  float amax = 0, lo = w[0], hi = w[0];
  for (int64_t i = 0; i < len; ++i) {
    amax = std::max(amax, std::fabs(w[i]));
    lo = std::min(lo, w[i]);
    hi = std::max(hi, w[i]);
  }
  if (t == QuantType::int8) return {amax / 127.0f, 0};
  if (symmetric) return refine_int4(w, len, {amax / 7.0f, 0}, true);
  // A few clipped starting ranges (the extremes of a group often cost more than they bring):
  // each refined, the lowest squared error kept. (Measured on stories260K: this helps the
  // asymmetric codes, and made the symmetric ones worse in perplexity despite a lower error.)
  GroupScale best;
  double best_err = -1;
  for (float a : {0.0f, 0.05f, 0.1f})
    for (float b : {0.0f, 0.05f, 0.1f}) {
      const GroupScale g = refine_int4(w, len, {(hi - lo) * (1 - a - b) / 15.0f, lo + a * (hi - lo)}, false);
      const double err = group_error(w, len, g, QuantType::int4, false);
      if (best_err < 0 || err < best_err) best = g, best_err = err;
    }
  return best;
}

GroupScale stored_as(GroupScale g, DType dtype, const std::string& what) {
  if (dtype == DType::f32) return g;
  const float scale = f16_to_f32(f32_to_f16(g.scale)), lo = f16_to_f32(f32_to_f16(g.lo));
  if (!std::isfinite(scale) || !std::isfinite(lo))
    UNILLM_THROW(ConfigError, "[quant] ", what, ": a group's scale ", g.scale, " or minimum ", g.lo,
                 " does not fit in f16 (beyond 65504): quantise with --scale-dtype f32");
  return {scale, lo};
}

void store_scale(void* p, DType dtype, int64_t i, float v) {
  if (dtype == DType::f16) {
    static_cast<uint16_t*>(p)[i] = f32_to_f16(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

float value_of(int code, float scale, float lo, QuantType t, bool symmetric) {
  if (t == QuantType::int8) return scale * static_cast<float>(code);
  if (symmetric) return scale * static_cast<float>(code - 8);
  return scale * static_cast<float>(code) + lo;
}

}  // namespace quant_detail

namespace {

using quant_detail::code_of;
using quant_detail::group_scale;
using quant_detail::GroupScale;
using quant_detail::value_of;

constexpr const char* kOp = "linear_q";

DType code_dtype(QuantType t) { return t == QuantType::int8 ? DType::i8 : DType::u4x2; }

int code_at(const QuantizedWeight& q, const void* data, int64_t r, int64_t j) {
  if (q.type == QuantType::int8) return static_cast<const int8_t*>(data)[r * q.k + j];
  return unpack_u4(static_cast<const uint8_t*>(data) + r * ((q.k + 1) / 2), j);
}

void check_linear_q(const Tensor& x, const QuantizedWeight& w, const Tensor& bias) {
  check_defined(kOp, "x", x);
  check_dtype(kOp, "x", x, DType::f32);
  if (!w.defined()) UNILLM_THROW(ShapeError, "[linear_q] the quantised weight is empty");
  if (x.ndim() < 1 || x.size(-1) != w.k)
    UNILLM_THROW(ShapeError, "[linear_q] x has shape ", shape_str(x.shape()), ", expected [.., ", w.k, "]");
  check_same_device(kOp, x, w.data);
  if (!bias.defined()) return;
  check_same_device(kOp, x, bias);
  check_dtype(kOp, "bias", bias, DType::f32);
  if (bias.ndim() != 1 || bias.size(0) != w.n)
    UNILLM_THROW(ShapeError, "[linear_q] bias has shape ", shape_str(bias.shape()), ", expected [", w.n, "]");
}

// Rows [r0, r0 + rows) of q's W, dequantised on the host into out [rows, K].
void dequantize_rows(const QuantizedWeight& q, const Tensor& data, const Tensor& scales, const Tensor& mins,
                     int64_t r0, int64_t rows, float* out) {
  const int64_t G = q.groups();
  for (int64_t r = r0; r < r0 + rows; ++r)
    for (int64_t j = 0; j < q.k; ++j) {
      const int64_t g = j / q.group;
      out[(r - r0) * q.k + j] = value_of(
          code_at(q, data.raw_data(), r, j), static_cast<float>(load_scalar(scales.raw_data(), scales.dtype(), r * G + g)),
          mins.defined() ? static_cast<float>(load_scalar(mins.raw_data(), mins.dtype(), r * G + g)) : 0.0f, q.type,
          q.symmetric);
    }
}

// dx [M, K] = dy [M, N] · W, W dequantised a panel of ~8 MiB of rows at a time (QLoRA's 8-bit
// base: never a whole f32 copy), each panel's product accumulated by the strided GEMM.
void dx_through_panels(const QuantizedWeight& w, const Tensor& dy, Tensor& dx) {
  const int64_t m = dx.numel() / w.k, n = w.n, k = w.k;
  const int64_t panel = std::min(n, std::max<int64_t>(64, (int64_t{1} << 21) / k));
  const Tensor data = w.data.to(Device{}), scales = w.scales.to(Device{});
  const Tensor mins = w.mins.defined() ? w.mins.to(Device{}) : Tensor();
  Tensor host = Tensor::empty({panel, k}, DType::f32);
  for (int64_t n0 = 0; n0 < n; n0 += panel) {
    const int64_t rows = std::min(panel, n - n0);
    dequantize_rows(w, data, scales, mins, n0, rows, host.data<float>());
    const Tensor wp = host.to(dy.device());
    LoraGemmArgs g{static_cast<const float*>(dy.raw_data()) + n0, wp.raw_data(), dx.raw_data(), m, k, rows,
                   n, k, k, false, false, 1.0, n0 == 0 ? 0.0 : 1.0, DType::f32};
    KernelCall<LoraGemmArgs>("lora_gemm", dx.device(), DType::f32, g)
        .in(dy, &g.a).in(wp, &g.b).inout(dx, &g.c).run(lora_gemm_reference);
  }
}

// dx = dy · W with W dequantised by panels (frozen: no dW), db = Σ_rows dy.
class LinearQNode : public autograd::Node {
 public:
  LinearQNode(const QuantizedWeight& w, Shape x_shape, bool has_bias)
      : w_(w), x_shape_(std::move(x_shape)), has_bias_(has_bias) {}
  std::string name() const override { return "LinearQNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const int64_t k = w_.k, m = shape_numel(x_shape_) / (k > 0 ? k : 1);
    Tensor dy = g[0].contiguous();
    Tensor dx, db;
    if (needs_input_grad(0)) dx = Tensor::empty(x_shape_, DType::f32, dy.device());
    if (has_bias_ && needs_input_grad(1)) db = Tensor::empty({w_.n}, DType::f32, dy.device());
    if (m * k == 0 || w_.n == 0) {
      for (Tensor* t : {&dx, &db})
        if (t->defined()) t->fill(0.0);
    } else {
      if (dx.defined()) dx_through_panels(w_, dy, dx);
      if (db.defined()) {
        LinearBackwardArgs a{dy.raw_data(), nullptr, nullptr, nullptr, nullptr, db.raw_data(), m, k, w_.n,
                             DType::f32, DType::f32};
        KernelCall<LinearBackwardArgs>("linear_backward", dy.device(), DType::f32, a)
            .in(dy, &a.dy).out(db, &a.db).run(linear_backward_reference);
      }
    }
    std::vector<Tensor> out{dx};
    if (has_bias_) out.push_back(db);
    return out;
  }
  void release_saved() override { w_ = QuantizedWeight(); }

 private:
  QuantizedWeight w_;
  Shape x_shape_;
  bool has_bias_;
};

}  // namespace

namespace {
std::atomic<bool> g_int8_activations{true};
}  // namespace

bool linear_q_int8_activations() { return g_int8_activations.load(std::memory_order_relaxed); }
void set_linear_q_int8_activations(bool on) { g_int8_activations.store(on, std::memory_order_relaxed); }

QuantType quant_type_from_name(const std::string& name) {
  if (name == "weight_only_int8" || name == "int8") return QuantType::int8;
  if (name == "weight_only_int4" || name == "int4") return QuantType::int4;
  UNILLM_THROW(ConfigError, "[quant] unknown quant_type '", name, "' (expected weight_only_int8 or weight_only_int4)");
}

const char* quant_type_name(QuantType t) {
  if (is_bnb_4bit(t)) return t == QuantType::nf4 ? "nf4" : "fp4";
  return t == QuantType::int8 ? "weight_only_int8" : "weight_only_int4";
}

size_t QuantizedWeight::bytes() const {
  return (data.defined() ? data.nbytes() : 0) + (scales.defined() ? scales.nbytes() : 0) +
         (mins.defined() ? mins.nbytes() : 0) +
         (absmax_codes.defined() ? absmax_codes.nbytes() + sizeof(absmax_offset) : 0);
}

void QuantizedWeight::check(const std::string& what) const {
  if (is_bnb_4bit(type)) return check_4bit(*this, what);
  const int64_t cols = type == QuantType::int8 ? k : (k + 1) / 2;
  if (n <= 0 || k <= 0 || group <= 0 || (type == QuantType::int8 && group != k))
    UNILLM_THROW(ShapeError, "[quant] ", what, ": bad quantised shape n=", n, " k=", k, " group=", group);
  if (!data.defined() || data.dtype() != code_dtype(type) || data.shape() != Shape{n, cols})
    UNILLM_THROW(ShapeError, "[quant] ", what, ": codes have ",
                 data.defined() ? shape_str(data.shape()) + " " + dtype_name(data.dtype()) : std::string("nothing"),
                 ", expected [", n, ", ", cols, "] ", dtype_name(code_dtype(type)));
  const Shape gs{n, groups()};
  if (!scales.defined() || (scales.dtype() != DType::f32 && scales.dtype() != DType::f16) || scales.shape() != gs)
    UNILLM_THROW(ShapeError, "[quant] ", what, ": scales must be f32 or f16 ", shape_str(gs));
  const bool want_mins = type == QuantType::int4 && !symmetric;
  if (want_mins != mins.defined() || (want_mins && (mins.dtype() != scales.dtype() || mins.shape() != gs)))
    UNILLM_THROW(ShapeError, "[quant] ", what,
                 want_mins ? std::string(": mins must be ") + dtype_name(scales.dtype()) + " " + shape_str(gs) +
                                 " (the scales' dtype)"
                           : std::string(": a symmetric weight has no mins"));
}

DType scale_dtype_from_name(const std::string& name) {
  if (name == "f16" || name == "float16") return DType::f16;
  if (name == "f32" || name == "float32") return DType::f32;
  UNILLM_THROW(ConfigError, "[quant] the scale dtype must be f16 or f32, got '", name, "'");
}

QuantizedWeight quantize_weight(const Tensor& w_in, QuantType type, int64_t group, bool symmetric, DType scale_dtype,
                                const std::string& what) {
  check_defined("quantize_weight", "w", w_in);
  check_ndim("quantize_weight", "w", w_in, 2);
  if (!is_floating(w_in.dtype()) || w_in.dtype() == DType::f64)
    UNILLM_THROW(DTypeError, "[quantize_weight] w has dtype ", dtype_name(w_in.dtype()), ", expected f32, bf16 or f16");
  if (is_bnb_4bit(type)) return quantize_4bit(w_in, type, {group > 0 ? group : kBnbBlocksize, false});
  QuantizedWeight q;
  q.type = type;
  q.symmetric = type == QuantType::int8 || symmetric;
  q.n = w_in.size(0);
  q.k = w_in.size(1);
  q.group = type == QuantType::int8 ? q.k : group;
  if (q.group <= 0) UNILLM_THROW(ConfigError, "[quantize_weight] the group size must be positive, got ", group);
  if (scale_dtype != DType::f32 && scale_dtype != DType::f16)
    UNILLM_THROW(DTypeError, "[quantize_weight] scales are f32 or f16, not ", dtype_name(scale_dtype));
  const Device device = w_in.device();
  const Tensor w = w_in.to(Device{}).to(DType::f32).contiguous();
  const int64_t G = q.groups(), cols = type == QuantType::int8 ? q.k : (q.k + 1) / 2;
  Tensor data = Tensor::zeros({q.n, cols}, code_dtype(type));
  Tensor scales = Tensor::empty({q.n, G}, scale_dtype);
  Tensor mins = q.symmetric ? Tensor() : Tensor::empty({q.n, G}, scale_dtype);
  const float* src = w.data<float>();
  // Rows in parallel (each owns its bytes of the codes): the int4 scale search costs ~2 µs a group.
  parallel_for(q.n, 8, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      for (int64_t g = 0; g < G; ++g) {
        const int64_t k0 = g * q.group, len = std::min(q.group, q.k - k0);
        const float* row = src + r * q.k + k0;
        const GroupScale s = quant_detail::stored_as(group_scale(row, len, type, q.symmetric), scale_dtype, what);
        quant_detail::store_scale(scales.raw_data(), scale_dtype, r * G + g, s.scale);
        if (mins.defined()) quant_detail::store_scale(mins.raw_data(), scale_dtype, r * G + g, s.lo);
        for (int64_t j = 0; j < len; ++j)
          quant_detail::store_code(data.raw_data(), type, q.k, r, k0 + j, code_of(row[j], s, type, q.symmetric));
      }
  });
  q.data = data.to(device);
  q.scales = scales.to(device);
  if (mins.defined()) q.mins = mins.to(device);
  return q;
}

Tensor dequantize_weight(const QuantizedWeight& q) {
  if (is_bnb_4bit(q.type)) return dequantize_4bit(q);
  q.check("dequantize_weight");
  const Tensor data = q.data.to(Device{}), scales = q.scales.to(Device{});
  const Tensor mins = q.mins.defined() ? q.mins.to(Device{}) : Tensor();
  Tensor out = Tensor::empty({q.n, q.k}, DType::f32);
  dequantize_rows(q, data, scales, mins, 0, q.n, out.data<float>());
  return out.to(q.data.device());
}

Tensor linear_q(const Tensor& x_in, const QuantizedWeight& w, const Tensor& bias_in) {
  check_linear_q(x_in, w, bias_in);
  if (is_bnb_4bit(w.type)) return linear_4bit(x_in, w, bias_in);
  Shape out_shape = x_in.shape();
  out_shape.back() = w.n;
  Tensor x = x_in.contiguous();
  Tensor bias = bias_in.defined() ? bias_in.contiguous() : Tensor();
  const int64_t m = x.numel() / w.k;
  Tensor y = Tensor::empty(out_shape, DType::f32, x.device());
  if (y.numel() > 0) {
    QLinearArgs a{x.data<float>(), w.data.raw_data(), w.scales.raw_data(),
                  w.mins.defined() ? w.mins.raw_data() : nullptr,
                  bias.defined() ? bias.data<float>() : nullptr, y.data<float>(), m, w.k, w.n, w.group,
                  w.data.dtype(), linear_q_int8_activations() && !autograd::grad_enabled(), w.scales.dtype()};
    KernelCall<QLinearArgs>(kOp, w.data.device(), w.data.dtype(), a)
        .in(x, &a.x).in(w.data, &a.w).in(w.scales, &a.scales).in(w.mins, &a.mins).in(bias, &a.bias)
        .out(y, &a.y).run(linear_q_reference);
  }
  std::vector<Tensor> inputs{x_in};
  if (bias_in.defined()) inputs.push_back(bias_in);
  if (autograd::needs_grad(inputs)) {
    auto node = std::make_shared<LinearQNode>(w, x_in.shape(), bias_in.defined());
    autograd::record(node, inputs, {&y});
  }
  return y;
}

void linear_q_reference(const QLinearArgs& a) {
  const bool int8 = a.w_dtype == DType::i8;
  const int64_t G = (a.k + a.group - 1) / a.group, row_bytes = int8 ? a.k : (a.k + 1) / 2;
  for (int64_t i = 0; i < a.m; ++i)
    for (int64_t j = 0; j < a.n; ++j) {
      double s = a.bias ? a.bias[j] : 0.0;
      const auto* row = static_cast<const uint8_t*>(a.w) + j * row_bytes;
      for (int64_t p = 0; p < a.k; ++p) {
        const int64_t g = p / a.group;
        const auto scale = static_cast<float>(load_scalar(a.scales, a.scale_dtype, j * G + g));
        float w;
        if (int8) {
          w = scale * static_cast<float>(reinterpret_cast<const int8_t*>(row)[p]);
        } else {
          const int c = unpack_u4(row, p);
          w = a.mins ? scale * static_cast<float>(c) + static_cast<float>(load_scalar(a.mins, a.scale_dtype, j * G + g))
                     : scale * static_cast<float>(c - 8);
        }
        s += static_cast<double>(a.x[i * a.k + p]) * w;
      }
      a.y[i * a.n + j] = static_cast<float>(s);
    }
}

}  // namespace unillm::ops
