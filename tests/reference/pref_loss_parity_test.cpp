// train::pref_loss against the independent torch-autograd reference (tests/reference/
// pref_fixtures.py, float64): loss, d loss / d summed policy log-probs and LLaMA-Factory's metrics
// (names and order) for every loss type, with pref_ftx, dpo_label_smoothing and pref_bco_weight (BCO's
// running baseline), to relative 1e-10.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "reference/reference_io.h"
#include "train/stages/pref_loss.h"

namespace unillm {
namespace {

using nlohmann::json;
using reference::how_to_make;
using reference::read_json;
using reference::reference_dir;
using train::PrefLossConfig;
using train::PrefLossInput;
using train::PrefLossOutput;

constexpr double kRel = 1e-10;
constexpr double kAbs = 1e-13;  // floor for values that are 0 up to rounding (margins, kinks)

double worst_rel = 0;  // reported at the end: how far inside kRel the C++ lands

void expect_close(double got, double want, const std::string& what) {
  if (want != 0) worst_rel = std::max(worst_rel, std::abs(got - want) / std::abs(want));
  EXPECT_LE(std::abs(got - want), kRel * std::abs(want) + kAbs)
      << what << ": got " << got << ", want " << want;
}

PrefLossInput input_of(const json& c) {
  PrefLossInput in;
  in.policy_chosen = c.at("policy_chosen").get<std::vector<double>>();
  in.policy_rejected = c.at("policy_rejected").get<std::vector<double>>();
  in.reference_chosen = c.at("reference_chosen").get<std::vector<double>>();
  in.reference_rejected = c.at("reference_rejected").get<std::vector<double>>();
  in.chosen_len = c.at("chosen_len").get<std::vector<double>>();
  in.rejected_len = c.at("rejected_len").get<std::vector<double>>();
  return in;
}

void check_case(const json& c) {
  const std::string name = c.at("name").get<std::string>();
  PrefLossConfig cfg;
  cfg.loss = train::pref_loss_from_name(c.at("loss").get<std::string>());
  cfg.beta = c.at("beta").get<double>();
  cfg.label_smoothing = c.at("label_smoothing").get<double>();
  cfg.ftx = c.at("ftx").get<double>();
  cfg.simpo_gamma = c.at("simpo_gamma").get<double>();
  cfg.bco_weight = c.value("bco_weight", 0.0);
  PrefLossInput in = input_of(c);
  const json& want = c.at("expected");
  if (train::pref_loss_uses_bco(cfg)) {  // the baseline as the dpo stage keeps it
    train::BcoRunning running;
    for (double x : c.at("bco_history").get<std::vector<double>>()) running.update(x);
    running.update(train::bco_batch_reward(cfg, in));
    in.bco_delta = running.mean;
    expect_close(running.mean, want.at("bco_mean").get<double>(), name + " bco_mean");
  }
  const PrefLossOutput out = train::pref_loss(cfg, in);
  expect_close(out.loss, want.at("loss").get<double>(), name + " loss");
  const auto wc = want.at("d_policy_chosen").get<std::vector<double>>();
  const auto wr = want.at("d_policy_rejected").get<std::vector<double>>();
  ASSERT_EQ(out.d_policy_chosen.size(), wc.size()) << name;
  ASSERT_EQ(out.d_policy_rejected.size(), wr.size()) << name;
  for (size_t i = 0; i < wc.size(); ++i) {
    expect_close(out.d_policy_chosen[i], wc[i],
                 name + " d_policy_chosen[" + std::to_string(i) + "]");
    expect_close(out.d_policy_rejected[i], wr[i],
                 name + " d_policy_rejected[" + std::to_string(i) + "]");
  }
  const json& wm = want.at("metrics");
  ASSERT_EQ(out.metrics.size(), wm.size()) << name;
  for (size_t i = 0; i < wm.size(); ++i) {
    const std::string key = wm[i].at(0).get<std::string>();
    EXPECT_EQ(out.metrics[i].first, key) << name << " metric " << i;
    expect_close(out.metrics[i].second, wm[i].at(1).get<double>(), name + " " + key);
  }
}

TEST(PrefLossParity, EveryLossMatchesTorchAutograd) {
  const auto path = reference_dir() / "pref" / "pref_loss.json";
  if (!std::filesystem::exists(path)) FAIL() << path << " missing; " << how_to_make();
  const json fixture = read_json(path);
  std::set<std::string> losses;
  bool ftx = false, smoothing = false, bco = false;
  for (const json& c : fixture.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    check_case(c);
    losses.insert(c.at("loss").get<std::string>());
    ftx = ftx || c.at("ftx").get<double>() > 0;
    smoothing = smoothing || c.at("label_smoothing").get<double>() > 0;
    bco = bco || c.value("bco_weight", 0.0) > 0;
  }
  std::cout << "[pref parity] " << fixture.at("cases").size()
            << " cases, worst relative difference " << worst_rel << "\n";
  // The fixture covers what it claims: every loss, the ftx term and label smoothing.
  EXPECT_EQ(losses,
            (std::set<std::string>{"sigmoid", "hinge", "ipo", "kto_pair", "orpo", "simpo"}));
  EXPECT_TRUE(ftx);
  EXPECT_TRUE(smoothing);
  EXPECT_TRUE(bco);
}

}  // namespace
}  // namespace unillm
