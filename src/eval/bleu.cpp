// NLTK's sentence BLEU with smoothing method 3 (see bleu.h), from nltk/translate/bleu_score.py:
// modified_precision, brevity_penalty, SmoothingFunction.method3, corpus_bleu's final sum.
#include "eval/bleu.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <string>

namespace unillm::eval {

namespace {
struct Precision {
  int64_t numerator = 0, denominator = 1;  // NLTK keeps the unnormalised Fraction
};

Precision modified_precision(std::u32string_view ref, std::u32string_view hyp, size_t n) {
  auto count = [n](std::u32string_view s) {
    std::map<std::u32string_view, int64_t> c;
    for (size_t i = 0; i + n <= s.size(); ++i) ++c[s.substr(i, n)];
    return c;
  };
  const auto h = count(hyp), r = count(ref);
  Precision p;
  int64_t total = 0;
  for (const auto& [gram, c] : h) {
    const auto it = r.find(gram);
    p.numerator += std::min(c, it == r.end() ? int64_t{0} : it->second);
    total += c;
  }
  p.denominator = std::max<int64_t>(1, total);
  return p;
}
}  // namespace

// Shewchuk's exact partials, then one rounding with the half-even fix-up, as CPython's math_fsum.
double py_fsum(const std::vector<double>& xs) {
  std::vector<double> partials;
  for (double x : xs) {
    size_t i = 0;
    for (double y : partials) {
      if (std::fabs(x) < std::fabs(y)) std::swap(x, y);
      const double hi = x + y;
      const double lo = y - (hi - x);
      if (lo != 0.0) partials[i++] = lo;
      x = hi;
    }
    partials.resize(i);
    partials.push_back(x);
  }
  size_t n = partials.size();
  double hi = 0.0;
  if (n == 0) return hi;
  hi = partials[--n];
  double lo = 0.0;
  while (n > 0) {
    const double x = hi, y = partials[--n];
    hi = x + y;
    lo = y - (hi - x);
    if (lo != 0.0) break;
  }
  if (n > 0 && ((lo < 0.0 && partials[n - 1] < 0.0) || (lo > 0.0 && partials[n - 1] > 0.0))) {
    const double y = lo * 2.0;
    const double x = hi + y;
    if (y == x - hi) hi = x;
  }
  return hi;
}

double sentence_bleu4(std::u32string_view ref, std::u32string_view hyp) {
  Precision p[4];
  for (size_t n = 1; n <= 4; ++n) p[n - 1] = modified_precision(ref, hyp, n);
  if (p[0].numerator == 0) return 0.0;
  // method3: the k-th zero precision becomes 1 / (2^k * denominator).
  std::vector<double> terms;
  int64_t k = 1;
  for (const auto& pi : p) {
    double v;
    if (pi.numerator == 0) {
      v = 1.0 / static_cast<double>((int64_t{1} << k) * pi.denominator);
      ++k;
    } else {
      v = static_cast<double>(pi.numerator) / static_cast<double>(pi.denominator);
    }
    terms.push_back(0.25 * std::log(v));
  }
  const auto c = static_cast<int64_t>(hyp.size()), r = static_cast<int64_t>(ref.size());
  const double bp = c > r ? 1.0 : std::exp(1.0 - static_cast<double>(r) / static_cast<double>(c));
  return bp * std::exp(py_fsum(terms));
}

}  // namespace unillm::eval
