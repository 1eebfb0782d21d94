// LoRA parity against the independent PyTorch LoRA reference (tests/reference/lora_fixtures.py):
// a PEFT-layout adapter written by Python loads; logits with the adapter and after merging it;
// the loss and the gradient of every A and B (with and without recompute); one clipped AdamW
// step over the arena (which holds only the adapter: the base stays frozen).
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>

#include "autograd/engine.h"
#include "models/adapter.h"
#include "models/causal_lm.h"
#include "reference/adapter_fixture.h"
#include "reference/reference_io.h"
#include "support/expect.h"
#include "train/adamw.h"
#include "train/arena.h"

namespace unillm {
namespace {

using nlohmann::json;
using reference::how_to_make;
using reference::read_f32;
using reference::read_json;
using reference::reference_dir;
namespace fs = std::filesystem;

using reference::batch_of;
using reference::read_tensors;
using reference::worst_rel;

class LoraParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    testing::init_cpu();
    dir_ = reference_dir() / ("lora_" + GetParam());
    if (!fs::exists(dir_ / "lora.json"))
      GTEST_SKIP() << "fixture " << dir_ << " missing; " << how_to_make();
    fix_ = read_json(dir_ / "lora.json");
    model_ = models::load_causal_lm((dir_ / fix_.at("model_dir").get<std::string>()).string());
    const nn::LoraConfig c = models::load_adapter(*model_, (dir_ / "adapter").string(), "default");
    EXPECT_NEAR(c.scaling(), fix_.at("scaling").get<double>(), 1e-12);
    model_->set_active_adapters({"default"});
  }
  std::vector<float> want_logits() {
    const auto shape = fix_.at("logits_shape").get<Shape>();
    return read_f32(dir_ / "logits.f32", shape_numel(shape));
  }
  double logits_diff(const std::vector<float>& want) {
    const std::vector<float> got =
        model_->logits_all(fix_.at("prompt_ids").get<std::vector<int32_t>>()).to_float_vector();
    EXPECT_EQ(got.size(), want.size());
    double d = 0;
    for (size_t i = 0; i < got.size() && i < want.size(); ++i)
      d = std::max(d, std::fabs(double(got[i]) - want[i]));
    return d;
  }
  fs::path dir_;
  json fix_;
  std::unique_ptr<models::CausalLM> model_;
};

TEST_P(LoraParity, LogitsWithAdapterAndMerged) {
  const std::vector<float> want = want_logits();
  const double atol = fix_.at("atol").get<double>();
  const double adapted = logits_diff(want);
  model_->merge_adapter("default");
  EXPECT_TRUE(model_->module().named_adapter_parameters("default").empty());
  const double merged = logits_diff(want);
  EXPECT_LE(adapted, atol);
  EXPECT_LE(merged, atol);
  std::cout << "[lora-parity] " << GetParam() << ": logits max |d| with adapter " << adapted
            << ", merged " << merged << " (adapter moves logits by "
            << fix_.at("adapter_effect").get<double>() << ")\n";
}

TEST_P(LoraParity, GradientsOfAAndB) {
  const auto want = read_tensors(dir_ / fix_.at("grads_file").get<std::string>(), fix_.at("grads"));
  for (bool recompute : {false, true}) {
    for (auto& r : model_->module().parameters()) r.tensor->set_grad(Tensor());
    models::LossResult out = model_->loss(batch_of(fix_.at("batch")), recompute);
    const double loss = out.loss_sum.to_float_vector().at(0),
                 want_loss = fix_.at("loss_sum").get<double>();
    EXPECT_EQ(out.count, fix_.at("count").get<int64_t>());
    EXPECT_LE(std::fabs(loss - want_loss) / want_loss, fix_.at("loss_rtol").get<double>());
    autograd::backward(out.loss_sum,
                       Tensor::from_vector({1.0f / static_cast<float>(out.count)}, {}));
    for (auto& r : model_->module().parameters()) {
      if (!r.adapter.empty()) continue;
      EXPECT_FALSE(r.tensor->grad().defined()) << r.hf_names.at(0) << " is frozen";
    }
    std::string worst_name;
    const double worst = worst_rel(model_->module().named_adapter_parameters("default", true), want,
                                   {}, fix_.at("grad_rtol").get<double>(), worst_name);
    std::cout << "[lora-parity] " << GetParam() << (recompute ? " recompute" : "") << ": loss rel "
              << std::fabs(loss - want_loss) / want_loss << ", worst grad ‖Δ‖/‖ref‖ " << worst
              << " (" << worst_name << "); f32 reference noise "
              << fix_.at("f32_reference_noise").at("worst_grad_rel").get<double>() << "\n";
  }
}

TEST_P(LoraParity, OneAdamWStep) {
  const auto want =
      read_tensors(dir_ / fix_.at("step_file").get<std::string>(), fix_.at("step_tensors"));
  std::map<std::string, std::vector<float>> initial;
  for (auto& [name, t] : model_->module().named_adapter_parameters("default"))
    initial[models::peft_key(name, "default")] = t.contiguous().to_float_vector();
  train::ParamArena arena(model_->module());
  int64_t adapter_numel = 0;
  for (const auto& [k, v] : initial) adapter_numel += static_cast<int64_t>(v.size());
  EXPECT_EQ(arena.numel(), adapter_numel);  // only the adapter is packed
  const json& s = fix_.at("step");
  train::AdamW opt(arena, {s.at("betas").at(0).get<double>(), s.at("betas").at(1).get<double>(),
                           s.at("eps").get<double>(), s.at("weight_decay").get<double>()});
  models::LossResult out = model_->loss(batch_of(fix_.at("batch")), true);
  autograd::backward(out.loss_sum, Tensor::from_vector({1.0f / static_cast<float>(out.count)}, {}));
  const double norm = train::clip_grad_norm(arena, s.at("max_grad_norm").get<double>());
  EXPECT_LE(std::fabs(norm - s.at("grad_norm").get<double>()),
            1e-4 * s.at("grad_norm").get<double>());
  opt.step(s.at("lr").get<double>());
  std::string wn, un;
  const auto got = model_->module().named_adapter_parameters("default");
  const double w = worst_rel(got, want, {}, fix_.at("step_rtol").get<double>(), wn);
  const double u = worst_rel(got, want, initial, fix_.at("update_rtol").get<double>(), un);
  std::cout << "[lora-parity] " << GetParam() << " AdamW step: grad norm " << norm << " vs "
            << s.at("grad_norm").get<double>() << "; weights worst ‖Δ‖/‖ref‖ " << w << " (" << wn
            << "), vs the update ‖Δ‖/‖ref − initial‖ " << u << " (" << un << ")\n";
}

INSTANTIATE_TEST_SUITE_P(Reference, LoraParity,
                         ::testing::Values("llama_qv", "llama_all_rslora", "qwen2_all"));

}  // namespace
}  // namespace unillm
