// train::kto_loss: the closed-form gradient w.r.t. the summed policy target log-probs against
// central differences in double (mixed, all-desirable and all-undesirable micro-batches, with and
// without ftx, unequal weights), the KL estimate (mean over the KL rows, clamped at 0, no
// gradient), hand-computed points, the stored sums and LLaMA-Factory's log rule, and the errors.
// Parity with torch autograd is in tests/reference/kto_loss_parity_test.cpp.
#include "train/stages/kto_loss.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "core/error.h"

namespace unillm::train {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// B examples: summed log-probs over 1..40 tokens (−0.2..−3 nats a token), the reference and the
// KL rows near the policy; tags from `desirable` (−1: random).
KtoLossInput random_batch(uint64_t seed, size_t b, int desirable = -1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> per_token(-3.0, -0.2), noise(-4.0, 4.0);
  std::uniform_int_distribution<int> len(1, 40), coin(0, 1);
  KtoLossInput in;
  for (size_t i = 0; i < b; ++i) {
    in.length.push_back(len(rng));
    in.policy.push_back(per_token(rng) * in.length.back());
    in.reference.push_back(std::min(-0.01, in.policy.back() + noise(rng)));
    const double kl_len = len(rng);
    in.policy_kl.push_back(per_token(rng) * kl_len);
    in.reference_kl.push_back(std::min(-0.01, in.policy_kl.back() + noise(rng)));
    in.desirable.push_back(static_cast<uint8_t>(desirable < 0 ? coin(rng) : desirable));
  }
  if (desirable < 0) {  // both kinds present
    in.desirable[0] = 1;
    in.desirable[b - 1] = 0;
  }
  return in;
}

void expect_gradients_match(const KtoLossConfig& cfg, const KtoLossInput& in,
                            const std::string& what) {
  const KtoLossOutput out = kto_loss(cfg, in);
  ASSERT_EQ(out.d_policy.size(), in.policy.size());
  for (size_t i = 0; i < in.policy.size(); ++i) {
    const double h = 1e-5;
    KtoLossInput plus = in, minus = in;
    plus.policy[i] += h;
    minus.policy[i] -= h;
    const double fd = (kto_loss(cfg, plus).loss - kto_loss(cfg, minus).loss) / (2 * h);
    EXPECT_NEAR(out.d_policy[i], fd, 1e-9 + 1e-6 * std::abs(fd)) << what << " policy[" << i << "]";
  }
}

TEST(KtoLoss, GradientsMatchCentralDifferences) {
  for (int tags : {-1, 1, 0}) {
    for (double ftx : {0.0, 0.5}) {
      for (uint64_t seed : {1, 2, 3}) {
        for (double beta : {0.1, 0.5}) {
          const KtoLossConfig cfg{beta, 1.0 + 0.25 * static_cast<double>(seed), 0.7, ftx};
          const KtoLossInput in = random_batch(seed, 1 + seed * 2, tags);
          expect_gradients_match(cfg, in,
                                 "tags " + std::to_string(tags) + " ftx " + std::to_string(ftx) +
                                     " seed " + std::to_string(seed) + " beta " +
                                     std::to_string(beta));
        }
      }
    }
  }
}

// B = 2, β = 0.5: example 0 desirable (π − ρ = 2), example 1 undesirable (π − ρ = −1); the KL
// rows' mean log-ratio is (1 + 0)/2 = 0.5.
TEST(KtoLoss, HandComputedPoint) {
  KtoLossInput in{{-10.0, -20.0}, {-12.0, -19.0}, {-5.0, -8.0}, {-6.0, -8.0}, {4.0, 5.0}, {1, 0}};
  KtoLossConfig cfg{0.5, 2.0, 3.0, 0.0};
  KtoLossOutput out = kto_loss(cfg, in);
  EXPECT_DOUBLE_EQ(out.kl, 0.5);
  const double chosen = 1 - sigmoid(0.5 * (2.0 - 0.5)), rejected = 1 - sigmoid(0.5 * (0.5 + 1.0));
  EXPECT_NEAR(out.loss, (2.0 * chosen + 3.0 * rejected) / 2, 1e-15);
  const double s = sigmoid(0.75);
  EXPECT_NEAR(out.d_policy[0], -2.0 * 0.5 * s * (1 - s) / 2, 1e-15);
  EXPECT_NEAR(out.d_policy[1], 3.0 * 0.5 * s * (1 - s) / 2, 1e-15);
  ASSERT_EQ(out.metrics.size(), 4u);
  EXPECT_EQ(out.metrics[0].key, "rewards/chosen");
  EXPECT_DOUBLE_EQ(out.metrics[0].sum, 0.5 * 2.0);
  EXPECT_EQ(out.metrics[0].count, 1);
  EXPECT_EQ(out.metrics[1].key, "logps/chosen");
  EXPECT_DOUBLE_EQ(out.metrics[1].sum, -10.0);
  EXPECT_EQ(out.metrics[2].key, "rewards/rejected");
  EXPECT_DOUBLE_EQ(out.metrics[2].sum, 0.5 * -1.0);
  EXPECT_EQ(out.metrics[3].key, "logps/rejected");
  EXPECT_DOUBLE_EQ(out.metrics[3].sum, -20.0);
  // ftx: + ftx · mean_c(−π/len) / n_c · B = 0.4 · (10/4) / 1 · 2 (LLaMA-Factory's rescale).
  cfg.ftx = 0.4;
  KtoLossOutput f = kto_loss(cfg, in);
  EXPECT_NEAR(f.loss, out.loss + 0.4 * 2.5 * 2, 1e-14);
  EXPECT_NEAR(f.d_policy[0], out.d_policy[0] - 0.4 * 2 / 4.0, 1e-15);
  EXPECT_EQ(f.d_policy[1], out.d_policy[1]);
}

TEST(KtoLoss, KlIsTheClampedMeanOfTheKlRowsWithoutGradient) {
  KtoLossInput in = random_batch(9, 5);
  // Every KL log-ratio negative: KL clamps to 0 and the terms see π − ρ alone.
  for (size_t i = 0; i < 5; ++i) in.reference_kl[i] = in.policy_kl[i] + 0.5 + 0.1 * i;
  const KtoLossConfig cfg{0.3, 1.0, 1.0, 0.0};
  KtoLossOutput out = kto_loss(cfg, in);
  EXPECT_EQ(out.kl, 0.0);
  double want = 0;
  for (size_t i = 0; i < 5; ++i) {
    const double r = in.policy[i] - in.reference[i];
    want += in.desirable[i] ? 1 - sigmoid(0.3 * r) : 1 - sigmoid(-0.3 * r);
  }
  EXPECT_NEAR(out.loss, want / 5, 1e-14);
  // Clamped: moving a KL row changes nothing while the mean stays negative.
  in.policy_kl[2] += 0.2;
  EXPECT_EQ(kto_loss(cfg, in).loss, out.loss);
  // Not clamped: the mean over all KL rows, desirable or not, enters every term; the returned
  // gradient is the target's alone (the KL rows are detached), identical for any KL value.
  for (size_t i = 0; i < 5; ++i) in.reference_kl[i] = in.policy_kl[i] - 0.25 * i;  // mean 0.5
  KtoLossOutput k = kto_loss(cfg, in);
  EXPECT_NEAR(k.kl, 0.5, 1e-14);
  EXPECT_GT(k.loss, 0);
  expect_gradients_match(cfg, in, "KL 0.5");
}

TEST(KtoLoss, AtTheReferenceEveryTermIsOneHalf) {
  KtoLossInput in = random_batch(4, 6);
  in.reference = in.policy;
  in.reference_kl = in.policy_kl;
  const KtoLossConfig cfg{0.1, 1.0, 1.0, 0.0};
  KtoLossOutput out = kto_loss(cfg, in);
  EXPECT_EQ(out.kl, 0.0);
  EXPECT_DOUBLE_EQ(out.loss, 0.5);
  for (size_t i = 0; i < 6; ++i)
    EXPECT_DOUBLE_EQ(out.d_policy[i], (in.desirable[i] ? -1 : 1) * 0.1 * 0.25 / 6);
}

TEST(KtoLoss, OneSidedBatches) {
  const KtoLossConfig cfg{0.2, 1.5, 0.5, 0.3};
  // All desirable: no rejected sums; ftx is mean_c(−π/len) (B = n_c).
  KtoLossInput d = random_batch(5, 4, 1);
  KtoLossOutput od = kto_loss(cfg, d);
  ASSERT_EQ(od.metrics.size(), 2u);
  EXPECT_EQ(od.metrics[0].key, "rewards/chosen");
  EXPECT_EQ(od.metrics[1].key, "logps/chosen");
  EXPECT_EQ(od.metrics[0].count, 4);
  KtoLossConfig no_ftx = cfg;
  no_ftx.ftx = 0;
  double sft = 0;
  for (size_t i = 0; i < 4; ++i) sft += -d.policy[i] / d.length[i];
  EXPECT_NEAR(od.loss, kto_loss(no_ftx, d).loss + 0.3 * sft / 4, 1e-13);
  // All undesirable: no chosen sums, and no sft term (LLaMA-Factory's len(chosen) > 0).
  KtoLossInput u = random_batch(6, 3, 0);
  KtoLossOutput ou = kto_loss(cfg, u);
  ASSERT_EQ(ou.metrics.size(), 2u);
  EXPECT_EQ(ou.metrics[0].key, "rewards/rejected");
  EXPECT_EQ(ou.metrics[1].key, "logps/rejected");
  EXPECT_EQ(ou.metrics[1].count, 3);
  EXPECT_EQ(ou.loss, kto_loss(no_ftx, u).loss);
  EXPECT_EQ(ou.d_policy, kto_loss(no_ftx, u).d_policy);
  // ftx at or below 1e-6 adds nothing.
  KtoLossConfig tiny = cfg;
  tiny.ftx = 1e-6;
  EXPECT_EQ(kto_loss(tiny, d).loss, kto_loss(no_ftx, d).loss);
}

TEST(KtoLoss, LogMetricsDivideSumsAndAddMargins) {
  // Two micro-batches' stored sums added up by the caller.
  const std::vector<KtoRatioMetric> summed = {
      {"rewards/chosen", 3.0, 4},    {"logps/chosen", -40.0, 4},   {"logits/chosen", 8.0, 4},
      {"rewards/rejected", -1.0, 2}, {"logps/rejected", -30.0, 2}, {"logits/rejected", 1.0, 2}};
  const auto logs = kto_log_metrics(summed, 0.7);
  const std::vector<std::pair<std::string, double>> want = {
      {"rewards/chosen", 0.75},  {"logps/chosen", -10.0},
      {"logits/chosen", 2.0},    {"rewards/rejected", -0.5},
      {"logps/rejected", -15.0}, {"logits/rejected", 0.5},
      {"rewards/margins", 1.25}, {"kl", 0.7}};
  EXPECT_EQ(logs, want);
  // One split only: no margins.
  const auto only = kto_log_metrics({{"rewards/rejected", -1.0, 2}}, 0.0);
  EXPECT_EQ(only,
            (std::vector<std::pair<std::string, double>>{{"rewards/rejected", -0.5}, {"kl", 0.0}}));
}

TEST(KtoLoss, Errors) {
  const KtoLossInput in = random_batch(1, 3);
  auto error_of = [](const KtoLossConfig& cfg, const KtoLossInput& x) {
    try {
      kto_loss(cfg, x);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_THROW(kto_loss({0.0, 1, 1, 0}, in), ConfigError);
  EXPECT_THROW(kto_loss({0.1, -1, 1, 0}, in), ConfigError);
  EXPECT_THROW(kto_loss({0.1, 1, NAN, 0}, in), ConfigError);
  EXPECT_THROW(kto_loss({0.1, 1, 1, -0.5}, in), ConfigError);
  KtoLossInput bad = in;
  bad.reference_kl.pop_back();
  EXPECT_EQ(error_of({}, bad), "[kto_loss] reference_kl has 2 rows, expected 3 (policy's)");
  bad = in;
  bad.desirable.push_back(1);
  EXPECT_THROW(kto_loss({}, bad), ShapeError);
  bad = in;
  bad.length[1] = 0;
  EXPECT_NE(error_of({}, bad).find("example 1 has length 0"), std::string::npos);
  EXPECT_THROW(kto_loss({}, KtoLossInput{}), ShapeError);
}

}  // namespace
}  // namespace unillm::train
