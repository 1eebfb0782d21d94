// numpy's default generator, as far as Hugging Face datasets' interleave_datasets uses it:
// np.random.default_rng(seed) (SeedSequence(seed) seeding PCG64), Generator.random() and
// Generator.choice(n, size, p=probabilities). LLaMA-Factory's interleave_probs mixes its datasets
// with it, so the same seed must pick the same examples here (tests/reference/interleave_check.py
// compares with numpy 1.24 and datasets 2.14).
#pragma once

#include <cstdint>
#include <vector>

namespace unillm::data {

class NumpyGenerator {
 public:
  // np.random.default_rng(seed) for a non-negative integer seed.
  explicit NumpyGenerator(uint64_t seed);
  uint64_t next_uint64();  // PCG64's next 64-bit output (XSL-RR of the advanced 128-bit state)
  double random();         // Generator.random(): the top 53 bits of next_uint64() over 2^53

 private:
  unsigned __int128 state_ = 0, inc_ = 0;
  void step();
};

// Generator.choice(len(p), p=p) one draw at a time (the same stream as any size= batching):
// the cumulative sum of p divided by its last entry, and the first index whose value exceeds a
// uniform random(). p must be non-negative and sum to 1 within sqrt(double epsilon), as numpy
// requires (ConfigError otherwise, naming `what`).
class NumpyChoice {
 public:
  NumpyChoice(NumpyGenerator& rng, const std::vector<double>& p, const char* what);
  int64_t next();

 private:
  NumpyGenerator& rng_;
  std::vector<double> cdf_;
};

}  // namespace unillm::data
