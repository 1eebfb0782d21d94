// Training parity against the independent PyTorch reference (tests/reference/train_fixtures.py):
// the loss and every parameter gradient of each tiny family model, with and without per-layer
// recompute, plain and packed (segment ids), and for the mixture-of-experts models with the router
// load-balancing loss over padded rows (variant aux); and five AdamW pretraining steps (warm-up + linear
// schedule, global-norm clipping) against torch.optim.AdamW: per-step loss and final weights.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "models/causal_lm.h"
#include "reference/reference_io.h"
#include "support/expect.h"
#include "train/adamw.h"
#include "train/arena.h"
#include "train/lr_schedule.h"

namespace unillm {
namespace {

using nlohmann::json;
using reference::how_to_make;
using reference::model_dir_of;
using reference::read_f32;
using reference::read_json;
using reference::reference_dir;
namespace fs = std::filesystem;

using reference::batch_of;

std::unique_ptr<models::CausalLM> trainable_model(const fs::path& dir) {
  auto model = models::load_causal_lm(dir.string());
  for (auto& p : model->module().parameters()) p.tensor->set_requires_grad(true);
  return model;
}

// Per-tensor ‖got − ref‖ / ‖ref − base‖ of HF-named tensors against a fixture's f32 file + index
// (base: zero, or e.g. the weights before training, to measure against the update itself).
struct TensorsDiff {
  double worst = 0;
  std::string worst_name;
  std::map<std::string, double> rel;  // by name
};

std::vector<float> values_of(const Tensor& t) {
  return t.contiguous().to(Device{}).to_float_vector();
}

TensorsDiff compare_tensors(const nn::NamedTensors& got, const fs::path& dir, const json& fix,
                            const nn::NamedTensors& base = {}) {
  int64_t total = 0;
  for (const json& t : fix.at("tensors")) {
    int64_t n = 1;
    for (const json& d : t.at("shape")) n *= d.get<int64_t>();
    total = std::max(total, t.at("offset").get<int64_t>() + n);
  }
  const std::vector<float> data = read_f32(dir / fix.at("tensors_file").get<std::string>(), total);
  std::map<std::string, Tensor> by_name(got.begin(), got.end()),
      base_by_name(base.begin(), base.end());
  TensorsDiff diff;
  std::set<std::string> seen;
  for (const json& t : fix.at("tensors")) {
    const std::string name = t.at("name").get<std::string>();
    seen.insert(name);
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      ADD_FAILURE() << name << ": no such tensor on the unillm side";
      continue;
    }
    const Shape want_shape = t.at("shape").get<Shape>();
    EXPECT_EQ(shape_str(it->second.shape()), shape_str(want_shape)) << name;
    const std::vector<float> g = values_of(it->second);
    const std::vector<float> b =
        base.empty() ? std::vector<float>(g.size()) : values_of(base_by_name.at(name));
    const int64_t off = t.at("offset").get<int64_t>();
    double num = 0, den = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      const double r = data[static_cast<size_t>(off) + i];
      num += (g[i] - r) * (g[i] - r);
      den += (r - b[i]) * (r - b[i]);
    }
    const double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
    diff.rel[name] = rel;
    if (!(rel <= diff.worst)) {  // also catches NaN
      diff.worst = std::isnan(rel) ? INFINITY : rel;
      diff.worst_name = name;
    }
  }
  for (const auto& [name, _] : got) EXPECT_TRUE(seen.count(name)) << name << " not in the fixture";
  return diff;
}

struct GradCase {
  std::string model, variant;
  bool recompute;
};

void PrintTo(const GradCase& c, std::ostream* os) {
  *os << c.model << " " << c.variant << (c.recompute ? " recompute" : "");
}

class GradParity : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradParity, MatchesReference) {
  testing::init_cpu();
  const GradCase c = GetParam();
  const fs::path dir = reference_dir() / c.model;
  const fs::path fixture = dir / ("grad_" + c.variant + ".json");
  if (!fs::exists(fixture)) GTEST_SKIP() << "fixture " << fixture << " missing; " << how_to_make();
  const json fix = read_json(fixture);

  auto model = trainable_model(model_dir_of(dir, fix));
  models::TrainBatch batch = batch_of(fix.at("batch"));
  // The router load-balancing loss (variant aux): its gradient, seeded with the coefficient, is
  // added by the routers' backward; the expected gradients are of loss_sum / count + coef · aux.
  const double coef = fix.value("router_aux_loss_coef", 0.0);
  if (coef > 0) batch.moe_balance = models::moe_balance_for(batch, model->config(), coef);
  models::LossResult out = model->loss(batch, c.recompute);
  const double loss_sum = out.loss_sum.to(Device{}).to_float_vector().at(0);
  const double want_loss = fix.at("loss_sum").get<double>();
  const double loss_rel = std::fabs(loss_sum - want_loss) / std::fabs(want_loss);
  EXPECT_EQ(out.count, fix.at("count").get<int64_t>());
  EXPECT_LE(loss_rel, fix.value("loss_rtol", 1e-5)) << loss_sum << " vs " << want_loss;

  autograd::backward(out.loss_sum, Tensor::from_vector({1.0f / static_cast<float>(out.count)}, {}));
  if (coef > 0) {
    const double aux = batch.moe_balance->loss(), want_aux = fix.at("aux_loss").get<double>();
    EXPECT_LE(std::fabs(aux - want_aux) / want_aux, 1e-5) << aux << " vs " << want_aux;
    // Every sparse layer recorded once, also with recompute (its re-run does not record again).
    int64_t sparse = 0;
    for (int64_t l = 0; l < model->config().num_layers; ++l) sparse += model->config().sparse_layer(l) ? 1 : 0;
    EXPECT_EQ(batch.moe_balance->layers(), sparse);
    std::cout << "[train-parity] " << c.model << " aux " << aux << " vs " << want_aux << "\n";
  }
  // A parameter backward never reached (an expert no token was routed to) has no gradient: zeros,
  // as the reference records it.
  nn::NamedTensors grads = model->module().named_grads();
  std::set<std::string> with_grad;
  for (const auto& [name, _] : grads) with_grad.insert(name);
  for (const auto& [name, p] : model->named_parameters())
    if (!with_grad.count(name)) grads.emplace_back(name, Tensor::zeros(p.shape(), DType::f32, p.device()));
  const TensorsDiff diff = compare_tensors(grads, dir, fix);
  const double rtol = fix.value("grad_rtol", 1e-4);
  for (const auto& [name, rel] : diff.rel) EXPECT_LE(rel, rtol) << name;
  std::cout << "[train-parity] " << c.model << " " << c.variant
            << (c.recompute ? " recompute" : " no-recompute") << ": loss_sum " << loss_sum
            << " (rel " << loss_rel << "), count " << out.count << "; worst grad ‖Δ‖/‖ref‖ "
            << diff.worst << " (" << diff.worst_name << ") over " << diff.rel.size()
            << " tensors; f32 reference noise "
            << fix.at("f32_reference_noise").at("worst_grad_rel").get<double>() << "\n";
  RecordProperty("worst_grad_rel", std::to_string(diff.worst));
}

std::vector<GradCase> grad_cases() {
  std::vector<GradCase> cases;
  for (const char* m : {"llama_gqa", "llama_linear", "qwen2", "qwen3", "mistral", "qwen2_yarn", "llama_dynamic",
                        "qwen3_moe", "qwen2_moe"})
    for (bool r : {false, true}) cases.push_back({m, "plain", r});
  for (bool r : {false, true}) cases.push_back({"llama_gqa", "packed", r});
  for (const char* m : {"qwen3_moe", "qwen2_moe"})
    for (bool r : {false, true}) cases.push_back({m, "aux", r});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Reference, GradParity, ::testing::ValuesIn(grad_cases()),
                         [](const auto& info) {
                           return info.param.model + "_" + info.param.variant +
                                  (info.param.recompute ? "_recompute" : "");
                         });

// ------------------------------------------------------------------------------ five steps

// HF's decay rule as the fixture applied it, against train::decays() and the arena's segments.
void expect_decay_rule(const json& fix, const train::ParamArena& arena) {
  std::set<std::string> no_decay;
  for (const json& n : fix.at("no_decay")) no_decay.insert(n.get<std::string>());
  for (const json& t : fix.at("tensors")) {
    const std::string name = t.at("name").get<std::string>();
    EXPECT_EQ(train::decays(name), no_decay.count(name) == 0) << "decay rule differs for " << name;
  }
  for (const auto& s : arena.segments())
    EXPECT_EQ(s.decay, no_decay.count(s.name) == 0) << "arena segment " << s.name;
}

TEST(TrainSteps, MatchTorchAdamW) {
  testing::init_cpu();
  const fs::path dir = reference_dir() / "train_steps";
  if (!fs::exists(dir / "steps.json"))
    GTEST_SKIP() << "fixture " << dir << " missing; " << how_to_make();
  const json fix = read_json(dir / "steps.json");
  const json& tr = fix.at("trainer");
  const int64_t steps = tr.at("steps").get<int64_t>();
  train::ScheduleConfig sched;
  sched.type = tr.at("scheduler").get<std::string>();
  sched.warmup_steps = tr.at("warmup_steps").get<int64_t>();
  sched.total_steps = steps;
  const train::AdamWConfig ac{tr.at("betas").at(0).get<double>(),
                              tr.at("betas").at(1).get<double>(), tr.at("eps").get<double>(),
                              tr.at("weight_decay").get<double>()};

  auto model = trainable_model(model_dir_of(dir, fix));
  train::ParamArena arena(model->module());
  train::AdamW opt(arena, ac);
  expect_decay_rule(fix, arena);
  const double loss_rtol = fix.value("loss_rtol", 1e-4);
  for (int64_t step = 0; step < steps; ++step) {
    const json& want = fix.at("steps").at(step);
    const json& ids = fix.at("blocks").at(step);
    std::vector<std::vector<int32_t>> pos(ids.size());
    for (auto& row : pos)
      for (size_t t = 0; t < ids.at(0).size(); ++t) row.push_back(static_cast<int32_t>(t));
    const models::TrainBatch batch = batch_of(
        {{"input_ids", ids}, {"labels", ids}, {"position_ids", pos}, {"segment_ids", nullptr}});
    models::LossResult out = model->loss(batch, /*recompute=*/true);
    const double loss =
        out.loss_sum.to(Device{}).to_float_vector().at(0) / static_cast<double>(out.count);
    autograd::backward(out.loss_sum,
                       Tensor::from_vector({1.0f / static_cast<float>(out.count)}, {}));
    const double norm = train::clip_grad_norm(arena, tr.at("max_grad_norm").get<double>());
    const double lr = tr.at("lr").get<double>() * train::lr_multiplier(sched, step);
    opt.step(lr);
    arena.zero_grads();

    const double want_loss = want.at("loss").get<double>(),
                 want_norm = want.at("grad_norm").get<double>();
    std::cout << "[train-steps] step " << step << ": loss " << loss << " vs " << want_loss
              << " (rel " << std::fabs(loss - want_loss) / want_loss << "), grad_norm " << norm
              << " vs " << want_norm << ", lr " << lr << " vs " << want.at("lr").get<double>()
              << "\n";
    EXPECT_EQ(out.count, want.at("count").get<int64_t>());
    EXPECT_LE(std::fabs(loss - want_loss), loss_rtol * std::fabs(want_loss)) << "step " << step;
    EXPECT_LE(std::fabs(norm - want_norm), 1e-4 * want_norm) << "step " << step;
    EXPECT_NEAR(lr, want.at("lr").get<double>(), 1e-15) << "step " << step;
  }
  const TensorsDiff diff = compare_tensors(model->named_parameters(), dir, fix);
  for (const auto& [name, rel] : diff.rel) EXPECT_LE(rel, fix.value("weights_rtol", 1e-4)) << name;
  // The same error against the size of the five updates, a far more sensitive measure.
  auto initial = models::load_causal_lm(model_dir_of(dir, fix).string());
  const TensorsDiff upd =
      compare_tensors(model->named_parameters(), dir, fix, initial->named_parameters());
  for (const auto& [name, rel] : upd.rel) EXPECT_LE(rel, fix.value("update_rtol", 1e-3)) << name;
  std::cout << "[train-steps] final weights: worst ‖Δ‖/‖ref‖ " << diff.worst << " ("
            << diff.worst_name << "), worst ‖Δ‖/‖ref − initial‖ " << upd.worst << " ("
            << upd.worst_name << ") over " << diff.rel.size() << " tensors\n";
}

}  // namespace
}  // namespace unillm
