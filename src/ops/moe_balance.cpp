// MoeBalance (ops/moe_balance.h).
#include "ops/moe_balance.h"

#include <cstddef>

#include "core/error.h"

namespace unillm::ops {

MoeBalance::MoeBalance(int64_t experts, std::vector<uint8_t> valid, double seed)
    : experts_(experts), valid_(std::move(valid)), routed_(static_cast<size_t>(experts), 0.0),
      prob_sum_(static_cast<size_t>(experts), 0.0), seed_(seed) {
  for (uint8_t v : valid_) real_ += v ? 1 : 0;
}

void MoeBalance::record(const std::vector<double>& probs, const std::vector<int32_t>& chosen, int64_t k) {
  const auto rows = static_cast<int64_t>(valid_.size());
  if (static_cast<int64_t>(probs.size()) != rows * experts_ || static_cast<int64_t>(chosen.size()) != rows * k)
    UNILLM_THROW(ShapeError, "[moe_balance] a layer routed ", probs.size() / static_cast<size_t>(experts_),
                 " rows; the forward has ", rows);
  for (int64_t n = 0; n < rows; ++n) {
    if (!valid_[static_cast<size_t>(n)]) continue;
    for (int64_t e = 0; e < experts_; ++e) prob_sum_[static_cast<size_t>(e)] += probs[static_cast<size_t>(n * experts_ + e)];
    for (int64_t j = 0; j < k; ++j) routed_[static_cast<size_t>(chosen[static_cast<size_t>(n * k + j)])] += 1;
  }
  ++layers_;
}

std::vector<double> MoeBalance::totals() const {
  std::vector<double> t(routed_);
  t.insert(t.end(), prob_sum_.begin(), prob_sum_.end());
  t.push_back(static_cast<double>(layers_));
  return t;
}

void MoeBalance::set_totals(const std::vector<double>& t) {
  if (static_cast<int64_t>(t.size()) != 2 * experts_ + 1)
    UNILLM_THROW(ShapeError, "[moe_balance] ", t.size(), " totals for ", experts_, " experts");
  const auto e = static_cast<std::ptrdiff_t>(experts_);
  routed_.assign(t.begin(), t.begin() + e);
  prob_sum_.assign(t.begin() + e, t.begin() + 2 * e);
  layers_ = static_cast<int64_t>(t.back());
}

double MoeBalance::loss() const {
  if (layers_ == 0 || real_ == 0) return 0;
  const double denom = static_cast<double>(layers_ * real_);
  double s = 0;
  for (int64_t e = 0; e < experts_; ++e) s += routed_[static_cast<size_t>(e)] * prob_sum_[static_cast<size_t>(e)];
  return static_cast<double>(experts_) * s / (denom * denom);
}

void MoeBalance::add_grad(const std::vector<double>& probs, std::vector<double>& dlogits) const {
  if (seed_ == 0 || layers_ == 0 || real_ == 0) return;
  const double denom = static_cast<double>(layers_ * real_);
  // g_e = seed · d aux / d p_e, the same for every real row; then the softmax's backward
  // p ⊙ (g − ⟨p, g⟩).
  std::vector<double> g(static_cast<size_t>(experts_));
  for (int64_t e = 0; e < experts_; ++e)
    g[static_cast<size_t>(e)] = seed_ * static_cast<double>(experts_) * routed_[static_cast<size_t>(e)] / (denom * denom);
  for (size_t n = 0; n < valid_.size(); ++n) {
    if (!valid_[n]) continue;
    const double* p = probs.data() + n * static_cast<size_t>(experts_);
    double* d = dlogits.data() + n * static_cast<size_t>(experts_);
    double dot = 0;
    for (int64_t e = 0; e < experts_; ++e) dot += p[e] * g[static_cast<size_t>(e)];
    for (int64_t e = 0; e < experts_; ++e) d[e] += p[e] * (g[static_cast<size_t>(e)] - dot);
  }
}

}  // namespace unillm::ops
