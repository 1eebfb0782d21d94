// PythonRandom (python_random.h), written from the descriptions of CPython's _randommodule.c:
// random.seed(int) seeds MT19937 by init_by_array over the integer's 32-bit words, and
// random_random combines two outputs (a >> 5, b >> 6) into 53 bits.
#include "data/python_random.h"

#include <cmath>

namespace unillm::data {

PythonRandom::PythonRandom(uint64_t seed) {
  std::vector<uint32_t> key;
  do {
    key.push_back(static_cast<uint32_t>(seed));
    seed >>= 32;
  } while (seed != 0);
  mt_.init_by_array(key);
}

double PythonRandom::random() {
  const uint32_t a = mt_.next() >> 5, b = mt_.next() >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

std::vector<int64_t> PythonRandom::choices(int64_t n, int64_t k) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(k > 0 ? k : 0));
  const auto nf = static_cast<double>(n);
  for (int64_t i = 0; i < k; ++i) out.push_back(static_cast<int64_t>(std::floor(random() * nf)));
  return out;
}

}  // namespace unillm::data
