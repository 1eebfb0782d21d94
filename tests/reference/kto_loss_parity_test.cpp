// train::kto_loss against the independent torch-autograd reference (tests/reference/
// kto_fixtures.py, float64): loss, d loss / d summed policy target log-probs, KL and the sums
// LLaMA-Factory's get_batch_loss_metrics stores (names and order) for mixed and one-sided
// micro-batches, unequal weights, pref_ftx and a clamped KL, to relative 1e-10.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "reference/reference_io.h"
#include "train/stages/kto_loss.h"

namespace unillm {
namespace {

using nlohmann::json;
using reference::how_to_make;
using reference::read_json;
using reference::reference_dir;
using train::KtoLossConfig;
using train::KtoLossInput;
using train::KtoLossOutput;

constexpr double kRel = 1e-10;
constexpr double kAbs = 1e-13;  // floor for values that are 0 up to rounding (saturated terms)

double worst_rel = 0;  // reported at the end: how far inside kRel the C++ lands

void expect_close(double got, double want, const std::string& what) {
  if (want != 0) worst_rel = std::max(worst_rel, std::abs(got - want) / std::abs(want));
  EXPECT_LE(std::abs(got - want), kRel * std::abs(want) + kAbs)
      << what << ": got " << got << ", want " << want;
}

KtoLossInput input_of(const json& c) {
  KtoLossInput in;
  in.policy = c.at("policy").get<std::vector<double>>();
  in.reference = c.at("reference").get<std::vector<double>>();
  in.policy_kl = c.at("policy_kl").get<std::vector<double>>();
  in.reference_kl = c.at("reference_kl").get<std::vector<double>>();
  in.length = c.at("length").get<std::vector<double>>();
  for (int t : c.at("desirable").get<std::vector<int>>()) in.desirable.push_back(t ? 1 : 0);
  return in;
}

// The output as LLaMA-Factory stores it: per split "<key>_sum" entries then "count/<split>",
// then "kl".
std::vector<std::pair<std::string, double>> stored(const KtoLossOutput& out) {
  std::vector<std::pair<std::string, double>> m;
  for (size_t i = 0; i < out.metrics.size(); ++i) {
    const train::KtoRatioMetric& r = out.metrics[i];
    m.emplace_back(r.key + "_sum", r.sum);
    const std::string split = r.key.substr(r.key.find('/') + 1);
    if (i + 1 == out.metrics.size() || out.metrics[i + 1].key.find(split) == std::string::npos)
      m.emplace_back("count/" + split, r.count);
  }
  m.emplace_back("kl", out.kl);
  return m;
}

void check_case(const json& c) {
  const std::string name = c.at("name").get<std::string>();
  KtoLossConfig cfg;
  cfg.beta = c.at("beta").get<double>();
  cfg.desirable_weight = c.at("desirable_weight").get<double>();
  cfg.undesirable_weight = c.at("undesirable_weight").get<double>();
  cfg.ftx = c.at("ftx").get<double>();
  const KtoLossOutput out = train::kto_loss(cfg, input_of(c));
  const json& want = c.at("expected");
  expect_close(out.loss, want.at("loss").get<double>(), name + " loss");
  expect_close(out.kl, want.at("kl").get<double>(), name + " kl");
  const auto wd = want.at("d_policy").get<std::vector<double>>();
  ASSERT_EQ(out.d_policy.size(), wd.size()) << name;
  for (size_t i = 0; i < wd.size(); ++i)
    expect_close(out.d_policy[i], wd[i], name + " d_policy[" + std::to_string(i) + "]");
  const json& wm = want.at("metrics");
  const auto got = stored(out);
  ASSERT_EQ(got.size(), wm.size()) << name;
  for (size_t i = 0; i < wm.size(); ++i) {
    const std::string key = wm[i].at(0).get<std::string>();
    EXPECT_EQ(got[i].first, key) << name << " metric " << i;
    expect_close(got[i].second, wm[i].at(1).get<double>(), name + " " + key);
  }
}

TEST(KtoLossParity, MatchesTorchAutograd) {
  const auto path = reference_dir() / "kto" / "kto_loss.json";
  if (!std::filesystem::exists(path)) FAIL() << path << " missing; " << how_to_make();
  const json fixture = read_json(path);
  bool ftx = false, weighted = false, clamped = false, all_c = false, all_r = false;
  for (const json& c : fixture.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    check_case(c);
    ftx = ftx || c.at("ftx").get<double>() > 0;
    weighted = weighted || c.at("desirable_weight").get<double>() != 1.0;
    clamped = clamped || (c.at("expected").at("kl").get<double>() == 0 &&
                          c.at("policy_kl") != c.at("reference_kl"));
    const auto tags = c.at("desirable").get<std::vector<int>>();
    auto all_are = [&](int v) {
      return tags.size() > 1 &&
             std::all_of(tags.begin(), tags.end(), [v](int t) { return t == v; });
    };
    all_c = all_c || all_are(1);
    all_r = all_r || all_are(0);
  }
  std::cout << "[kto parity] " << fixture.at("cases").size() << " cases, worst relative difference "
            << worst_rel << "\n";
  // The fixture covers what it claims.
  EXPECT_TRUE(ftx);
  EXPECT_TRUE(weighted);
  EXPECT_TRUE(clamped);
  EXPECT_TRUE(all_c);
  EXPECT_TRUE(all_r);
}

}  // namespace
}  // namespace unillm
