// HF logits processors, written from their documented definitions.
#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "core/dtype.h"
#include "core/error.h"

namespace unillm::infer {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}

void apply_repetition_penalty(std::vector<float>& scores, const std::vector<int32_t>& context,
                              float penalty) {
  if (penalty == 1.0f) return;
  std::unordered_set<int32_t> seen(context.begin(), context.end());
  for (int32_t t : seen) {
    if (t < 0 || t >= static_cast<int32_t>(scores.size())) continue;
    float& s = scores[t];
    s = s < 0 ? s * penalty : s / penalty;
  }
}

void apply_presence_frequency(std::vector<float>& scores, const int32_t* generated, size_t n,
                              float presence, float frequency) {
  if ((presence == 0.0f && frequency == 0.0f) || n == 0) return;
  std::unordered_map<int32_t, int64_t> counts;
  for (size_t i = 0; i < n; ++i) ++counts[generated[i]];
  for (const auto& [t, c] : counts) {
    if (t < 0 || t >= static_cast<int32_t>(scores.size())) continue;
    scores[t] -= presence + frequency * static_cast<float>(c);
  }
}

void apply_temperature(std::vector<float>& scores, float temperature) {
  if (temperature == 1.0f) return;
  for (auto& s : scores) s /= temperature;
}

void apply_top_k(std::vector<float>& scores, int k) {
  if (k <= 0 || k >= static_cast<int>(scores.size())) return;
  std::vector<float> sorted = scores;
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
  float kth = sorted[k - 1];
  for (auto& s : scores)
    if (s < kth) s = kNegInf;
}

std::vector<double> softmax(const std::vector<float>& scores) {
  float mx = *std::max_element(scores.begin(), scores.end());
  std::vector<double> p(scores.size());
  double sum = 0;
  for (size_t i = 0; i < scores.size(); ++i) sum += p[i] = std::exp(static_cast<double>(scores[i]) - mx);
  for (auto& v : p) v /= sum;
  return p;
}

void apply_top_p(std::vector<float>& scores, float top_p) {
  if (top_p >= 1.0f) return;
  std::vector<double> p = softmax(scores);
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  // Ascending by score, as HF sorts; stable so ties keep index order.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double cum = 0;
  for (size_t r = 0; r + 1 < order.size(); ++r) {  // the highest token is always kept
    cum += p[order[r]];
    if (cum <= 1.0 - top_p) scores[order[r]] = kNegInf;
  }
}

void apply_min_p(std::vector<float>& scores, float min_p) {
  if (min_p <= 0.0f) return;
  std::vector<double> p = softmax(scores);
  double top = *std::max_element(p.begin(), p.end());
  for (size_t i = 0; i < scores.size(); ++i)
    if (p[i] < min_p * top) scores[i] = kNegInf;
}

std::vector<float> process_logits(const std::vector<float>& logits, const SamplingParams& params,
                                  const std::vector<int32_t>& context, size_t prompt_len,
                                  const std::vector<uint8_t>* allowed) {
  std::vector<float> s = logits;
  if (allowed) {
    UNILLM_CHECK(allowed->size() == s.size(), "[sampler] the token mask does not cover the vocabulary");
    for (size_t i = 0; i < s.size(); ++i)
      if (!(*allowed)[i]) s[i] = kNegInf;
  }
  apply_repetition_penalty(s, context, params.repetition_penalty);
  if (prompt_len < context.size())
    apply_presence_frequency(s, context.data() + prompt_len, context.size() - prompt_len,
                             params.presence_penalty, params.frequency_penalty);
  if (params.temperature == 0.0f) return s;
  apply_temperature(s, params.temperature);
  apply_top_k(s, params.top_k);
  apply_top_p(s, params.top_p);
  apply_min_p(s, params.min_p);
  return s;
}

int32_t sample_token(const std::vector<float>& logits, const SamplingParams& params,
                     const std::vector<int32_t>& context, Rng& rng, size_t prompt_len,
                     const std::vector<uint8_t>* allowed) {
  UNILLM_CHECK(!logits.empty(), "[sampler] empty logits");
  // Checked before the processors: a NaN breaks the orderings top-k and top-p sort by, and the
  // argmax of a NaN row is id 0.
  if (!all_finite_f32(logits.data(), logits.size()))
    UNILLM_THROW(NumericError, "[sampler] the logits hold NaN or inf");
  // Plain greedy (no mask, no penalties): the argmax of the logits as they are, without a copy.
  if (params.temperature == 0.0f && !allowed && params.repetition_penalty == 1.0f && params.presence_penalty == 0.0f &&
      params.frequency_penalty == 0.0f)
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<float> s = process_logits(logits, params, context, prompt_len, allowed);
  if (params.temperature == 0.0f)
    return static_cast<int32_t>(std::max_element(s.begin(), s.end()) - s.begin());
  std::vector<double> p = softmax(s);
  double u = rng.uniform_double(), cum = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    cum += p[i];
    if (u < cum) return static_cast<int32_t>(i);
  }
  for (size_t i = p.size(); i-- > 0;)  // rounding left u above the total: last nonzero token
    if (p[i] > 0) return static_cast<int32_t>(i);
  return 0;
}

}  // namespace unillm::infer
