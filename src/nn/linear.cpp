// Fused projections: one weight, HF names as row ranges; LoRA adapters on named parts.
#include "nn/linear.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "ops/dora_linear.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/lora_linear.h"
#include "nn/svd.h"

#include <tuple>

namespace unillm::nn {

FusedLinear::FusedLinear(int64_t in_features, const std::vector<LinearPart>& parts, bool bias,
                         ParamPlacement weights)
    : parts_(parts) {
  int64_t total = 0;
  std::vector<NamedPart> wparts, bparts;
  for (auto& p : parts) {
    wparts.push_back({p.name + ".weight", total, total + p.out_features});
    bparts.push_back({p.name + ".bias", total, total + p.out_features});
    total += p.out_features;
  }
  in_ = in_features;
  out_ = total;
  weight_ = placed_matrix({total, in_features}, weights);
  register_fused_parameter("weight", &weight_, std::move(wparts));
  if (bias) {
    bias_ = Tensor::zeros({total}, DType::f32, weights.device);
    register_fused_parameter("bias", &bias_, std::move(bparts));
  }
}

int64_t FusedLinear::part_begin(size_t i) const {
  int64_t row = 0;
  for (size_t j = 0; j < i; ++j) row += parts_[j].out_features;
  return row;
}

Tensor FusedLinear::forward(const Tensor& x, const LoraRun* lora, ops::OutputUse use, const TensorParallel* tp) const {
  if (tp && split_ != TpSplit::kNone && tp->active()) return forward_split(x, lora, use, *tp);  // nn/linear_tp.cpp
  check_whole("a forward of the whole layer");
  if (observer_) observer_(x);
  if (oft_active(lora)) return forward_with_oft(x, *lora, use);  // nn/oft.cpp
  std::vector<ops::LoraAdapterInput> adapters;
  std::vector<ops::DoraInput> dora;  // DoRA adapters: their own op, added after the base
  for (size_t i = 0; lora && i < lora->active.size(); ++i) {
    auto it = lora_.find(lora->active[i]);
    if (it == lora_.end()) continue;
    const LoraWeights& w = *it->second;
    ops::LoraAdapterInput in{w.a, w.b, {}, w.scaling, lora->dropout ? w.dropout : 0.0,
                             mix_seed(lora->seed, w.stream)};
    if (!lora->rows.empty()) std::tie(in.row_begin, in.row_end) = lora->rows.at(i);
    in.mask_row_begin = lora->mask_row_begin;
    int64_t b_row = 0;
    for (size_t p : w.parts) {
      in.parts.push_back({part_begin(p), parts_[p].out_features, b_row});
      b_row += parts_[p].out_features;
    }
    if (w.magnitude.defined())
      dora.push_back({std::move(in), w.magnitude});
    else
      adapters.push_back(std::move(in));
  }
  if (!dora.empty()) {
    Tensor y, w = weight_;
    if (qweight_.defined()) {
      // QLoRA + DoRA: DoRA reads W itself (its row norms, (g − 1)·x̃·Wᵀ), so it gets the codes'
      // f32 values for this call, as PEFT's dequantize_module_weight does; the base output stays
      // the quantised product.
      w = ops::dequantize_weight(qweight_);
      y = ops::linear_q(x, qweight_, bias_);
      if (!adapters.empty()) y = ops::add(y, ops::lora_delta(x, out_, adapters, use));
    } else {
      y = adapters.empty() ? ops::linear(x, weight_, bias_, use) : ops::lora_linear(x, weight_, bias_, adapters, use);
    }
    for (const auto& d : dora) y = ops::add(y, ops::dora_delta(x, w, d, use));
    return y;
  }
  if (qweight_.defined()) {
    if (adapters.empty()) return ops::linear_q(x, qweight_, bias_);
    // QLoRA: the frozen quantised base plus the adapters' deltas; each op gives its share of dx.
    return ops::add(ops::linear_q(x, qweight_, bias_), ops::lora_delta(x, out_, adapters, use));
  }
  if (adapters.empty()) return ops::linear(x, weight_, bias_, use);
  return ops::lora_linear(x, weight_, bias_, adapters, use);
}

void FusedLinear::set_quantized(ops::QuantizedWeight q) {
  check_whole("quantising it");
  if (!lora_.empty())
    UNILLM_THROW(ConfigError, "[nn] cannot quantise a linear layer with LoRA adapters attached (merge them first)");
  q.check("linear layer " + (parts_.empty() ? std::string("?") : parts_[0].name));
  if (q.n != out_ || q.k != in_)
    UNILLM_THROW(ShapeError, "[nn] quantised weight of [", q.n, ", ", q.k, "] for a linear layer of [", out_, ", ", in_, "]");
  qweight_ = std::move(q);
  unregister_parameter(&weight_);
  weight_ = Tensor();
}

// The adapter's LoraAdapterInput without dropout (merging, norms).
ops::LoraAdapterInput FusedLinear::adapter_input(const LoraWeights& w) const {
  ops::LoraAdapterInput in{w.a, w.b, {}, w.scaling};
  int64_t b_row = 0;
  for (size_t p : w.parts) {
    in.parts.push_back({part_begin(p), parts_[p].out_features, b_row});
    b_row += parts_[p].out_features;
  }
  return in;
}

void FusedLinear::add_magnitude(const std::string& name, LoraWeights& w) {
  check_whole("DoRA's magnitude");
  // PEFT's init: m = ‖W + s·B·A‖ per output row (B = 0 here, so ‖W‖); over a quantised base, W
  // is what the codes stand for.
  autograd::NoGradGuard no_grad;
  const Tensor base = qweight_.defined() ? ops::dequantize_weight(qweight_) : weight_;
  w.magnitude = ops::dora_row_norms(base, adapter_input(w)).to(DType::f32).to(w.a.device());
  w.magnitude.set_requires_grad(true);
  std::vector<NamedPart> names;
  int64_t row = 0;
  for (size_t p : w.parts) {
    const int64_t rows = parts_[p].out_features;
    names.push_back({parts_[p].name + ".lora_magnitude_vector." + name + ".weight", row, row + rows});
    row += rows;
  }
  register_adapter_parameter(name, "lora_magnitude_vector." + name, &w.magnitude, std::move(names));
}

void FusedLinear::add_lora(const std::string& name, const LoraConfig& c,
                           const std::vector<size_t>& parts, Rng& rng, uint64_t stream) {
  UNILLM_CHECK(!parts.empty() && !lora_.count(name), "[nn] add_lora '", name, "'");
  auto w = std::make_unique<LoraWeights>();
  w->parts = parts;
  w->rank = c.rank;
  w->scaling = c.scaling();
  w->dropout = c.dropout;
  w->stream = stream;
  const int64_t r = c.rank, in = in_features();
  int64_t out = 0;
  std::vector<NamedPart> a_names, b_names;
  for (size_t k = 0; k < parts.size(); ++k) {
    const LinearPart& p = parts_.at(parts[k]);
    const auto ki = static_cast<int64_t>(k);
    a_names.push_back({p.name + ".lora_A." + name + ".weight", ki * r, (ki + 1) * r});
    b_names.push_back({p.name + ".lora_B." + name + ".weight", out, out + p.out_features});
    out += p.out_features;
  }
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  std::vector<float> a(static_cast<size_t>(static_cast<int64_t>(parts.size()) * r * in));
  for (auto& v : a) v = static_cast<float>((2.0 * rng.uniform_double() - 1.0) * bound);
  // The adapter lives where the base weight (or its codes, QLoRA) does.
  const Device device = qweight_.defined() ? qweight_.data.device() : weight_.device();
  w->a = Tensor::from_vector(a, {static_cast<int64_t>(parts.size()) * r, in}).to(device);
  w->b = Tensor::zeros({out, r}, DType::f32, device);
  w->a.set_requires_grad(true);
  w->b.set_requires_grad(true);
  if (c.use_dora) add_magnitude(name, *w);
  register_adapter_parameter(name, "lora_A." + name, &w->a, std::move(a_names));
  register_adapter_parameter(name, "lora_B." + name, &w->b, std::move(b_names));
  lora_.emplace(name, std::move(w));
}

const LoraWeights* FusedLinear::lora(const std::string& name) const {
  auto it = lora_.find(name);
  return it == lora_.end() ? nullptr : it->second.get();
}

LoraWeights* FusedLinear::lora(const std::string& name) {
  auto it = lora_.find(name);
  return it == lora_.end() ? nullptr : it->second.get();
}

void FusedLinear::add_product(const LoraWeights& w, const Tensor& a, const Tensor& b, double sign) {
  check_whole("adding an adapter's product into it");
  autograd::NoGradGuard no_grad;
  const Tensor a64 = a.to(Device{}).to(DType::f64).contiguous();  // [P·r, in]
  const Tensor b64 = b.to(Device{}).to(DType::f64).contiguous();  // [Σ out_p, r]
  const int64_t r = w.rank, in = in_features();
  int64_t b_row = 0;
  for (size_t k = 0; k < w.parts.size(); ++k) {
    const int64_t rows = parts_[w.parts[k]].out_features, begin = part_begin(w.parts[k]);
    Tensor dst = weight_.slice(0, begin, begin + rows);
    Tensor sum = dst.to(Device{}).to(DType::f64).contiguous().clone();  // never an alias of W
    double* s = sum.data<double>();
    const double* av = a64.data<double>() + static_cast<int64_t>(k) * r * in;
    const double* bv = b64.data<double>() + b_row * r;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t q = 0; q < r; ++q) {
        const double f = sign * w.scaling * bv[i * r + q];
        for (int64_t e = 0; e < in; ++e) s[i * in + e] += f * av[q * in + e];
      }
    dst.copy_from(sum);
    b_row += rows;
  }
}

void FusedLinear::pissa_init(const std::string& name, int64_t niter, uint64_t seed) {
  check_whole("PiSSA's initialisation");
  LoraWeights* w = lora(name);
  UNILLM_CHECK(w != nullptr, "[nn] pissa_init: no adapter '", name, "'");
  if (qweight_.defined())
    UNILLM_THROW(NotImplemented, "[nn] PiSSA (pissa_init) over a quantised base weight is not "
                 "supported (LLaMA-Factory: Cannot initialize PiSSA adapter on quantized models)");
  autograd::NoGradGuard no_grad;
  const int64_t r = w->rank, in = in_features();
  std::vector<float> a(static_cast<size_t>(w->a.numel())), b(static_cast<size_t>(w->b.numel()));
  const Tensor wh = weight_.to(Device{});
  int64_t b_row = 0;
  for (size_t k = 0; k < w->parts.size(); ++k) {
    const int64_t rows = parts_[w->parts[k]].out_features, begin = part_begin(w->parts[k]);
    if (r > std::min(rows, in))
      UNILLM_THROW(ConfigError, "[lora] PiSSA rank ", r, " exceeds the [", rows, ", ", in, "] weight of ",
                   parts_[w->parts[k]].name);
    const Tensor wp = wh.slice(0, begin, begin + rows).to(DType::f64).contiguous();
    const std::vector<double> wv(wp.data<double>(), wp.data<double>() + rows * in);
    const Svd sv = niter < 0 ? svd_top(wv, rows, in, r)
                             : svd_subspace(wv, rows, in, r, niter, mix_seed(seed, k));
    for (int64_t q = 0; q < r; ++q) {
      const double root = std::sqrt(sv.s[q] / w->scaling);  // PEFT: S_r /= scaling, then sqrt
      for (int64_t e = 0; e < in; ++e)
        a[(static_cast<int64_t>(k) * r + q) * in + e] = static_cast<float>(root * sv.vt[q * in + e]);
      for (int64_t i = 0; i < rows; ++i)
        b[(b_row + i) * r + q] = static_cast<float>(sv.u[i * r + q] * root);
    }
    b_row += rows;
  }
  w->a.detach().copy_from(Tensor::from_vector(a, w->a.shape()));
  w->b.detach().copy_from(Tensor::from_vector(b, w->b.shape()));
  w->init_a = w->a.detach().clone();
  w->init_b = w->b.detach().clone();
  add_product(*w, w->init_a, w->init_b, -1.0);  // the residual W − s·B·A (of the f32 A, B: PEFT's)
}

void FusedLinear::remove_lora(const std::string& name) {
  if (LoraWeights* w = lora(name); w != nullptr && w->init_a.defined() && weight_.defined())
    add_product(*w, w->init_a, w->init_b, 1.0);  // PiSSA: W gets its principal part back
  unregister_adapter(name);
  lora_.erase(name);
}

void FusedLinear::merge_lora(const std::string& name) {
  check_whole("merging an adapter");
  const LoraWeights* w = lora(name);
  UNILLM_CHECK(w != nullptr, "[nn] merge_lora: no adapter '", name, "'");
  if (w->oft_r.defined()) return merge_oft(name);  // nn/oft.cpp
  if (qweight_.defined())
    UNILLM_THROW(ConfigError, "[nn] cannot merge adapter '", name, "' into a quantised weight: merge into the "
                 "unquantised base (unillm export loads it unquantised, as LLaMA-Factory)");
  autograd::NoGradGuard no_grad;
  const DType compute = weight_.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const int64_t r = w->rank;
  // DoRA (PEFT's merge): W' = (m / ‖W + s·B·A‖) ⊙ (W + s·B·A) row by row, the norm taken before.
  std::vector<double> dora_factor;
  if (w->magnitude.defined()) {
    const Tensor norms = ops::dora_row_norms(weight_, adapter_input(*w));  // [Σ out_p] f64
    const Tensor mag = w->magnitude.to(Device{}).to(DType::f64).contiguous();
    for (int64_t i = 0; i < norms.numel(); ++i)
      dora_factor.push_back(mag.data<double>()[i] / norms.data<double>()[i]);
  }
  int64_t b_row = 0;
  for (size_t k = 0; k < w->parts.size(); ++k) {
    const size_t p = w->parts[k];
    const int64_t rows = parts_[p].out_features, begin = part_begin(p);
    const auto ki = static_cast<int64_t>(k);
    // On the host (a merge runs once, before export or serving; W may live on a device).
    Tensor bp = w->b.slice(0, b_row, b_row + rows).to(Device{}).to(compute);  // [out_p, r]
    Tensor apt = w->a.slice(0, ki * r, (ki + 1) * r).to(Device{}).transpose(0, 1).to(compute);  // [in, r]
    Tensor delta = ops::linear(bp, apt.contiguous());  // B_p · A_p  [out_p, in]
    Tensor dst = weight_.slice(0, begin, begin + rows);
    Tensor sum = Tensor::empty(dst.shape(), compute);  // a copy, never an alias of W
    sum.copy_from(dst);
    const int64_t n = sum.numel(), in = in_features();
    if (compute == DType::f64) {
      double *s = sum.data<double>(), *d = delta.data<double>();
      for (int64_t i = 0; i < n; ++i) s[i] += w->scaling * d[i];
      for (int64_t i = 0; !dora_factor.empty() && i < n; ++i) s[i] *= dora_factor[b_row + i / in];
    } else {
      float *s = sum.data<float>(), *d = delta.data<float>();
      const auto sc = static_cast<float>(w->scaling);
      for (int64_t i = 0; i < n; ++i) s[i] += sc * d[i];
      for (int64_t i = 0; !dora_factor.empty() && i < n; ++i)
        s[i] = static_cast<float>(s[i] * dora_factor[b_row + i / in]);
    }
    dst.copy_from(sum);  // one rounding to W's dtype
    b_row += rows;
  }
  // PiSSA: W_res + s·B·A is the merged weight already; nothing to give back on removal.
  lora(name)->init_a = Tensor();
  remove_lora(name);
}

}  // namespace unillm::nn
