// rope: HF's inverse frequencies (default, linear, llama3, yarn, dynamic) and the rotate_half
// rotation. For f32 the angle and its cos/sin are computed in f32 exactly as HF does
// (float(pos) * inv_freq, then cos/sin in f32); for f64 in double. Backward: RopeNode rotates
// dy by −angle (the forward kernel on negated positions).
#include "ops/rope.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/plugin_args.h"

namespace unillm::ops {
namespace {

constexpr const char* kOp = "rope";

// HF _compute_default_rope_parameters: 1 / theta^(arange(0, dim, 2) / dim), all in f32.
std::vector<float> default_inv_freq(double theta, int64_t dim) {
  std::vector<float> f(static_cast<size_t>(dim / 2));
  const float base = static_cast<float>(theta);
  for (int64_t i = 0; i < dim / 2; ++i) {
    float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    f[i] = 1.0f / std::pow(base, e);
  }
  return f;
}

// HF _compute_llama3_parameters. PyTorch evaluates `scalar / tensor` as reciprocal(tensor) *
// scalar and casts Python scalars to f32, so the same order is kept here.
void apply_llama3(std::vector<float>& f, const RopeConfig& c) {
  const float factor = static_cast<float>(c.factor);
  const double old_len = static_cast<double>(c.original_max_position);
  const float low_wavelen = static_cast<float>(old_len / c.low_freq_factor);
  const float high_wavelen = static_cast<float>(old_len / c.high_freq_factor);
  const float two_pi = static_cast<float>(2.0 * M_PI);
  const float span = static_cast<float>(c.high_freq_factor - c.low_freq_factor);
  for (float& inv : f) {
    float wavelen = (1.0f / inv) * two_pi;
    float scaled = wavelen > low_wavelen ? inv / factor : inv;
    bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    if (medium) {
      float smooth = ((1.0f / wavelen) * static_cast<float>(old_len) -
                      static_cast<float>(c.low_freq_factor)) / span;
      scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
    }
    inv = scaled;
  }
}

// HF _compute_yarn_parameters, in the same f32/double split as PyTorch: the correction range in
// Python doubles, the frequencies and the ramp in f32.
void apply_yarn(std::vector<float>& f, const RopeConfig& c) {
  const double dim = static_cast<double>(c.rot_dim), base = c.theta;
  const double len = static_cast<double>(c.original_max_position);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(len / (rotations * 2 * M_PI)) / (2 * std::log(base));
  };
  double low = correction_dim(c.beta_fast), high = correction_dim(c.beta_slow);
  if (c.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // HF: prevents a division by zero
  const float factor = static_cast<float>(c.factor), lo = static_cast<float>(low);
  const float span = static_cast<float>(high - low);
  for (size_t i = 0; i < f.size(); ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(c.rot_dim);
    const float p = std::pow(static_cast<float>(base), e);  // HF's pos_freqs
    const float interpolation = 1.0f / (factor * p);
    const float ramp = std::clamp((static_cast<float>(i) - lo) / span, 0.0f, 1.0f);
    const float keep = 1.0f - ramp;  // the share of extrapolation (high frequencies keep theirs)
    f[i] = interpolation * (1.0f - keep) + (1.0f / p) * keep;
  }
}

// HF _compute_dynamic_ntk_parameters with a tensor seq_len (its dynamic update): every step in f32.
std::vector<float> dynamic_inv_freq(const RopeConfig& c, int64_t seq_len) {
  const float factor = static_cast<float>(c.factor), d = static_cast<float>(c.rot_dim);
  float t = factor * static_cast<float>(seq_len) / static_cast<float>(c.max_position) - static_cast<float>(c.factor - 1);
  t = std::pow(t, static_cast<float>(static_cast<double>(c.rot_dim) / static_cast<double>(c.rot_dim - 2)));
  const float base = static_cast<float>(c.theta) * t;
  std::vector<float> f(static_cast<size_t>(c.rot_dim / 2));
  for (int64_t i = 0; i < c.rot_dim / 2; ++i) f[i] = 1.0f / std::pow(base, static_cast<float>(2 * i) / d);
  return f;
}

void check_rope(const Tensor& x, const Tensor& positions, const std::vector<float>& inv_freq) {
  check_defined(kOp, "x", x);
  check_defined(kOp, "positions", positions);
  check_f32_or_f64(kOp, "x", x);
  check_ndim(kOp, "x", x, 3);
  check_dtype(kOp, "positions", positions, DType::i32);  // any device: moved to x's for the kernel
  if (positions.numel() != x.size(0))
    UNILLM_THROW(ShapeError, "[rope] positions has ", positions.numel(), " elements, expected ",
                 x.size(0), " (one per row of x ", shape_str(x.shape()), ")");
  const int64_t rot_dim = 2 * static_cast<int64_t>(inv_freq.size());
  if (rot_dim == 0 || rot_dim > x.size(2))
    UNILLM_THROW(ShapeError, "[rope] inv_freq has ", inv_freq.size(),
                 " entries, expected 1 ..= head_dim/2 = ", x.size(2) / 2);
}

Tensor rope_forward(const Tensor& x_in, const Tensor& pos_in, const std::vector<float>& inv_freq) {
  check_rope(x_in, pos_in, inv_freq);
  Tensor x = x_in.contiguous(), positions = pos_in.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  // Positions (checked on the host) and the frequencies go to x's device for the kernel.
  const Tensor pos = positions.to(x.device());
  const auto half = static_cast<int64_t>(inv_freq.size());
  // On the CPU the kernel reads the host vector directly; a device gets a copy, bound in place
  // of it (a bound field must be null or point into its tensor).
  const Tensor freq = x.device().is_cpu() ? Tensor() : Tensor::from_vector(inv_freq, {half}).to(x.device());
  RopeArgs a{x.raw_data(), out.raw_data(), nullptr, freq.defined() ? nullptr : inv_freq.data(),
             x.size(0), x.size(1), x.size(2), 2 * half, x.dtype()};
  KernelCall<RopeArgs> call(kOp, x.device(), x.dtype(), a);
  call.in(x, &a.x).out(out, &a.out).in(pos, &a.positions);
  if (freq.defined()) call.in(freq, &a.inv_freq);
  call.run(rope_reference);
  return out;
}

class RopeNode : public autograd::Node {
 public:
  RopeNode(const Tensor& positions, const std::vector<float>& inv_freq, DType dtype)
      : neg_positions_(negate(positions)), inv_freq_(inv_freq), dtype_(dtype) {}
  std::string name() const override { return "RopeNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    return {rope_forward(g[0].to(dtype_), neg_positions_.get(), inv_freq_), Tensor()};
  }
  void release_saved() override { neg_positions_.release(); }

 private:
  static Tensor negate(const Tensor& positions) {
    Tensor p = positions.contiguous().to(Device{});
    Tensor neg = Tensor::empty(p.shape(), DType::i32);
    const int32_t* src = p.data<int32_t>();
    int32_t* dst = neg.data<int32_t>();
    for (int64_t i = 0; i < p.numel(); ++i) {
      UNILLM_CHECK(src[i] != INT_MIN, "[rope] position ", src[i], " cannot be negated");
      dst[i] = -src[i];
    }
    return neg.to(positions.device());
  }

  autograd::SavedTensor neg_positions_;  // [N] i32, −positions
  std::vector<float> inv_freq_;
  DType dtype_;
};

}  // namespace

std::vector<float> rope_inv_freq(const RopeConfig& c, int64_t seq_len) {
  if (c.rot_dim <= 0 || c.rot_dim % 2 != 0)
    UNILLM_THROW(ShapeError, "[rope] rot_dim is ", c.rot_dim, ", expected a positive even number");
  if (!(c.theta > 0)) UNILLM_THROW(ConfigError, "[rope] theta is ", c.theta, ", expected > 0");
  std::vector<float> f = default_inv_freq(c.theta, c.rot_dim);
  if (c.scaling_type.empty() || c.scaling_type == "default") return f;
  if (!(c.factor > 0))
    UNILLM_THROW(ConfigError, "[rope] scaling factor is ", c.factor, ", expected > 0");
  if (c.scaling_type == "linear") {
    for (float& v : f) v /= static_cast<float>(c.factor);
  } else if (c.scaling_type == "llama3") {
    if (!(c.high_freq_factor > c.low_freq_factor) || !(c.low_freq_factor > 0))
      UNILLM_THROW(ConfigError, "[rope] llama3 needs 0 < low_freq_factor < high_freq_factor, got ",
                   c.low_freq_factor, " and ", c.high_freq_factor);
    apply_llama3(f, c);
  } else if (c.scaling_type == "yarn") {
    if (c.original_max_position <= 0 || !(c.beta_fast > 0) || !(c.beta_slow > 0))
      UNILLM_THROW(ConfigError, "[rope] yarn needs original_max_position_embeddings, beta_fast and beta_slow > 0");
    apply_yarn(f, c);
  } else if (c.scaling_type == "dynamic") {
    if (c.max_position <= 0) UNILLM_THROW(ConfigError, "[rope] dynamic needs max_position_embeddings > 0");
    if (c.rot_dim <= 2) UNILLM_THROW(ConfigError, "[rope] dynamic needs a rotary dimension above 2");
    if (seq_len > c.max_position) return dynamic_inv_freq(c, seq_len);
  } else {
    UNILLM_THROW(ConfigError, "[rope] unknown rope scaling type '", c.scaling_type,
                 "', expected default, linear, llama3, yarn or dynamic");
  }
  return f;
}



Tensor rope(const Tensor& x, const Tensor& positions, const std::vector<float>& inv_freq) {
  Tensor out = rope_forward(x, positions, inv_freq);
  if (autograd::needs_grad({x})) {
    auto node = std::make_shared<RopeNode>(positions, inv_freq, x.dtype());
    autograd::record(node, {x, positions}, {&out});
  }
  return out;
}

void rope_reference(const RopeArgs& a) {
  const int64_t half = a.rot_dim / 2;
  for (int64_t t = 0; t < a.n; ++t) {
    for (int64_t h = 0; h < a.heads; ++h) {
      const int64_t base = (t * a.heads + h) * a.head_dim;
      for (int64_t i = 0; i < half; ++i) {
        double c, s;
        if (a.dtype == DType::f32) {
          float ang = static_cast<float>(a.positions[t]) * a.inv_freq[i];
          c = std::cos(ang);
          s = std::sin(ang);
        } else {
          double ang = static_cast<double>(a.positions[t]) * static_cast<double>(a.inv_freq[i]);
          c = std::cos(ang);
          s = std::sin(ang);
        }
        double x1 = load_scalar(a.x, a.dtype, base + i), x2 = load_scalar(a.x, a.dtype, base + i + half);
        store_scalar(a.out, a.dtype, base + i, x1 * c - x2 * s);
        store_scalar(a.out, a.dtype, base + i + half, x2 * c + x1 * s);
      }
      for (int64_t i = a.rot_dim; i < a.head_dim; ++i)
        store_scalar(a.out, a.dtype, base + i, load_scalar(a.x, a.dtype, base + i));
    }
  }
}

}  // namespace unillm::ops
