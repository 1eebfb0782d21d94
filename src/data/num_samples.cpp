// NumpyRandomState and sample_rows (see num_samples.h), written from numpy's descriptions of its
// legacy generator (mt19937.c's init_genrand seeding, distributions.c's random_interval and the
// masked bounded integers that RandomState.randint keeps for backward compatibility).
#include "data/num_samples.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace unillm::data {

NumpyRandomState::NumpyRandomState(uint64_t seed) : seed_(seed) { mt_.init_genrand(static_cast<uint32_t>(seed)); }

uint32_t NumpyRandomState::next_uint32() {
  if (seed_ > std::numeric_limits<uint32_t>::max())
    UNILLM_THROW(ConfigError, "[data] num_samples draws from numpy's global generator, seeded with `seed` as "
                 "transformers.set_seed does; numpy takes seeds up to 2^32 - 1, not ", seed_);
  return mt_.next();
}

uint32_t NumpyRandomState::interval(uint32_t max) {
  if (max == 0) return 0;
  uint32_t mask = max;
  for (int s = 1; s < 32; s <<= 1) mask |= mask >> s;
  uint32_t v;
  while ((v = next_uint32() & mask) > max) {
  }
  return v;
}

std::vector<int64_t> NumpyRandomState::permutation(int64_t n) {
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = i;
  for (int64_t i = n - 1; i >= 1; --i)
    std::swap(out[static_cast<size_t>(i)], out[interval(static_cast<uint32_t>(i))]);
  return out;
}

std::vector<int64_t> sample_rows(int64_t rows, int64_t num_samples, NumpyRandomState& rng) {
  UNILLM_CHECK(rows >= 1 && num_samples >= 1, "sample_rows: rows and num_samples must be positive");
  if (rows > std::numeric_limits<uint32_t>::max())
    UNILLM_THROW(NotImplemented, "[data] num_samples over a dataset of more than 2^32 rows");
  std::vector<int64_t> out = rng.permutation(rows);
  if (num_samples <= rows) {
    out.resize(static_cast<size_t>(num_samples));
    return out;
  }
  // np.random.choice(rows, k) with replacement = randint(0, rows, k): masked draws in [0, rows).
  for (int64_t i = rows; i < num_samples; ++i) out.push_back(rng.interval(static_cast<uint32_t>(rows - 1)));
  return out;
}

}  // namespace unillm::data
