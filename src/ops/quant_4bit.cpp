// bitsandbytes' nf4/fp4 (ops/quant_4bit.h): the tables, quantising on the host at load time,
// decoding the double-quantised block scales, and linear_q's forward/backward for these types
// (kernel "linear_4bit" keyed by u4x2; both directions through panels of dequantised rows).
#include "ops/quant_4bit.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "autograd/node.h"
#include "core/parallel.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/linear.h"

namespace unillm::ops {
namespace {

constexpr const char* kOp = "linear_4bit";

// bnb's NF4 table (QLoRA paper, appendix E; bitsandbytes get_4bit_type("nf4")).
constexpr std::array<float, 16> kNf4{
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};

std::array<float, 16> make_fp4() {
  // Code bits: sign, two exponent bits, one mantissa bit; bnb's values before normalising.
  const float raw[16] = {0, 0.0625f, 8, 12, 4, 6, 2, 3, -0.0f, -0.0625f, -8, -12, -4, -6, -2, -3};
  std::array<float, 16> t{};
  for (int i = 0; i < 16; ++i) t[i] = raw[i] / 12.0f;  // f32 division, as torch's data.div_(max)
  return t;
}

// torch.linspace(start, end, steps) in f32: the first half counts up from start, the second
// half down from end (torch's scalar CPU path; its vectorised path, which bnb's map may come
// from, lands some values 1 ulp away, so maps agree within 2 ulp: bnb_quant_check.py).
std::vector<float> linspace_f32(float start, float end, int64_t steps) {
  std::vector<float> v(static_cast<size_t>(steps));
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int64_t half = steps / 2;
  for (int64_t i = 0; i < steps; ++i)
    v[i] = i < half ? start + step * static_cast<float>(i) : end - step * static_cast<float>(steps - i - 1);
  return v;
}

// bnb's create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for exponent i
// (0..6), the midpoints of linspace(0.1, 1, 2^i + 1) times 10^(i − 6), both signs; plus 0 and 1.
std::array<float, 256> make_dynamic_map() {
  std::vector<float> data;
  for (int i = 0; i < 7; ++i) {
    const std::vector<float> b = linspace_f32(0.1f, 1.0f, (int64_t{1} << i) + 1);
    const auto scale = static_cast<float>(std::pow(10.0, -6 + i));
    for (size_t j = 0; j + 1 < b.size(); ++j) {
      const float mean = (b[j] + b[j + 1]) / 2.0f;
      data.push_back(scale * mean);
      data.push_back(-scale * mean);
    }
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  std::sort(data.begin(), data.end());
  std::array<float, 256> out{};
  std::copy(data.begin(), data.end(), out.begin());
  return out;
}

int64_t blocks_of(const QuantizedWeight& q) { return (q.n * q.k + q.group - 1) / q.group; }

// bnb's compress_statistics: the block absmaxes (f32 [B], host) minus their mean, quantised in
// blocks of 256 to the dynamic map; fills q.scales, q.absmax_codes (host) and q.absmax_offset.
void double_quantize(const Tensor& absmax, QuantizedWeight& q) {
  const float* am = absmax.data<float>();
  const int64_t nb = absmax.numel();
  double sum = 0;  // in double (torch sums f32 in a cascade: the offset may differ in its last bit)
  for (int64_t b = 0; b < nb; ++b) sum += am[b];
  const auto offset = static_cast<float>(sum / static_cast<double>(nb));
  const int64_t nb2 = (nb + kBnbAbsmaxBlocksize - 1) / kBnbAbsmaxBlocksize;
  Tensor codes2 = Tensor::empty({nb}, DType::i8);
  Tensor scales2 = Tensor::empty({nb2}, DType::f32);
  auto* c2 = static_cast<uint8_t*>(codes2.raw_data());
  const int zero2 = nearest_dynamic_code(0.0f);
  for (int64_t b2 = 0; b2 < nb2; ++b2) {
    const int64_t i0 = b2 * kBnbAbsmaxBlocksize, len = std::min(kBnbAbsmaxBlocksize, nb - i0);
    float a = 0;
    for (int64_t i = i0; i < i0 + len; ++i) a = std::max(a, std::fabs(am[i] - offset));
    scales2.data<float>()[b2] = a;
    const float inv = 1.0f / a;
    for (int64_t i = i0; i < i0 + len; ++i)
      c2[i] = static_cast<uint8_t>(a == 0 ? zero2 : nearest_dynamic_code(std::clamp((am[i] - offset) * inv, -1.0f, 1.0f)));
  }
  q.scales = scales2;
  q.absmax_codes = codes2;
  q.absmax_offset = offset;
}

}  // namespace

const std::array<float, 16>& levels_4bit(QuantType t) {
  static const std::array<float, 16> fp4 = make_fp4();
  UNILLM_CHECK(is_bnb_4bit(t), "[quant] levels_4bit of a type that is not nf4/fp4");
  return t == QuantType::nf4 ? kNf4 : fp4;
}

const std::array<float, 256>& dynamic_map() {
  static const std::array<float, 256> map = make_dynamic_map();
  return map;
}

int nearest_4bit_code(float s, QuantType t) {
  const std::array<float, 16>& lv = levels_4bit(t);
  int best = 0;
  float best_d = std::fabs(s - lv[0]);
  for (int c = 1; c < 16; ++c) {
    const float d = std::fabs(s - lv[c]);
    if (d < best_d) best = c, best_d = d;
  }
  return best;
}

int nearest_dynamic_code(float s) {
  const std::array<float, 256>& m = dynamic_map();
  // Ascending map: the nearest is one of the two neighbours of s's insertion point.
  const auto it = std::lower_bound(m.begin(), m.end(), s);
  int hi = static_cast<int>(it - m.begin());
  if (hi == 256) return 255;
  if (hi == 0) return 0;
  const int lo = hi - 1;
  // Walk down over equal values so ties resolve to the first index (torch.argmin).
  int first_hi = hi;
  while (first_hi > 0 && m[first_hi - 1] == m[hi]) --first_hi;
  return std::fabs(s - m[lo]) <= std::fabs(s - m[hi]) ? lo : first_hi;
}

QuantizedWeight quantize_4bit(const Tensor& w_in, QuantType t, const Quant4bitOptions& o) {
  check_defined("quantize_4bit", "w", w_in);
  check_ndim("quantize_4bit", "w", w_in, 2);
  if (!is_bnb_4bit(t)) UNILLM_THROW(ConfigError, "[quantize_4bit] the type must be nf4 or fp4");
  if (!is_floating(w_in.dtype()) || w_in.dtype() == DType::f64)
    UNILLM_THROW(DTypeError, "[quantize_4bit] w has dtype ", dtype_name(w_in.dtype()), ", expected f32, bf16 or f16");
  if (o.blocksize <= 0) UNILLM_THROW(ConfigError, "[quantize_4bit] the blocksize must be positive, got ", o.blocksize);
  QuantizedWeight q;
  q.type = t;
  q.n = w_in.size(0);
  q.k = w_in.size(1);
  q.group = o.blocksize;
  const Device device = w_in.device();
  const Tensor w = w_in.to(Device{}).to(DType::f32).contiguous();
  const int64_t total = q.n * q.k, nb = blocks_of(q);
  Tensor codes = Tensor::zeros({(total + 1) / 2}, DType::u4x2);
  Tensor absmax = Tensor::empty({nb}, DType::f32);
  const float* src = w.data<float>();
  auto* packed = static_cast<uint8_t*>(codes.raw_data());
  float* am = absmax.data<float>();
  const int zero_code = nearest_4bit_code(0.0f, t);
  // Blocks in parallel in pairs of bytes: a block of even length owns whole bytes; an odd
  // blocksize is done serially.
  const int64_t grain = o.blocksize % 2 == 0 ? 64 : nb;
  parallel_for(nb, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t i0 = b * o.blocksize, len = std::min(o.blocksize, total - i0);
      float a = 0;
      for (int64_t i = 0; i < len; ++i) a = std::max(a, std::fabs(src[i0 + i]));
      am[b] = a;
      const float inv = 1.0f / a;
      for (int64_t i = i0; i < i0 + len; ++i) {
        const int c = a == 0 ? zero_code : nearest_4bit_code(std::clamp(src[i] * inv, -1.0f, 1.0f), t);
        packed[i >> 1] |= static_cast<uint8_t>(c << ((i & 1) ? 0 : 4));
      }
    }
  });
  if (total % 2 == 1) packed[total >> 1] |= static_cast<uint8_t>(zero_code);  // bnb pads a 0.0 code
  q.data = codes.to(device);
  if (!o.double_quant) {
    q.scales = absmax.to(device);
    return q;
  }
  double_quantize(absmax, q);
  q.scales = q.scales.to(device);
  q.absmax_codes = q.absmax_codes.to(device);
  return q;
}

void check_4bit(const QuantizedWeight& q, const std::string& what) {
  if (q.n <= 0 || q.k <= 0 || q.group <= 0)
    UNILLM_THROW(ShapeError, "[quant] ", what, ": bad 4-bit shape n=", q.n, " k=", q.k, " blocksize=", q.group);
  const int64_t bytes = (q.n * q.k + 1) / 2, nb = blocks_of(q);
  if (!q.data.defined() || q.data.dtype() != DType::u4x2 || q.data.shape() != Shape{bytes})
    UNILLM_THROW(ShapeError, "[quant] ", what, ": ", quant_type_name(q.type), " codes must be u4x2 [", bytes, "]");
  if (q.mins.defined()) UNILLM_THROW(ShapeError, "[quant] ", what, ": a ", quant_type_name(q.type), " weight has no mins");
  const Shape scales = q.absmax_codes.defined() ? Shape{(nb + kBnbAbsmaxBlocksize - 1) / kBnbAbsmaxBlocksize} : Shape{nb};
  if (!q.scales.defined() || q.scales.dtype() != DType::f32 || q.scales.shape() != scales)
    UNILLM_THROW(ShapeError, "[quant] ", what, ": ", quant_type_name(q.type), " scales must be f32 ", shape_str(scales));
  if (q.absmax_codes.defined() && (q.absmax_codes.dtype() != DType::i8 || q.absmax_codes.shape() != Shape{nb}))
    UNILLM_THROW(ShapeError, "[quant] ", what, ": the double-quantised absmax codes must be i8 [", nb, "]");
}

Tensor block_absmax(const QuantizedWeight& q) {
  const Tensor scales = q.scales.to(Device{}).contiguous();
  if (!q.absmax_codes.defined()) return scales;
  const Tensor codes = q.absmax_codes.to(Device{}).contiguous();
  const int64_t nb = codes.numel();
  Tensor out = Tensor::empty({nb}, DType::f32);
  const auto* c = static_cast<const uint8_t*>(codes.raw_data());
  const std::array<float, 256>& map = dynamic_map();
  for (int64_t i = 0; i < nb; ++i)
    out.data<float>()[i] = map[c[i]] * scales.data<float>()[i / kBnbAbsmaxBlocksize] + q.absmax_offset;
  return out;
}

Tensor dequantize_4bit(const QuantizedWeight& q) {
  check_4bit(q, "dequantize_weight");
  const Tensor codes = q.data.to(Device{}).contiguous(), absmax = block_absmax(q);
  const auto* packed = static_cast<const uint8_t*>(codes.raw_data());
  const std::array<float, 16>& lv = levels_4bit(q.type);
  Tensor out = Tensor::empty({q.n, q.k}, DType::f32);
  float* o = out.data<float>();
  for (int64_t i = 0; i < q.n * q.k; ++i) o[i] = lv[code_4bit_at(packed, i)] * absmax.data<float>()[i / q.group];
  return out.to(q.data.device());
}

namespace {

// Runs the kernel in either direction: forward y = x · Wᵀ + b, or dx = dy · W.
void run_4bit(const QuantizedWeight& w, const Tensor& x, const Tensor& bias, const Tensor& y, bool transpose_w) {
  const Tensor absmax = block_absmax(w).to(w.data.device());
  const int64_t m = x.numel() / (transpose_w ? w.n : w.k);
  Linear4bitArgs a{x.data<float>(), static_cast<const uint8_t*>(w.data.raw_data()), absmax.data<float>(),
                   levels_4bit(w.type).data(), bias.defined() ? bias.data<float>() : nullptr, y.data<float>(),
                   m, w.k, w.n, w.group, transpose_w};
  KernelCall<Linear4bitArgs>(kOp, w.data.device(), DType::u4x2, a)
      .in(x, &a.x).in(w.data, &a.codes).in(absmax, &a.absmax).in(bias, &a.bias).out(y, &a.y)
      .run(linear_4bit_reference);
}

// dx = dy · W through the same dequantised panels (W frozen: no dW); db = Σ_rows dy.
class Linear4bitNode : public autograd::Node {
 public:
  Linear4bitNode(const QuantizedWeight& w, Shape x_shape, bool has_bias)
      : w_(w), x_shape_(std::move(x_shape)), has_bias_(has_bias) {}
  std::string name() const override { return "Linear4bitNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor dy = g[0].contiguous();  // [.., N]
    const int64_t m = dy.numel() / w_.n;
    Tensor dx, db;
    if (needs_input_grad(0)) {
      dx = Tensor::empty(x_shape_, DType::f32, dy.device());
      if (m > 0) run_4bit(w_, dy, Tensor(), dx, true);
    }
    if (has_bias_ && needs_input_grad(1)) {  // column sums of dy (linear_backward's db only)
      db = Tensor::zeros({w_.n}, DType::f32, dy.device());
      LinearBackwardArgs a{dy.raw_data(), nullptr, nullptr, nullptr, nullptr, db.raw_data(), m, w_.k, w_.n,
                           DType::f32, DType::f32};
      if (m > 0)
        KernelCall<LinearBackwardArgs>("linear_backward", dy.device(), DType::f32, a)
            .in(dy, &a.dy).out(db, &a.db).run(linear_backward_reference);
    }
    std::vector<Tensor> out{dx};
    if (has_bias_) out.push_back(db);
    return out;
  }
  void release_saved() override { w_ = QuantizedWeight(); }

 private:
  QuantizedWeight w_;  // shares the codes' storage: no copy
  Shape x_shape_;
  bool has_bias_;
};

}  // namespace

Tensor linear_4bit(const Tensor& x_in, const QuantizedWeight& w, const Tensor& bias_in) {
  Shape out_shape = x_in.shape();
  out_shape.back() = w.n;
  const Tensor x = x_in.contiguous();
  const Tensor bias = bias_in.defined() ? bias_in.contiguous() : Tensor();
  Tensor y = Tensor::empty(out_shape, DType::f32, x.device());
  if (y.numel() > 0) {
    if (w.k == 0) {
      y.fill(0.0);
    } else {
      run_4bit(w, x, bias, y, false);
    }
  }
  std::vector<Tensor> inputs{x_in};
  if (bias_in.defined()) inputs.push_back(bias_in);
  if (autograd::needs_grad(inputs)) {
    auto node = std::make_shared<Linear4bitNode>(w, x_in.shape(), bias_in.defined());
    autograd::record(node, inputs, {&y});
  }
  return y;
}

void linear_4bit_reference(const Linear4bitArgs& a) {
  const auto wv = [&](int64_t r, int64_t c) {
    const int64_t i = r * a.k + c;
    return static_cast<double>(a.levels[code_4bit_at(a.codes, i)] * a.absmax[i / a.blocksize]);
  };
  const int64_t out_cols = a.transpose_w ? a.k : a.n, inner = a.transpose_w ? a.n : a.k;
  for (int64_t i = 0; i < a.m; ++i)
    for (int64_t j = 0; j < out_cols; ++j) {
      double s = a.bias && !a.transpose_w ? a.bias[j] : 0.0;
      for (int64_t p = 0; p < inner; ++p)
        s += static_cast<double>(a.x[i * inner + p]) * (a.transpose_w ? wv(p, j) : wv(j, p));
      a.y[i * out_cols + j] = static_cast<float>(s);
    }
}

}  // namespace unillm::ops
