// Stage dpo against the independent PyTorch reference (tests/reference/dpo_fixtures.py): one
// micro-batch of pairs through a tiny random model with a LoRA adapter (the policy) and without
// it (the reference): the loss, every logged metric and the gradient of every A and B, with and
// without recompute, for sigmoid (plain; label smoothing + pref_ftx), ipo and orpo.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <set>

#include "models/adapter.h"
#include "models/causal_lm.h"
#include "reference/adapter_fixture.h"
#include "reference/reference_io.h"
#include "support/expect.h"
#include "train/finetune.h"
#include "train/stages/stage.h"

namespace unillm {
namespace {

using nlohmann::json;
using reference::how_to_make;
using reference::read_json;
using reference::reference_dir;
namespace fs = std::filesystem;

// The fixture's batch as the loader lays out pairs (chosen rows, then rejected; group 2).
data::Batch pair_batch(const json& j) {
  data::Batch b;
  const auto ids = j.at("input_ids").get<std::vector<std::vector<int32_t>>>();
  const auto labels = j.at("labels").get<std::vector<std::vector<int32_t>>>();
  b.rows = static_cast<int64_t>(ids.size());
  b.seq_len = static_cast<int64_t>(ids.at(0).size());
  b.group = 2;
  for (int64_t r = 0; r < b.rows; ++r) {
    b.input_ids.insert(b.input_ids.end(), ids[r].begin(), ids[r].end());
    b.labels.insert(b.labels.end(), labels[r].begin(), labels[r].end());
    b.row_indices.push_back(r);
  }
  b.lengths = j.at("lengths").get<std::vector<int32_t>>();
  return b;
}

class DpoParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    testing::init_cpu();
    dir_ = reference_dir() / ("dpo_" + GetParam());
    if (!fs::exists(dir_ / "dpo.json")) GTEST_SKIP() << "fixture " << dir_ << " missing; " << how_to_make();
    fix_ = read_json(dir_ / "dpo.json");
    model_ = models::load_causal_lm((dir_ / fix_.at("model_dir").get<std::string>()).string());
    models::load_adapter(*model_, (dir_ / "adapter").string(), "default");
    model_->set_active_adapters({"default"});
    args_.stage = "dpo";
    args_.pref_loss = fix_.at("pref_loss").get<std::string>();
    args_.pref_beta = fix_.at("pref_beta").get<double>();
    args_.pref_ftx = fix_.at("pref_ftx").get<double>();
    args_.dpo_label_smoothing = fix_.at("dpo_label_smoothing").get<double>();
    if (fix_.contains("ld_alpha") && !fix_.at("ld_alpha").is_null()) args_.ld_alpha = fix_.at("ld_alpha").get<double>();
  }
  fs::path dir_;
  json fix_;
  std::unique_ptr<models::CausalLM> model_;
  train::TrainArgs args_;
};

TEST_P(DpoParity, LossMetricsAndAdapterGradients) {
  const auto want = reference::read_tensors(dir_ / fix_.at("grads_file").get<std::string>(), fix_.at("grads"));
  const data::Batch batch = pair_batch(fix_.at("batch"));
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recompute" : "no recompute");
    for (auto& r : model_->module().parameters()) r.tensor->set_grad(Tensor());
    auto stage = train::make_stage(args_);
    train::MicroOptions o;
    o.seed = 1;
    o.recompute = recompute;
    const train::MicroResult got = stage->train_micro(*model_, batch, o);
    const double want_loss = fix_.at("loss").get<double>();
    EXPECT_LE(std::fabs(got.loss - want_loss), fix_.at("loss_rtol").get<double>() * std::fabs(want_loss));
    const json& wm = fix_.at("metrics");
    ASSERT_EQ(got.metrics.size(), wm.size());
    for (size_t i = 0; i < wm.size(); ++i) {
      const auto name = wm[i].at(0).get<std::string>();
      const double v = wm[i].at(1).get<double>();
      EXPECT_EQ(got.metrics[i].first, name);
      EXPECT_NEAR(got.metrics[i].second, v, 1e-5 * (1 + std::fabs(v))) << name;
    }
    for (auto& r : model_->module().parameters()) {
      if (r.adapter.empty()) {
        EXPECT_FALSE(r.tensor->grad().defined()) << r.hf_names.at(0) << " is frozen";
      }
    }
    std::string worst_name;
    const double worst = reference::worst_rel(model_->module().named_adapter_parameters("default", true), want, {},
                                              fix_.at("grad_rtol").get<double>(), worst_name);
    std::cout << "[dpo-parity] " << GetParam() << (recompute ? " recompute" : "") << ": loss " << got.loss << " vs "
              << want_loss << ", worst grad ‖Δ‖/‖ref‖ " << worst << " (" << worst_name << ")\n";
  }
}

// Stage rm: TRL's value head on each row's last real token, LLaMA-Factory's pairwise loss; the
// loss, the scores and the gradients of the adapter and the value head.
class RmParity : public ::testing::TestWithParam<std::string> {};

TEST_P(RmParity, LossScoresAndGradients) {
  testing::init_cpu();
  const fs::path dir = reference_dir() / ("dpo_" + GetParam());
  if (!fs::exists(dir / "rm.json")) GTEST_SKIP() << "fixture " << dir << " missing; " << how_to_make();
  const json fix = read_json(dir / "rm.json");
  auto model = models::load_causal_lm((dir / fix.at("model_dir").get<std::string>()).string());
  train::TrainArgs a;
  a.stage = "rm";
  a.finetuning_type = "lora";
  a.adapter_name_or_path = {(dir / "adapter").string()};
  models::load_adapter(*model, (dir / "adapter").string(), train::kTrainAdapter);
  for (auto& p : model->module().parameters()) p.tensor->set_requires_grad(p.adapter == train::kTrainAdapter);
  model->set_active_adapters({train::kTrainAdapter});
  auto stage = train::make_stage(a);
  train::PrepareContext ctx;
  ctx.model_dir = (dir / fix.at("model_dir").get<std::string>()).string();
  ctx.say = [](const std::string&) {};
  stage->prepare(*model, ctx);
  train::MicroOptions o;
  o.seed = 1;  // no rng: no dropout, as the fixture
  const train::MicroResult got = stage->train_micro(*model, pair_batch(fix.at("batch")), o);
  const double want_loss = fix.at("loss").get<double>();
  EXPECT_LE(std::fabs(got.loss - want_loss), fix.at("loss_rtol").get<double>() * std::fabs(want_loss));
  std::string worst_name;
  const auto want = reference::read_tensors(dir / fix.at("grads_file").get<std::string>(), fix.at("grads"));
  const double worst = reference::worst_rel(model->module().named_adapter_parameters(train::kTrainAdapter, true), want,
                                            {}, fix.at("grad_rtol").get<double>(), worst_name);
  // The value head's gradient (its parameters are not in the model).
  const auto gw = fix.at("head_grad").at("weight").get<std::vector<double>>();
  const std::vector<float> hw = stage->extra_modules().at(0)->named_grads().at(0).second.to_float_vector();
  ASSERT_EQ(hw.size(), gw.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < gw.size(); ++i) num += (hw[i] - gw[i]) * (hw[i] - gw[i]), den += gw[i] * gw[i];
  EXPECT_LE(std::sqrt(num / den), 1e-4);
  const float hb = stage->extra_modules().at(0)->named_grads().at(1).second.to_float_vector().at(0);
  EXPECT_NEAR(hb, fix.at("head_grad").at("bias").get<double>(), 1e-4 * (1 + std::fabs(fix.at("head_grad").at("bias").get<double>())));
  std::cout << "[rm-parity] " << GetParam() << ": loss " << got.loss << " vs " << want_loss << ", worst adapter grad "
            << worst << " (" << worst_name << "), head grad rel " << std::sqrt(num / den) << "\n";
}

INSTANTIATE_TEST_SUITE_P(Reference, RmParity, ::testing::Values("llama_rm", "qwen2_rm"));

// LLaMA-Factory v1's reward model: a *ForTokenClassification dir (the decoder and score.*, no
// lm_head) loaded as written, its score head read by the stage (a resumed run's path), the pairwise
// loss on each side's last token weighed by the micro-batch's scored tokens; the loss and the
// gradient of every decoder weight and of the score head, full fine-tuning.
class V1RmParity : public ::testing::TestWithParam<std::string> {};

TEST_P(V1RmParity, LossAndEveryGradient) {
  testing::init_cpu();
  const fs::path dir = reference_dir() / ("dpo_" + GetParam());
  if (!fs::exists(dir / "v1rm.json")) GTEST_SKIP() << "fixture " << dir << " missing; " << how_to_make();
  const json fix = read_json(dir / "v1rm.json");
  const std::string mdir = (dir / fix.at("model_dir").get<std::string>()).string();
  auto model = models::load_causal_lm(mdir);
  ASSERT_TRUE(model->config().token_classification);
  for (auto& p : model->module().parameters()) p.tensor->set_requires_grad(true);
  train::TrainArgs a;
  a.stage = "rm";
  a.finetuning_type = "full";
  a.v1_train_dataset = "pairs.jsonl";  // a v1 config's
  auto stage = train::make_stage(a);
  train::PrepareContext ctx;
  ctx.model_dir = mdir;
  ctx.resume_dir = mdir;
  std::string said;
  ctx.say = [&](const std::string& s) { said += s + "\n"; };
  stage->prepare(*model, ctx);
  EXPECT_NE(said.find("score head: " + mdir), std::string::npos) << said;
  train::MicroOptions o;
  o.seed = 1;
  const train::MicroResult got = stage->train_micro(*model, pair_batch(fix.at("batch")), o);
  const double want_loss = fix.at("loss").get<double>();
  EXPECT_LE(std::fabs(got.loss - want_loss), fix.at("loss_rtol").get<double>() * std::fabs(want_loss));
  const auto want = reference::read_tensors(dir / fix.at("grads_file").get<std::string>(), fix.at("grads"));
  nn::NamedTensors grads = model->module().named_grads();
  for (const auto& g : stage->extra_modules().at(0)->named_grads()) grads.push_back(g);
  double worst = 0;
  std::string worst_name;
  std::set<std::string> seen;
  for (const auto& [name, t] : grads) {
    auto it = want.find(name);
    if (it == want.end()) {
      ADD_FAILURE() << name << " has a gradient the fixture does not";
      continue;
    }
    seen.insert(name);
    const std::vector<float> g = t.contiguous().to(Device{}).to_float_vector();
    ASSERT_EQ(g.size(), it->second.size()) << name;
    double num = 0, den = 0;
    for (size_t i = 0; i < g.size(); ++i)
      num += (g[i] - it->second[i]) * (g[i] - it->second[i]), den += it->second[i] * it->second[i];
    const double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
    EXPECT_LE(rel, fix.at("grad_rtol").get<double>()) << name;
    if (!(rel <= worst)) worst = rel, worst_name = name;
  }
  for (const auto& [name, _] : want) EXPECT_TRUE(seen.count(name)) << name << ": no gradient on the unillm side";
  std::cout << "[v1-rm-parity] " << GetParam() << ": loss " << got.loss << " vs " << want_loss << ", worst grad "
            << worst << " (" << worst_name << ")\n";
}

INSTANTIATE_TEST_SUITE_P(Reference, V1RmParity, ::testing::Values("llama_v1_rm", "qwen2_v1_rm"));

// Stage kto: target rows with gradients, KL rows without, the reference without the adapter;
// LLaMA-Factory's stored sums (rewards/logps per split with their counts, kl) and the gradients.
class KtoParity : public ::testing::TestWithParam<std::string> {};

TEST_P(KtoParity, LossStoredSumsAndAdapterGradients) {
  testing::init_cpu();
  const fs::path dir = reference_dir() / ("dpo_" + GetParam());
  if (!fs::exists(dir / "kto.json")) GTEST_SKIP() << "fixture " << dir << " missing; " << how_to_make();
  const json fix = read_json(dir / "kto.json");
  auto model = models::load_causal_lm((dir / fix.at("model_dir").get<std::string>()).string());
  models::load_adapter(*model, (dir / "adapter").string(), "default");
  model->set_active_adapters({"default"});
  train::TrainArgs a;
  a.stage = "kto";
  a.pref_beta = fix.at("pref_beta").get<double>();
  a.kto_chosen_weight = fix.at("kto_chosen_weight").get<double>();
  a.kto_rejected_weight = fix.at("kto_rejected_weight").get<double>();
  a.pref_ftx = fix.at("pref_ftx").get<double>();
  data::Batch b = pair_batch(fix.at("batch"));
  for (const auto& t : fix.at("batch").at("tags")) b.tags.push_back(static_cast<uint8_t>(t.get<int>()));
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recompute" : "no recompute");
    for (auto& r : model->module().parameters()) r.tensor->set_grad(Tensor());
    train::MicroOptions o;
    o.seed = 1;
    o.recompute = recompute;
    const train::MicroResult got = train::make_stage(a)->train_micro(*model, b, o);
    const double want_loss = fix.at("loss").get<double>();
    EXPECT_LE(std::fabs(got.loss - want_loss), fix.at("loss_rtol").get<double>() * std::fabs(want_loss));
    // LLaMA-Factory's stored "<key>_sum" / "count/<split>" / "kl" against the stage's sums.
    auto sum_of = [&](const std::string& name) -> const train::SumMetric* {
      for (const auto& m : got.sums)
        if (m.name == name) return &m;
      return nullptr;
    };
    for (const auto& e : fix.at("stored_metrics")) {
      const auto key = e.at(0).get<std::string>();
      const double v = e.at(1).get<double>();
      const train::SumMetric* m = nullptr;
      double have = NAN;
      if (key == "kl") {
        m = sum_of("kl");
        if (m) have = m->sum;
      } else if (key.rfind("count/", 0) == 0) {
        m = sum_of("rewards/" + key.substr(6));
        if (m) have = m->count;
      } else {
        m = sum_of(key.substr(0, key.size() - 4));  // "rewards/chosen_sum" -> "rewards/chosen"
        if (m) have = m->sum;
      }
      ASSERT_NE(m, nullptr) << key;
      EXPECT_NEAR(have, v, 1e-5 * (1 + std::fabs(v))) << key;
    }
    std::string worst_name;
    const auto want = reference::read_tensors(dir / fix.at("grads_file").get<std::string>(), fix.at("grads"));
    const double worst = reference::worst_rel(model->module().named_adapter_parameters("default", true), want, {},
                                              fix.at("grad_rtol").get<double>(), worst_name);
    std::cout << "[kto-parity] " << GetParam() << (recompute ? " recompute" : "") << ": loss " << got.loss << " vs "
              << want_loss << ", worst grad " << worst << " (" << worst_name << ")\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Reference, KtoParity, ::testing::Values("llama_kto", "qwen2_kto_weighted_ftx"));

INSTANTIATE_TEST_SUITE_P(Reference, DpoParity,
                         ::testing::Values("llama_sigmoid", "llama_sigmoid_ld", "llama_sigmoid_smoothed_ftx", "qwen2_ipo",
                                           "qwen2_orpo"));

}  // namespace
}  // namespace unillm
