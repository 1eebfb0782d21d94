// Shared by the unillm halves of the PEFT cross-checks (lora_peft_parity, lora_variants_parity,
// oft_parity) and the adapter CLI tests (dora_test, pissa_test): raw f32 files exchanged with the
// Python side, a model's logits with a set of adapters, and a few SGD steps of an adapter.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "models/causal_lm.h"

namespace unillm::reference {

// n raw little-endian f32 values from p (a short file is an error).
inline std::vector<float> read_f32(const std::filesystem::path& p, size_t n) {
  std::vector<float> v(n);
  std::ifstream in(p, std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
  if (static_cast<size_t>(in.gcount()) != n * sizeof(float))
    throw std::runtime_error("[parity] " + p.string() + ": short file");
  return v;
}

inline void write_f32(const std::filesystem::path& p, const Tensor& t) {
  const std::vector<float> v = t.contiguous().to_float_vector();
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
}

// Logits of one sequence through m with `adapters` active (empty = the base model).
inline Tensor logits(models::CausalLM& m, const std::vector<int32_t>& ids, std::vector<std::string> adapters) {
  const auto t = static_cast<int64_t>(ids.size());
  models::KvCaches caches = models::KvCaches::allocate(m.config(), 1, t);
  models::ForwardBatch b = models::single_sequence_batch(ids, 0, {0}, t, false);
  b.adapters = std::move(adapters);
  return m.forward(b, caches);
}

// A few plain SGD steps of next-token loss on ids over the adapter's parameters.
inline void train_steps(models::CausalLM& m, const std::string& name, const std::vector<int32_t>& ids, int steps,
                        double lr) {
  const auto t = static_cast<int64_t>(ids.size()) - 1;
  std::vector<int32_t> in(ids.begin(), ids.end() - 1), labels(ids.begin() + 1, ids.end()), pos;
  for (int32_t i = 0; i < t; ++i) pos.push_back(i);
  models::TrainBatch b;
  b.input_ids = Tensor::from_ints(in, {1, t});
  b.labels = Tensor::from_ints(labels, {1, t});
  b.position_ids = Tensor::from_ints(pos, {1, t});
  b.adapters = std::vector<std::string>{name};
  for (int s = 0; s < steps; ++s) {
    for (auto& r : m.module().parameters()) r.tensor->set_grad(Tensor());
    models::LossResult out = m.loss(b, false);
    autograd::backward(out.loss_sum, Tensor::from_vector({1.0f / static_cast<float>(out.count)}, {}));
    for (auto& r : m.module().parameters()) {
      if (r.adapter != name) continue;
      Tensor p = r.tensor->detach();
      std::vector<float> v = p.to_float_vector(), g = r.tensor->grad().to_float_vector();
      for (size_t i = 0; i < v.size(); ++i) v[i] -= static_cast<float>(lr) * g[i];
      p.copy_from(Tensor::from_vector(v, p.shape()));
    }
  }
}

inline double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  return d;
}

}  // namespace unillm::reference
