// Hugging Face `Dataset.train_test_split(test_size, seed=seed)` as LLaMA-Factory's split_dataset
// calls it for `val_size`, reproduced bit for bit: the permutation is numpy's
// `np.random.default_rng(seed).permutation(n)` (SeedSequence → PCG64 → Fisher–Yates with masked
// rejection sampling), the test set is permutation[:n_test] and the train set
// permutation[n_test:], both in permutation order.
#pragma once

#include <cstdint>
#include <vector>

namespace unillm::data {

// numpy.random.default_rng(seed).permutation(n). Seed is a non-negative integer.
std::vector<int64_t> numpy_permutation(uint64_t seed, int64_t n);

struct SplitSizes {
  int64_t train = 0;
  int64_t test = 0;
};

// val_size < 1: a fraction, n_test = ceil(val_size * n) in double arithmetic (as Python; note
// 0.07 * 100 = 7.000000000000001 → 8). val_size > 1: an integer count (LLaMA-Factory passes
// int(val_size)). Throws DataError when the test or the train part would be empty, or the count
// is not below n, as `datasets` does.
SplitSizes split_sizes(double val_size, int64_t n);

// Splits rows into (train, test) as described above.
template <typename Row>
void train_test_split(std::vector<Row>&& rows, double val_size, uint64_t seed,
                      std::vector<Row>& train, std::vector<Row>& test) {
  const int64_t n = static_cast<int64_t>(rows.size());
  SplitSizes sz = split_sizes(val_size, n);
  std::vector<int64_t> perm = numpy_permutation(seed, n);
  test.clear();
  train.clear();
  test.reserve(sz.test);
  train.reserve(sz.train);
  for (int64_t i = 0; i < n; ++i) (i < sz.test ? test : train).push_back(std::move(rows[perm[i]]));
}

}  // namespace unillm::data
