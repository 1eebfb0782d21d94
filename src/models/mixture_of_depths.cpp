// The mixture-of-depth package's capacity schedule and token choice (models/mixture_of_depths.h).
#include "models/mixture_of_depths.h"

#include <algorithm>
#include <functional>

namespace unillm::models {

int64_t mod_next_calls(int64_t calls) { return calls + (calls < 1000 ? 1 : 999); }

double mod_capacity(int64_t calls) {
  return calls == 0 ? 0.125 : 0.125 + (1 - 0.125) * (1.0 / static_cast<double>(calls));
}

int64_t mod_tokens(double capacity, int64_t t) {
  return std::max<int64_t>(1, static_cast<int64_t>(capacity * static_cast<double>(t)));
}

std::vector<int32_t> mod_select(const float* w, int64_t t, int64_t k) {
  std::vector<int32_t> out;
  if (t == 0) return out;
  k = std::clamp<int64_t>(k, 1, t);
  std::vector<float> sorted(w, w + t);
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
  const float threshold = sorted[static_cast<size_t>(k - 1)];  // topk's k-th value
  for (int64_t j = 0; j < t; ++j)
    if (k > 1 ? w[j] > threshold : w[j] >= threshold) out.push_back(static_cast<int32_t>(j));
  return out;
}

}  // namespace unillm::models
