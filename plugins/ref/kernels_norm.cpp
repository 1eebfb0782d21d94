// Reference-device kernels of the per-row and element-wise training ops: rms_norm, rope, swiglu
// and softmax (each with its backward), and the optimizer loops (adamw, sum_squares, scale).
// Written from the math in kernel_args.h and computed in double, except where the ABI fixes the
// rounding (rope's f32 angles, adamw's f32 update), so that the host gets the CPU's results.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernel_util.h"

namespace unillm_ref {
namespace {

double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

// ---- rms_norm ---------------------------------------------------------------------------------

// f32 x takes an f32, bf16 or f16 weight; f64 x only an f64 one.
bool rms_norm_dtypes(unillm_dtype x, unillm_dtype w) {
  return x == kF64 ? w == kF64 : x == kF32 && (w == kF32 || w == kBf16 || w == kF16);
}

// 1 / sqrt(mean(x²) + eps) over the dim elements of x from base.
double inv_rms(const void* x, unillm_dtype t, int64_t base, int64_t dim, float eps) {
  double ss = 0;
  for (int64_t c = 0; c < dim; ++c) {
    const double v = load(x, t, base + c);
    ss += v * v;
  }
  return 1.0 / std::sqrt(ss / static_cast<double>(dim) + static_cast<double>(eps));
}

void rms_norm_body(const unillm_rms_norm_args& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t base = r * a.dim;
    const double inv = inv_rms(a.x, a.x_dtype, base, a.dim, a.eps);
    for (int64_t c = 0; c < a.dim; ++c) {
      const double x = load(a.x, a.x_dtype, base + c);
      store(a.y, a.x_dtype, base + c, x * inv * load(a.w, a.w_dtype, c));
    }
  }
}

unillm_status rms_norm(unillm_stream s, const void* args, size_t size) {
  auto resolve = [](unillm_rms_norm_args& a, Resolver& r) {
    if (!rms_norm_dtypes(a.x_dtype, a.w_dtype)) r.fail("x and weight dtypes not supported");
    r.need(a.x, "x");
    r.need(a.w, "w");
    r.need(a.y, "y");
    const int64_t n = times(a.rows, a.dim);
    r.map(a.x, n, a.x_dtype);
    r.map(a.w, a.dim, a.w_dtype);
    r.map(a.y, n, a.x_dtype);
  };
  return launch<unillm_rms_norm_args>(s, args, size, "rms_norm", resolve, rms_norm_body);
}

// With r = 1/rms and g = dy per row: dx = r·g∘w − x·r³/dim·Σ(g∘w∘x); dw = Σ_rows g∘x·r.
void rms_norm_backward_body(const unillm_rms_norm_backward_args& a) {
  std::vector<double> dw(a.dw ? static_cast<size_t>(a.dim) : 0, 0.0);
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t base = r * a.dim;
    const double inv = inv_rms(a.x, a.x_dtype, base, a.dim, a.eps);
    double dot = 0;  // Σ g·w·x
    for (int64_t c = 0; c < a.dim; ++c)
      dot += load(a.dy, a.x_dtype, base + c) * load(a.w, a.w_dtype, c) *
             load(a.x, a.x_dtype, base + c);
    const double k = dot * inv * inv * inv / static_cast<double>(a.dim);
    for (int64_t c = 0; c < a.dim; ++c) {
      const double g = load(a.dy, a.x_dtype, base + c), x = load(a.x, a.x_dtype, base + c);
      if (a.dx) store(a.dx, a.x_dtype, base + c, inv * g * load(a.w, a.w_dtype, c) - x * k);
      if (a.dw) dw[static_cast<size_t>(c)] += g * x * inv;
    }
  }
  for (int64_t c = 0; a.dw && c < a.dim; ++c)
    store(a.dw, master_dtype(a.w_dtype), c, dw[static_cast<size_t>(c)]);
}

unillm_status rms_norm_backward(unillm_stream s, const void* args, size_t size) {
  auto resolve = [](unillm_rms_norm_backward_args& a, Resolver& r) {
    if (!rms_norm_dtypes(a.x_dtype, a.w_dtype)) r.fail("x and weight dtypes not supported");
    r.need(a.dy, "dy");
    r.need(a.x, "x");
    r.need(a.w, "w");
    const int64_t n = times(a.rows, a.dim);
    r.map(a.dy, n, a.x_dtype);
    r.map(a.x, n, a.x_dtype);
    r.map(a.w, a.dim, a.w_dtype);
    r.map(a.dx, n, a.x_dtype);                    // optional
    r.map(a.dw, a.dim, master_dtype(a.w_dtype));  // optional
  };
  return launch<unillm_rms_norm_backward_args>(s, args, size, "rms_norm_backward", resolve,
                                               rms_norm_backward_body);
}

// ---- rope -------------------------------------------------------------------------------------

// cos and sin of position p times each inverse frequency. f32 rounds the angle to f32 and takes
// cos/sin in f32, as HF (and so the CPU) does; the backward's negated positions then give exactly
// the inverse rotation, since cos and sin are even and odd in the f32 angle too.
void rope_angles(const unillm_rope_args& a, int32_t p, std::vector<double>& cs,
                 std::vector<double>& sn) {
  for (size_t j = 0; j < cs.size(); ++j) {
    if (a.dtype == kF32) {
      const float ang = static_cast<float>(p) * a.inv_freq[j];
      cs[j] = std::cos(ang);
      sn[j] = std::sin(ang);
    } else {
      const double ang = static_cast<double>(p) * static_cast<double>(a.inv_freq[j]);
      cs[j] = std::cos(ang);
      sn[j] = std::sin(ang);
    }
  }
}

void rope_body(const unillm_rope_args& a) {
  const int64_t h = a.rot_dim / 2;
  std::vector<double> cs(static_cast<size_t>(h)), sn(static_cast<size_t>(h));
  for (int64_t t = 0; t < a.n; ++t) {
    rope_angles(a, a.positions[t], cs, sn);
    for (int64_t head = 0; head < a.heads; ++head) {
      const int64_t base = (t * a.heads + head) * a.head_dim;
      for (int64_t j = 0; j < h; ++j) {
        const double x1 = load(a.x, a.dtype, base + j), x2 = load(a.x, a.dtype, base + j + h);
        const double c = cs[static_cast<size_t>(j)], sj = sn[static_cast<size_t>(j)];
        store(a.out, a.dtype, base + j, x1 * c - x2 * sj);
        store(a.out, a.dtype, base + j + h, x2 * c + x1 * sj);
      }
      for (int64_t j = a.rot_dim; j < a.head_dim; ++j)  // past rot_dim: copied
        store(a.out, a.dtype, base + j, load(a.x, a.dtype, base + j));
    }
  }
}

unillm_status rope(unillm_stream s, const void* args, size_t size) {
  auto resolve = [](unillm_rope_args& a, Resolver& r) {
    if (!is_f32_or_f64(a.dtype)) r.fail("dtype not supported (f32 or f64)");
    if (a.rot_dim <= 0 || a.rot_dim % 2 != 0 || a.rot_dim > a.head_dim)
      r.fail("rot_dim must be even and in 2 ..= head_dim");
    r.need(a.x, "x");
    r.need(a.out, "out");
    r.need(a.positions, "positions");
    r.need(a.inv_freq, "inv_freq");
    const int64_t n = times(times(a.n, a.heads), a.head_dim);
    r.map(a.x, n, a.dtype);
    r.map(a.out, n, a.dtype);
    r.map(a.positions, a.n, UNILLM_DTYPE_I32);
    r.map(a.inv_freq, a.rot_dim / 2, kF32);
  };
  return launch<unillm_rope_args>(s, args, size, "rope", resolve, rope_body);
}

// ---- swiglu -----------------------------------------------------------------------------------

void swiglu_body(const unillm_swiglu_args& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t j = 0; j < a.ffn; ++j) {
      const double g = load(a.gate_up, a.dtype, 2 * a.ffn * r + j);
      const double u = load(a.gate_up, a.dtype, 2 * a.ffn * r + a.ffn + j);
      store(a.out, a.dtype, a.ffn * r + j, g * sigmoid(g) * u);
    }
  }
}

unillm_status swiglu(unillm_stream s, const void* args, size_t size) {
  auto resolve = [](unillm_swiglu_args& a, Resolver& r) {
    if (!is_f32_or_f64(a.dtype)) r.fail("dtype not supported (f32 or f64)");
    r.need(a.gate_up, "gate_up");
    r.need(a.out, "out");
    const int64_t n = times(a.rows, a.ffn);
    r.map(a.gate_up, times(n, 2), a.dtype);
    r.map(a.out, n, a.dtype);
  };
  return launch<unillm_swiglu_args>(s, args, size, "swiglu", resolve, swiglu_body);
}

void swiglu_backward_body(const unillm_swiglu_backward_args& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t j = 0; j < a.ffn; ++j) {
      const int64_t gi = 2 * a.ffn * r + j, ui = gi + a.ffn;
      const double g = load(a.gate_up, a.dtype, gi), u = load(a.gate_up, a.dtype, ui);
      const double dy = load(a.dout, a.dtype, a.ffn * r + j), sg = sigmoid(g);
      store(a.dgate_up, a.dtype, gi, dy * u * sg * (1.0 + g * (1.0 - sg)));
      store(a.dgate_up, a.dtype, ui, dy * g * sg);
    }
  }
}

unillm_status swiglu_backward(unillm_stream s, const void* args, size_t size) {
  auto resolve = [](unillm_swiglu_backward_args& a, Resolver& r) {
    if (!is_f32_or_f64(a.dtype)) r.fail("dtype not supported (f32 or f64)");
    r.need(a.gate_up, "gate_up");
    r.need(a.dout, "dout");
    r.need(a.dgate_up, "dgate_up");
    const int64_t n = times(a.rows, a.ffn);
    r.map(a.gate_up, times(n, 2), a.dtype);
    r.map(a.dout, n, a.dtype);
    r.map(a.dgate_up, times(n, 2), a.dtype);
  };
  return launch<unillm_swiglu_backward_args>(s, args, size, "swiglu_backward", resolve,
                                             swiglu_backward_body);
}

// ---- softmax ----------------------------------------------------------------------------------

void softmax_body(const unillm_softmax_args& a) {
  std::vector<double> e(static_cast<size_t>(a.cols));
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t base = r * a.cols;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < a.cols; ++c) mx = std::fmax(mx, load(a.x, a.dtype, base + c));
    double sum = 0;
    for (int64_t c = 0; c < a.cols; ++c) {
      e[static_cast<size_t>(c)] = std::exp(load(a.x, a.dtype, base + c) - mx);
      sum += e[static_cast<size_t>(c)];
    }
    for (int64_t c = 0; c < a.cols; ++c)
      store(a.y, a.dtype, base + c, e[static_cast<size_t>(c)] / sum);
  }
}

unillm_status softmax(unillm_stream s, const void* args, size_t size) {
  auto resolve = [](unillm_softmax_args& a, Resolver& r) {
    if (!is_f32_or_f64(a.dtype)) r.fail("dtype not supported (f32 or f64)");
    r.need(a.x, "x");
    r.need(a.y, "y");
    const int64_t n = times(a.rows, a.cols);
    r.map(a.x, n, a.dtype);
    r.map(a.y, n, a.dtype);
  };
  return launch<unillm_softmax_args>(s, args, size, "softmax", resolve, softmax_body);
}

void softmax_backward_body(const unillm_softmax_backward_args& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t base = r * a.cols;
    double dot = 0;  // Σ dy·y
    for (int64_t c = 0; c < a.cols; ++c)
      dot += load(a.dy, a.dtype, base + c) * load(a.y, a.dtype, base + c);
    for (int64_t c = 0; c < a.cols; ++c)
      store(a.dx, a.dtype, base + c,
            load(a.y, a.dtype, base + c) * (load(a.dy, a.dtype, base + c) - dot));
  }
}

unillm_status softmax_backward(unillm_stream s, const void* args, size_t size) {
  auto resolve = [](unillm_softmax_backward_args& a, Resolver& r) {
    if (!is_f32_or_f64(a.dtype)) r.fail("dtype not supported (f32 or f64)");
    r.need(a.y, "y");
    r.need(a.dy, "dy");
    r.need(a.dx, "dx");
    const int64_t n = times(a.rows, a.cols);
    r.map(a.y, n, a.dtype);
    r.map(a.dy, n, a.dtype);
    r.map(a.dx, n, a.dtype);
  };
  return launch<unillm_softmax_backward_args>(s, args, size, "softmax_backward", resolve,
                                              softmax_backward_body);
}

// ---- optimizer loops (f32) --------------------------------------------------------------------

// The ABI fixes this update's f32 rounding step by step (torch.optim.AdamW's order), so that a
// parameter trained on the device stays bit-identical to one trained on the CPU; double here
// would drift by an ulp per step. ((1 − b2)·g)·g keeps the CPU's association.
void adamw_body(const unillm_adamw_args& a) {
  for (int64_t i = 0; i < a.n; ++i) {
    const float g = a.g[i];
    const float p = a.p[i] * a.decay;
    const float m = a.beta1 * a.m[i] + (1.0f - a.beta1) * g;
    const float v = a.beta2 * a.v[i] + (1.0f - a.beta2) * g * g;
    a.m[i] = m;
    a.v[i] = v;
    a.p[i] = p - a.step_size * m / (std::sqrt(v) / a.sqrt_bc2 + a.eps);
  }
}

unillm_status adamw(unillm_stream s, const void* args, size_t size) {
  auto resolve = [](unillm_adamw_args& a, Resolver& r) {
    r.need(a.p, "p");
    r.need(a.g, "g");
    r.need(a.m, "m");
    r.need(a.v, "v");
    r.map(a.p, a.n, kF32);
    r.map(a.g, a.n, kF32);
    r.map(a.m, a.n, kF32);
    r.map(a.v, a.n, kF32);
  };
  return launch<unillm_adamw_args>(s, args, size, "adamw", resolve, adamw_body);
}

int64_t chunks_of(const unillm_sum_squares_args& a) {
  return a.n == 0 ? 0 : (a.n - 1) / a.chunk + 1;
}

// One double partial per chunk, summed in index order (the host adds the partials in order).
void sum_squares_body(const unillm_sum_squares_args& a) {
  for (int64_t c = 0; c < chunks_of(a); ++c) {
    const int64_t end = std::min(a.n, (c + 1) * a.chunk);
    double s = 0;
    for (int64_t i = c * a.chunk; i < end; ++i) s += static_cast<double>(a.x[i]) * a.x[i];
    a.partials[c] = s;
  }
}

unillm_status sum_squares(unillm_stream s, const void* args, size_t size) {
  auto resolve = [](unillm_sum_squares_args& a, Resolver& r) {
    if (a.chunk <= 0 || a.n < 0) {
      r.fail("chunk must be positive and n not negative");
      return;
    }
    r.need(a.x, "x");
    r.need(a.partials, "partials");
    r.map(a.x, a.n, kF32);
    r.map(a.partials, chunks_of(a), kF64);
  };
  return launch<unillm_sum_squares_args>(s, args, size, "sum_squares", resolve, sum_squares_body);
}

void scale_body(const unillm_scale_args& a) {
  for (int64_t i = 0; i < a.n; ++i) a.x[i] *= a.factor;
}

unillm_status scale(unillm_stream s, const void* args, size_t size) {
  auto resolve = [](unillm_scale_args& a, Resolver& r) {
    r.need(a.x, "x");
    r.map(a.x, a.n, kF32);
  };
  return launch<unillm_scale_args>(s, args, size, "scale", resolve, scale_body);
}

}  // namespace

void add_norm_kernels(std::vector<unillm_kernel>& table) {
  for (unillm_dtype w : {kF32, kBf16, kF16, kF64}) {  // keyed by the weight's dtype
    table.push_back(entry("rms_norm", w, &rms_norm));
    table.push_back(entry("rms_norm_backward", w, &rms_norm_backward));
  }
  for (unillm_dtype t : {kF32, kF64}) {
    table.push_back(entry("rope", t, &rope));
    table.push_back(entry("swiglu", t, &swiglu));
    table.push_back(entry("swiglu_backward", t, &swiglu_backward));
    table.push_back(entry("softmax", t, &softmax));
    table.push_back(entry("softmax_backward", t, &softmax_backward));
  }
  table.push_back(entry("adamw", kF32, &adamw));
  table.push_back(entry("sum_squares", kF32, &sum_squares));
  table.push_back(entry("scale", kF32, &scale));
}

}  // namespace unillm_ref
