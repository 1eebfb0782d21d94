// Python's `random` module generator, as far as LLaMA-Factory v1's data engine uses it:
// random.seed(n) for a non-negative integer n (transformers-style set_seed runs it at start) and
// random.choices(population, k=k) without weights, which picks population[floor(random() * n)]
// k times. v1's dataset `size` / `weight` resample the data index with it, so the same seed picks
// the same rows here (tests/reference/v1_data_check.py compares with CPython).
#pragma once

#include <cstdint>
#include <vector>

#include "data/mt19937.h"

namespace unillm::data {

class PythonRandom {
 public:
  // random.seed(seed): MT19937 seeded by init_by_array over the seed's 32-bit words (low first).
  explicit PythonRandom(uint64_t seed);
  double random();  // random.random(): 53 bits from two draws
  // random.choices(range(n), k=k) as indices.
  std::vector<int64_t> choices(int64_t n, int64_t k);

 private:
  Mt19937 mt_;
};

}  // namespace unillm::data
