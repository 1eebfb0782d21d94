// train::pref_loss: every loss's closed-form gradient against central differences in double (with
// and without ftx, with label smoothing), the closed-form special points (policy == reference,
// hinge kink, kto_pair's clamped KL), the metrics' names and what they average, and the errors.
// Parity with torch autograd is in tests/reference/pref_loss_parity_test.cpp.
#include "train/stages/pref_loss.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "core/error.h"

namespace unillm::train {
namespace {

constexpr PrefLoss kAll[] = {PrefLoss::sigmoid,  PrefLoss::hinge, PrefLoss::ipo,
                             PrefLoss::kto_pair, PrefLoss::orpo,  PrefLoss::simpo};

// B pairs of summed log-probs over 1..40 tokens (−0.2..−3 nats a token), the reference near the
// policy.
PrefLossInput random_batch(uint64_t seed, size_t b, bool reference) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> per_token(-3.0, -0.2), noise(-4.0, 4.0);
  std::uniform_int_distribution<int> len(1, 40);
  PrefLossInput in;
  for (size_t i = 0; i < b; ++i) {
    in.chosen_len.push_back(len(rng));
    in.rejected_len.push_back(len(rng));
    in.policy_chosen.push_back(per_token(rng) * in.chosen_len.back());
    in.policy_rejected.push_back(per_token(rng) * in.rejected_len.back());
    if (reference) {
      in.reference_chosen.push_back(std::min(-0.01, in.policy_chosen.back() + noise(rng)));
      in.reference_rejected.push_back(std::min(-0.01, in.policy_rejected.back() + noise(rng)));
    }
  }
  return in;
}

double metric(const PrefLossOutput& out, const std::string& name) {
  for (const auto& [n, v] : out.metrics)
    if (n == name) return v;
  ADD_FAILURE() << "no metric " << name;
  return NAN;
}

// d loss / d every policy input by central differences vs the returned gradient.
void expect_gradients_match(const PrefLossConfig& cfg, const PrefLossInput& in,
                            const std::string& what) {
  const PrefLossOutput out = pref_loss(cfg, in);
  for (int side = 0; side < 2; ++side) {
    for (size_t i = 0; i < in.policy_chosen.size(); ++i) {
      const double h = 1e-5;
      PrefLossInput plus = in, minus = in;
      (side == 0 ? plus.policy_chosen : plus.policy_rejected)[i] += h;
      (side == 0 ? minus.policy_chosen : minus.policy_rejected)[i] -= h;
      const double fd = (pref_loss(cfg, plus).loss - pref_loss(cfg, minus).loss) / (2 * h);
      const double got = (side == 0 ? out.d_policy_chosen : out.d_policy_rejected)[i];
      EXPECT_NEAR(got, fd, 1e-8 + 1e-6 * std::abs(fd))
          << what << (side == 0 ? " chosen[" : " rejected[") << i << "]";
    }
  }
}

TEST(PrefLoss, GradientsMatchCentralDifferences) {
  for (PrefLoss loss : kAll) {
    for (double ftx : {0.0, 0.5}) {
      if (loss == PrefLoss::kto_pair && ftx > 0) continue;
      for (uint64_t seed : {1, 2, 3}) {
        for (double beta : {0.1, 0.5}) {
          PrefLossConfig cfg{loss, beta, 0.0, ftx, 0.3 + 0.1 * static_cast<double>(seed)};
          const PrefLossInput in = random_batch(seed, 1 + seed * 2, pref_loss_uses_reference(loss));
          expect_gradients_match(cfg, in,
                                 std::string(pref_loss_name(loss)) + " ftx " + std::to_string(ftx) +
                                     " seed " + std::to_string(seed) + " beta " +
                                     std::to_string(beta));
        }
      }
    }
  }
}

TEST(PrefLoss, LabelSmoothingGradientsMatchCentralDifferences) {
  for (double eps : {0.1, 0.5}) {
    for (double ftx : {0.0, 0.25}) {
      PrefLossConfig cfg{PrefLoss::sigmoid, 0.2, eps, ftx};
      expect_gradients_match(cfg, random_batch(11, 4, true), "sigmoid eps " + std::to_string(eps));
    }
  }
  // Smoothing changes the value: cDPO's −ε·logσ(−βz) term.
  const PrefLossInput in = random_batch(12, 3, true);
  EXPECT_NE(pref_loss({PrefLoss::sigmoid, 0.2, 0.1}, in).loss,
            pref_loss({PrefLoss::sigmoid, 0.2, 0.0}, in).loss);
}

// BCO (pref_bco_weight): the baseline δ is detached in LLaMA-Factory, so it is held fixed here.
TEST(PrefLoss, BcoGradientsMatchCentralDifferences) {
  for (PrefLoss loss : {PrefLoss::sigmoid, PrefLoss::hinge, PrefLoss::ipo}) {
    for (double ftx : {0.0, 0.5}) {
      PrefLossConfig cfg{loss, 0.25, 0.0, ftx};
      cfg.bco_weight = 0.7;
      PrefLossInput in = random_batch(21, 5, true);
      in.bco_delta = 0.3;
      expect_gradients_match(cfg, in, std::string("bco ") + pref_loss_name(loss));
    }
  }
}

TEST(PrefLoss, BcoMixesItsTermAndTheBaselineIsARunningMean) {
  PrefLossInput in = random_batch(22, 3, true);
  PrefLossConfig plain{PrefLoss::sigmoid, 0.5}, bco = plain;
  bco.bco_weight = 1.0;
  in.bco_delta = -0.2;
  // (dpo + w·bco) / (1 + w), bco = −logσ(β·ac − δ) − logσ(−(β·ar − δ)), per pair.
  double want = 0;
  for (size_t i = 0; i < 3; ++i) {
    const double ac = 0.5 * (in.policy_chosen[i] - in.reference_chosen[i]) - in.bco_delta;
    const double ar = 0.5 * (in.policy_rejected[i] - in.reference_rejected[i]) - in.bco_delta;
    const double term = std::log1p(std::exp(-ac)) + std::log1p(std::exp(ar));
    PrefLossInput one;
    one.policy_chosen = {in.policy_chosen[i]};
    one.policy_rejected = {in.policy_rejected[i]};
    one.reference_chosen = {in.reference_chosen[i]};
    one.reference_rejected = {in.reference_rejected[i]};
    one.chosen_len = {in.chosen_len[i]};
    one.rejected_len = {in.rejected_len[i]};
    want += (pref_loss(plain, one).loss + term) / 2 / 3;
  }
  EXPECT_NEAR(pref_loss(bco, in).loss, want, 1e-12);
  // The weight at or below 1e-6 is off, as LLaMA-Factory's threshold.
  bco.bco_weight = 1e-7;
  EXPECT_EQ(pref_loss(bco, in).loss, pref_loss(plain, in).loss);
  // RunningMoments fed one value per call: the mean of the values so far.
  BcoRunning r;
  for (double x : {1.0, 2.0, 6.0}) r.update(x);
  EXPECT_NEAR(r.mean, 3.0, 1e-12);
  EXPECT_NEAR(bco_batch_reward(plain, in),
              0.5 * ((in.policy_chosen[0] - in.reference_chosen[0]) + (in.policy_chosen[1] - in.reference_chosen[1]) +
                     (in.policy_chosen[2] - in.reference_chosen[2]) + (in.policy_rejected[0] - in.reference_rejected[0]) +
                     (in.policy_rejected[1] - in.reference_rejected[1]) +
                     (in.policy_rejected[2] - in.reference_rejected[2])) /
                  6,
              1e-12);
}

TEST(PrefLoss, BcoRefusedWithoutAReferenceOrWithKtoPair) {
  PrefLossConfig cfg{PrefLoss::kto_pair, 0.1};
  cfg.bco_weight = 0.5;
  EXPECT_THROW(pref_loss(cfg, random_batch(3, 2, true)), ConfigError);
  cfg.loss = PrefLoss::simpo;
  EXPECT_THROW(pref_loss(cfg, random_batch(3, 2, false)), ConfigError);
}

TEST(PrefLoss, SigmoidAtTheReferenceIsLn2WithZeroRewards) {
  PrefLossInput in = random_batch(5, 4, true);
  in.reference_chosen = in.policy_chosen;
  in.reference_rejected = in.policy_rejected;
  const PrefLossOutput out = pref_loss({PrefLoss::sigmoid, 0.1}, in);
  EXPECT_DOUBLE_EQ(out.loss, std::log(2.0));
  for (size_t i = 0; i < 4; ++i) {  // −β·σ(0) / B and its opposite
    EXPECT_DOUBLE_EQ(out.d_policy_chosen[i], -0.1 * 0.5 / 4);
    EXPECT_DOUBLE_EQ(out.d_policy_rejected[i], 0.1 * 0.5 / 4);
  }
  EXPECT_EQ(metric(out, "rewards/chosen"), 0.0);
  EXPECT_EQ(metric(out, "rewards/rejected"), 0.0);
  EXPECT_EQ(metric(out, "rewards/accuracies"), 0.0);  // 0 > 0 is false
  EXPECT_EQ(metric(out, "rewards/margins"), 0.0);
}

TEST(PrefLoss, HingeKinkHasZeroGradient) {
  // β = 0.5, z = 2: 1 − βz = 0 exactly; torch.relu's gradient there is 0.
  PrefLossInput in{{-3.0, -3.0}, {-5.0, -4.0}, {0.0, 0.0}, {0.0, 0.0}, {4, 4}, {6, 6}};
  const PrefLossOutput out = pref_loss({PrefLoss::hinge, 0.5}, in);
  EXPECT_EQ(out.d_policy_chosen[0], 0.0);
  EXPECT_EQ(out.d_policy_rejected[0], 0.0);
  EXPECT_DOUBLE_EQ(out.d_policy_chosen[1], -0.5 / 2);  // z = 1: inside the hinge
  EXPECT_DOUBLE_EQ(out.d_policy_rejected[1], 0.5 / 2);
  EXPECT_DOUBLE_EQ(out.loss, (0.0 + 0.5) / 2);
}

TEST(PrefLoss, KtoPairClampedKlCarriesNoGradient) {
  const double beta = 0.3;
  // Chosen log-ratios {−2, 0.5}: mean < 0, KL_c clamped to 0; rejected {1, 3}: KL_r = 2.
  PrefLossInput in{{-10, -7.5}, {-9, -7}, {-8, -8}, {-10, -10}, {5, 5}, {5, 5}};
  const PrefLossOutput out = pref_loss({PrefLoss::kto_pair, beta}, in);
  const double a[] = {-2, 0.5}, r[] = {1, 3}, kl_r = 2;
  double sum_ds = 0, loss = 0;
  for (int i = 0; i < 2; ++i) {
    const double sc = 1 / (1 + std::exp(-beta * (a[i] - kl_r)));
    const double sr = 1 / (1 + std::exp(-beta * (0 - r[i])));
    loss += (1 - sc) + (1 - sr);
    sum_ds += beta * sc * (1 - sc);
    // Chosen: only its own term (KL_c is clamped). Rejected: own term + KL_r through every term.
    EXPECT_NEAR(out.d_policy_chosen[i], -beta * sc * (1 - sc) / 4, 1e-15);
  }
  for (int i = 0; i < 2; ++i) {
    const double sr = 1 / (1 + std::exp(-beta * (0 - r[i])));
    EXPECT_NEAR(out.d_policy_rejected[i], (beta * sr * (1 - sr) + sum_ds / 2) / 4, 1e-15);
  }
  EXPECT_NEAR(out.loss, loss / 4, 1e-15);
  expect_gradients_match({PrefLoss::kto_pair, beta}, in, "kto_pair clamped");
  // A mean of exactly 0 is not clamped (torch's clamp passes the gradient where x >= min).
  in.policy_chosen = {-9, -7};  // chosen log-ratios {−1, 1}
  const PrefLossOutput at_zero = pref_loss({PrefLoss::kto_pair, beta}, in);
  const PrefLossOutput clamped = [&] {
    PrefLossInput below = in;
    below.policy_chosen[0] -= 1e-9;
    return pref_loss({PrefLoss::kto_pair, beta}, below);
  }();
  EXPECT_GT(std::abs(at_zero.d_policy_chosen[0] - clamped.d_policy_chosen[0]), 1e-4);
}

TEST(PrefLoss, AveragingLossesSeeLogpsPerToken) {
  PrefLossInput in{{-20.0}, {-30.0}, {-18.0}, {-33.0}, {10}, {15}};
  const PrefLossOutput sig = pref_loss({PrefLoss::sigmoid, 0.1}, in);
  EXPECT_DOUBLE_EQ(metric(sig, "logps/chosen"), -20.0);
  EXPECT_DOUBLE_EQ(metric(sig, "rewards/chosen"), 0.1 * (-20.0 + 18.0));
  const PrefLossOutput ipo = pref_loss({PrefLoss::ipo, 0.1}, in);
  EXPECT_DOUBLE_EQ(metric(ipo, "logps/chosen"), -2.0);
  EXPECT_DOUBLE_EQ(metric(ipo, "logps/rejected"), -2.0);
  EXPECT_DOUBLE_EQ(metric(ipo, "rewards/chosen"), 0.1 * (-2.0 + 1.8));
  // ipo: z = (−2 + 2) − (−1.8 + 2.2) = −0.4; loss (z − 5)², d/dπc_sum = 2(z − 5)/10.
  EXPECT_NEAR(ipo.loss, 5.4 * 5.4, 1e-12);
  EXPECT_NEAR(ipo.d_policy_chosen[0], 2 * -5.4 / 10, 1e-12);
  EXPECT_NEAR(ipo.d_policy_rejected[0], -2 * -5.4 / 15, 1e-12);
  in.reference_chosen.clear();
  in.reference_rejected.clear();
  const PrefLossOutput simpo = pref_loss({PrefLoss::simpo, 2.0, 0, 0, 0.5}, in);
  EXPECT_NEAR(simpo.loss, std::log1p(std::exp(0.5)), 1e-12);  // −logσ(2·0 − 0.5)
  EXPECT_DOUBLE_EQ(metric(simpo, "rewards/chosen"), 2.0 * -2.0);
  EXPECT_EQ(metric(simpo, "rewards/accuracies"), 0.0);
}

TEST(PrefLoss, OrpoStaysFiniteNearCertainty) {
  // Averaged log-probs of −1e-12 a token: log1p(−exp(π)) would cancel to a few digits;
  // log(−expm1(π)) keeps them. log_odds ≈ log(1e-11 / 1e-12) for rejected at −1e-11.
  PrefLossInput in{{-1e-12}, {-1e-11}, {}, {}, {1}, {1}};
  const PrefLossOutput out = pref_loss({PrefLoss::orpo, 0.1}, in);
  const double log_odds = (-1e-12 + 1e-11) - (std::log(1e-12) - std::log(1e-11));
  EXPECT_NEAR(out.loss, 1e-12 + 0.1 * std::log1p(std::exp(-log_odds)), 1e-9);
  EXPECT_TRUE(std::isfinite(out.d_policy_chosen[0]));
  EXPECT_TRUE(std::isfinite(out.d_policy_rejected[0]));
  // d/dπc = −1 − β·σ(−log_odds)/(−expm1(πc)) ≈ −1 − 0.1·(1/11)·1e12.
  EXPECT_NEAR(out.d_policy_chosen[0] / (-0.1 / 11 * 1e12), 1.0, 1e-6);
}

TEST(PrefLoss, MetricNamesFollowLlamaFactory) {
  const PrefLossOutput sig = pref_loss({PrefLoss::sigmoid}, random_batch(3, 2, true));
  const std::vector<std::string> base = {"rewards/chosen",     "rewards/rejected",
                                         "rewards/accuracies", "rewards/margins",
                                         "logps/chosen",       "logps/rejected"};
  ASSERT_EQ(sig.metrics.size(), base.size());
  for (size_t i = 0; i < base.size(); ++i) EXPECT_EQ(sig.metrics[i].first, base[i]);
  PrefLossInput in = random_batch(4, 3, false);
  const PrefLossOutput orpo = pref_loss({PrefLoss::orpo, 0.1, 0, 0.5}, in);
  ASSERT_EQ(orpo.metrics.size(), base.size() + 2);
  EXPECT_EQ(orpo.metrics[6].first, "sft_loss");
  EXPECT_EQ(orpo.metrics[7].first, "odds_ratio_loss");
  // LLaMA-Factory: ((losses − sft_loss) / β).mean(), losses already holding ftx·sft_loss.
  double sft = 0, odds = 0;
  for (size_t i = 0; i < 3; ++i) {
    const double pc = in.policy_chosen[i] / in.chosen_len[i];
    const double pr = in.policy_rejected[i] / in.rejected_len[i];
    const double lo = (pc - pr) - (std::log1p(-std::exp(pc)) - std::log1p(-std::exp(pr)));
    const double ratio = std::log1p(std::exp(-lo));
    sft += -pc / 3;
    odds += ((-pc + 0.1 * ratio + 0.5 * -pc) - -pc) / 0.1 / 3;
  }
  EXPECT_NEAR(metric(orpo, "sft_loss"), sft, 1e-12);
  EXPECT_NEAR(metric(orpo, "odds_ratio_loss"), odds, 1e-9);
}

TEST(PrefLoss, NamesAndProperties) {
  for (PrefLoss loss : kAll) EXPECT_EQ(pref_loss_from_name(pref_loss_name(loss)), loss);
  EXPECT_FALSE(pref_loss_uses_reference(PrefLoss::orpo));
  EXPECT_FALSE(pref_loss_uses_reference(PrefLoss::simpo));
  EXPECT_TRUE(pref_loss_uses_reference(PrefLoss::kto_pair));
  EXPECT_TRUE(pref_loss_averages(PrefLoss::ipo));
  EXPECT_FALSE(pref_loss_averages(PrefLoss::sigmoid));
  EXPECT_FALSE(pref_loss_averages(PrefLoss::kto_pair));
  try {
    pref_loss_from_name("dpo");
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'dpo'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sigmoid, hinge, ipo, kto_pair, orpo, simpo"),
              std::string::npos)
        << e.what();
  }
}

void expect_error_mentions(const PrefLossConfig& cfg, const PrefLossInput& in, bool shape,
                           const std::string& needle) {
  try {
    pref_loss(cfg, in);
    ADD_FAILURE() << "no throw, expected " << needle;
  } catch (const ShapeError& e) {
    EXPECT_TRUE(shape) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  } catch (const ConfigError& e) {
    EXPECT_FALSE(shape) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PrefLoss, RejectsBadConfigsAndShapes) {
  const PrefLossInput in = random_batch(8, 3, true);
  expect_error_mentions({PrefLoss::kto_pair, 0.1, 0, 0.5}, in, false, "kto_pair");
  expect_error_mentions({PrefLoss::hinge, 0.1, 0.1}, in, false, "dpo_label_smoothing");
  expect_error_mentions({PrefLoss::sigmoid, 0.1, 0.7}, in, false, "[0, 0.5]");
  expect_error_mentions({PrefLoss::sigmoid, 0.0}, in, false, "pref_beta");
  expect_error_mentions({PrefLoss::sigmoid, 0.1, 0, -1}, in, false, "pref_ftx");
  PrefLossInput bad = in;
  bad.policy_rejected.pop_back();
  expect_error_mentions({PrefLoss::sigmoid}, bad, true, "policy_rejected has 2 rows, expected 3");
  bad = in;
  bad.reference_chosen.clear();
  expect_error_mentions({PrefLoss::ipo}, bad, true, "reference_chosen has 0 rows");
  bad = in;
  bad.rejected_len.push_back(3);
  expect_error_mentions({PrefLoss::sigmoid}, bad, true, "rejected_len has 4 rows");
  expect_error_mentions({PrefLoss::orpo}, in, true, "uses no reference");
  bad = in;
  bad.chosen_len[1] = 0;
  expect_error_mentions({PrefLoss::sigmoid}, bad, true, "pair 1");
  expect_error_mentions({PrefLoss::sigmoid}, PrefLossInput{}, true, "empty");
  // ftx at or below LLaMA-Factory's 1e-6 threshold is off, so kto_pair accepts it.
  EXPECT_NO_THROW(pref_loss({PrefLoss::kto_pair, 0.1, 0, 1e-7}, in));
}

}  // namespace
}  // namespace unillm::train
