// rope: rotary position embedding in HF's rotate_half layout. For each head vector x of size D
// (first rot_dim elements rotated, the rest passed through), with h = rot_dim/2 and i < h:
//   out[i]     = x[i] * cos(p·f_i) - x[i+h] * sin(p·f_i)
//   out[i+h]   = x[i+h] * cos(p·f_i) + x[i] * sin(p·f_i)
// where f_i comes from RopeConfig (theta; linear, llama3, yarn or dynamic scaling) computed as HF
// does (in f32). YaRN's attention factor is not applied here: the caller scales the attention
// scores by its square (rope_attention_factor).
// x f32/f64 [N, H, D]; positions i32 [N]. Out-of-place: returns a new tensor.
// For f32 x the angle is float(p) * f_i rounded to f32 and cos/sin are taken in f32 (as HF does,
// so results match PyTorch); for f64 x the angle and cos/sin are in double. Kernel key = x's dtype.
// Backward: dx = the rotation by −angle of dy (the forward kernel run on negated positions; exact,
// since the angle is odd in p and cos/sin are even/odd); positions get no gradient.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace unillm::ops {

struct RopeConfig {
  double theta = 10000.0;
  int64_t rot_dim = 0;  // = head_dim unless partial rotary
  std::string scaling_type;  // "", "linear", "llama3", "yarn", "dynamic"
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  // llama3 and yarn: the pretraining length (yarn: where the correction range is taken).
  int64_t original_max_position = 8192;
  // yarn: the correction range in rotations; attention_factor, mscale, mscale_all_dim 0 = unset
  // (then 0.1·ln(factor)+1, or the mscale ratio when both are set); truncate floors/ceils the
  // range to whole dimensions (HF's default).
  double beta_fast = 32, beta_slow = 1;
  double attention_factor = 0, mscale = 0, mscale_all_dim = 0;
  bool truncate = true;
  int64_t max_position = 0;  // dynamic: config.max_position_embeddings, where rescaling starts
};

// The rot_dim/2 inverse frequencies f_i after scaling (HF's _compute_*_parameters), in f32.
// seq_len is the longest position + 1 of the forward they serve; only dynamic reads it (at or
// below max_position it gives the default table).
std::vector<float> rope_inv_freq(const RopeConfig& c, int64_t seq_len = 0);

// What HF multiplies cos and sin by: yarn's attention factor, 1 for every other type. (Inline:
// config parsing checks it without linking the op.)
inline double rope_attention_factor(const RopeConfig& c) {
  if (c.scaling_type != "yarn") return 1.0;
  if (c.attention_factor > 0) return c.attention_factor;
  auto mscale = [&](double m) { return c.factor <= 1 ? 1.0 : 0.1 * m * std::log(c.factor) + 1.0; };
  if (c.mscale > 0 && c.mscale_all_dim > 0) return mscale(c.mscale) / mscale(c.mscale_all_dim);
  return mscale(1.0);
}

struct RopeArgs {
  const void* x;
  void* out;
  const int32_t* positions;  // [n]
  const float* inv_freq;  // [rot_dim / 2]
  int64_t n, heads, head_dim, rot_dim;
  DType dtype;
};
using RopeKernel = void(const RopeArgs&);

Tensor rope(const Tensor& x, const Tensor& positions, const std::vector<float>& inv_freq);
void rope_reference(const RopeArgs& a);

}  // namespace unillm::ops
