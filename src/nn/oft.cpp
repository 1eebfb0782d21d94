// OFT: config rules (oft.h) and the FusedLinear members that add, apply and merge an OFT adapter
// (declared in linear.h; kept here so linear.cpp stays LoRA's).
#include "nn/oft.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "nn/linear.h"
#include "ops/oft_linear.h"
#include "ops/oft_rotate.h"

namespace unillm::nn {

void validate_oft_config(const OftConfig& c) {
  if (c.rank < 0 || c.block_size < 0)
    UNILLM_THROW(ConfigError, "[oft] oft_rank (", c.rank, ") and oft_block_size (", c.block_size,
                 ") must not be negative");
  if ((c.rank != 0) == (c.block_size != 0))
    UNILLM_THROW(ConfigError, "[oft] set exactly one of oft_rank (", c.rank, ") and oft_block_size (",
                 c.block_size, ") to a non-zero value: oft_rank x oft_block_size = in_features "
                 "(PEFT's rule; LLaMA-Factory's defaults are oft_rank 0, oft_block_size 32)");
  if (!(c.module_dropout >= 0 && c.module_dropout < 1))
    UNILLM_THROW(ConfigError, "[oft] module_dropout must be in [0, 1), got ", c.module_dropout);
  if (c.num_cayley_neumann_terms < 0)
    UNILLM_THROW(ConfigError, "[oft] num_cayley_neumann_terms must be >= 0, got ", c.num_cayley_neumann_terms);
}

OftBlocks oft_blocks(const OftConfig& c, int64_t in_features) {
  const bool by_rank = c.rank != 0;
  int64_t v = by_rank ? c.rank : c.block_size;
  OftBlocks out;
  if (v > in_features || in_features % v != 0) {  // PEFT's adjust_oft_parameters
    out.adjusted = true;
    if (v >= in_features) {
      v = in_features;
    } else {
      int64_t hi = v, lo = v;
      while (hi <= in_features && in_features % hi != 0) ++hi;
      while (lo > 1 && in_features % lo != 0) --lo;
      v = v - lo <= hi - v ? lo : hi;
    }
  }
  out.blocks = by_rank ? v : in_features / v;
  out.block_size = by_rank ? in_features / v : v;
  return out;
}

void FusedLinear::add_oft(const std::string& name, const OftConfig& c, const std::vector<size_t>& parts) {
  UNILLM_CHECK(!parts.empty() && !lora_.count(name), "[nn] add_oft '", name, "'");
  const OftBlocks ob = oft_blocks(c, in_features());
  auto w = std::make_unique<LoraWeights>();
  w->parts = parts;
  w->oft_block = ob.block_size;
  w->oft_neumann = c.use_cayley_neumann;
  w->oft_terms = c.num_cayley_neumann_terms;
  const int64_t n = ob.block_size * (ob.block_size - 1) / 2;
  std::vector<NamedPart> names;
  for (size_t k = 0; k < parts.size(); ++k) {
    const auto ki = static_cast<int64_t>(k);
    names.push_back({parts_.at(parts[k]).name + ".oft_R." + name + ".weight", ki * ob.blocks, (ki + 1) * ob.blocks});
  }
  // PEFT's init_weights=True: zeros, so R = I and the layer starts as the base.
  const Device device = qweight_.defined() ? qweight_.data.device() : weight_.device();
  w->oft_r = Tensor::zeros({static_cast<int64_t>(parts.size()) * ob.blocks, n}, DType::f32, device);
  w->oft_r.set_requires_grad(true);
  register_adapter_parameter(name, "oft_R." + name, &w->oft_r, std::move(names));
  lora_.emplace(name, std::move(w));
}

ops::OftLinearInput FusedLinear::oft_input(const LoraWeights& w) const {
  ops::OftLinearInput in{w.oft_r, w.oft_block, w.oft_neumann, w.oft_terms, {}};
  const int64_t blocks = in_features() / w.oft_block;
  for (size_t p = 0; p < parts_.size(); ++p) {
    int64_t first_row = -1;
    for (size_t k = 0; k < w.parts.size(); ++k)
      if (w.parts[k] == p) first_row = static_cast<int64_t>(k) * blocks;
    in.parts.push_back({part_begin(p), parts_[p].out_features, first_row});
  }
  return in;
}

bool FusedLinear::oft_active(const LoraRun* run) const {
  for (size_t i = 0; run && i < run->active.size(); ++i)
    if (const LoraWeights* w = lora(run->active[i]); w && w->oft_r.defined()) return true;
  return false;
}

Tensor FusedLinear::forward_with_oft(const Tensor& x, const LoraRun& run, ops::OutputUse use) const {
  // Which of the call's entries this module holds, and whether each is OFT.
  std::vector<size_t> held, oft;
  for (size_t i = 0; i < run.active.size(); ++i)
    if (const LoraWeights* w = lora(run.active[i])) (w->oft_r.defined() ? oft : held).push_back(i);
  if (run.rows.empty()) {  // one adapter set on every row (training, chat)
    if (oft.size() + held.size() > 1)
      UNILLM_THROW(NotImplemented, "[oft] adapter '", run.active[oft[0]],
                   "' is active together with other adapters on the same layer; apply one OFT adapter at a time "
                   "(merge the others first)");
    const ops::OftLinearInput in = oft_input(*lora(run.active[oft[0]]));
    return qweight_.defined() ? ops::oft_linear_q(x, qweight_, bias_, in) : ops::oft_linear(x, weight_, bias_, in, use);
  }
  // Serving: each entry on its run of rows. The LoRA entries go through the usual path; an OFT
  // entry's rows are then recomputed with its rotation (inference only: no gradients).
  UNILLM_CHECK(!autograd::grad_enabled() || !x.requires_grad(), "[oft] adapter rows are for inference only");
  LoraRun rest;
  for (size_t i = 0; i < run.active.size(); ++i)
    if (std::find(oft.begin(), oft.end(), i) == oft.end()) {
      rest.active.push_back(run.active[i]);
      rest.rows.push_back(run.rows.at(i));
    }
  Tensor y = forward(x, rest.active.empty() ? nullptr : &rest, use);
  const int64_t k = x.size(-1), m = x.numel() / k;
  const Tensor x2 = x.contiguous().view({m, k});
  Tensor y2 = y.view({m, out_});
  for (size_t i : oft) {
    const auto [lo, hi] = run.rows.at(i);
    for (size_t j = 0; j < run.active.size(); ++j)
      if (j != i && lora(run.active[j]) && run.rows.at(j).first < hi && lo < run.rows.at(j).second)
        UNILLM_THROW(NotImplemented, "[oft] adapter '", run.active[i], "' shares rows with adapter '",
                     run.active[j], "'; an OFT adapter applies alone");
    if (hi <= lo) continue;
    const ops::OftLinearInput in = oft_input(*lora(run.active[i]));
    const Tensor xr = x2.slice(0, lo, hi);
    y2.slice(0, lo, hi).copy_from(qweight_.defined() ? ops::oft_linear_q(xr, qweight_, bias_, in)
                                                     : ops::oft_linear(xr, weight_, bias_, in));
  }
  return y;
}

void FusedLinear::merge_oft(const std::string& name) {
  const LoraWeights* w = lora(name);
  UNILLM_CHECK(w != nullptr && w->oft_r.defined(), "[nn] merge_oft: no OFT adapter '", name, "'");
  if (qweight_.defined())
    UNILLM_THROW(ConfigError, "[nn] cannot merge OFT adapter '", name, "' into a quantised weight");
  autograd::NoGradGuard no_grad;
  // PEFT's merge: W_p ← W_p · blockdiag(R)ᵀ, i.e. W'[o, j·b + k] = Σ_c W[o, j·b + c] · R_j[k, c]
  // (f64 on the host, rounded once to W's dtype).
  const int64_t b = w->oft_block, in = in_features(), blocks = in / b, n = b * (b - 1) / 2;
  const Tensor skew = w->oft_r.detach().to(Device{}).to(DType::f64).contiguous();
  for (size_t k = 0; k < w->parts.size(); ++k) {
    const std::vector<double> r = ops::oft_rotation_blocks(
        skew.data<double>() + static_cast<int64_t>(k) * blocks * n, blocks, b, w->oft_neumann, w->oft_terms);
    const int64_t rows = parts_[w->parts[k]].out_features, begin = part_begin(w->parts[k]);
    Tensor dst = weight_.slice(0, begin, begin + rows);
    const Tensor src = dst.to(Device{}).to(DType::f64).contiguous();
    Tensor out = Tensor::empty({rows, in}, DType::f64);
    const double* sv = src.data<double>();
    double* ov = out.data<double>();
    for (int64_t o = 0; o < rows; ++o)
      for (int64_t j = 0; j < blocks; ++j)
        for (int64_t kk = 0; kk < b; ++kk) {
          double s = 0;
          for (int64_t c = 0; c < b; ++c) s += sv[o * in + j * b + c] * r[(j * b + kk) * b + c];
          ov[o * in + j * b + kk] = s;
        }
    dst.copy_from(out);
  }
  remove_lora(name);
}

}  // namespace unillm::nn
