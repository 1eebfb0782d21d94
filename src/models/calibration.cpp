// Input Hessians: an observer per FusedLinear adds XᵀX (one f32 GEMM, XᵀX = linear(Xᵀ, Xᵀ)) to
// an f64 accumulator per module.
#include "models/calibration.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "models/inference_bundle.h"
#include "models/kv_cache.h"
#include "nn/linear.h"
#include "ops/linear.h"

namespace unillm::models {

InputHessians collect_input_hessians(CausalLM& model, const std::vector<std::vector<int32_t>>& samples) {
  autograd::NoGradGuard no_grad;
  InputHessians out;
  std::map<std::string, std::vector<double>> acc;
  std::vector<nn::FusedLinear*> observed;
  model.module().for_each_module("", [&](const std::string& prefix, nn::Module& m) {
    auto* lin = dynamic_cast<nn::FusedLinear*>(&m);
    if (!lin || lin->is_quantized()) return;
    const int64_t k = lin->in_features();
    std::vector<double>& h = acc[fused_name(prefix, *lin)];
    h.assign(static_cast<size_t>(k * k), 0.0);
    lin->set_input_observer([&h, k](const Tensor& x) {
      const Tensor xt = x.to(Device{}).contiguous().view({x.numel() / k, k}).transpose(0, 1).contiguous();
      const Tensor xtx = ops::linear(xt, xt);  // [K, K]
      const float* p = xtx.data<float>();
      for (int64_t i = 0; i < k * k; ++i) h[i] += p[i];
    });
    observed.push_back(lin);
  });
  try {
    for (const auto& ids : samples) {
      if (ids.empty()) continue;
      const auto t = static_cast<int64_t>(ids.size());
      KvCaches caches = KvCaches::allocate(model.config(), 1, t, DType::f32, model.device());
      model.forward(single_sequence_batch(ids, 0, {0}, t, true), caches);
      out.rows += t;
    }
  } catch (...) {
    for (auto* lin : observed) lin->set_input_observer(nullptr);
    throw;
  }
  for (auto* lin : observed) lin->set_input_observer(nullptr);
  for (auto& [prefix, h] : acc) {
    const auto k = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(h.size()))));
    Tensor t = Tensor::empty({k, k}, DType::f64);
    std::copy(h.begin(), h.end(), t.data<double>());
    out.by_module[prefix] = t;
  }
  return out;
}

}  // namespace unillm::models
