// HF sliding-window perplexity: window [b, e) scores positions max(prev_end, b + 1) .. e - 1.
#include "infer/perplexity.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "core/error.h"

namespace unillm::infer {

namespace {
// log p(target | row) from one row of logits, in double for a stable sum.
double log_prob(const float* row, int64_t vocab, int32_t target) {
  float mx = *std::max_element(row, row + vocab);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - mx);
  return static_cast<double>(row[target]) - mx - std::log(sum);
}
}  // namespace

PerplexityResult perplexity(models::CausalLM& model, const std::vector<int32_t>& ids,
                            int64_t max_length, int64_t stride) {
  UNILLM_CHECK(max_length > 0 && stride > 0 && stride <= max_length,
               "[ppl] need 0 < stride <= max_length");
  autograd::NoGradGuard no_grad;
  const auto n = static_cast<int64_t>(ids.size());
  const int64_t vocab = model.config().vocab_size;
  double nll_sum = 0;
  int64_t scored = 0, prev_end = 0;
  for (int64_t begin = 0; begin < n; begin += stride) {
    int64_t end = std::min(begin + max_length, n);
    int64_t first = std::max(prev_end, begin + 1);  // first scored position
    if (first < end) {
      std::vector<int32_t> window(ids.begin() + begin, ids.begin() + end);
      Tensor logits = model.logits_all(window).to(Device{});  // [e - b, V], scored on the host
      const float* l = logits.data<float>();
      for (int64_t p = first; p < end; ++p) {
        const double lp = log_prob(l + (p - 1 - begin) * vocab, vocab, ids[p]);
        // The row's max and sum are NaN/inf when one logit is: found here, in scoring order.
        if (!std::isfinite(lp))
          UNILLM_THROW(NumericError, "[ppl] the logits at position ", p - 1, " (scoring token ", p,
                       ") are NaN or inf: the model's weights or config (rms_norm_eps, "
                       "rope_theta) give non-finite values");
        nll_sum -= lp;
        ++scored;
      }
    }
    prev_end = end;
    if (end == n) break;
  }
  PerplexityResult r;
  r.tokens = scored;
  r.nll = scored ? nll_sum / static_cast<double>(scored) : 0.0;
  r.ppl = std::exp(r.nll);
  return r;
}

}  // namespace unillm::infer
