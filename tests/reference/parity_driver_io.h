// Shared by the unillm halves of the PEFT cross-checks (lora_peft_parity, lora_variants_parity)
// and the adapter CLI tests (dora_test, pissa_test):
// raw f32 files exchanged with the Python side, and a model's logits with a set of adapters.
#pragma once

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

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

}  // namespace unillm::reference
