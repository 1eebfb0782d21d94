// Mixture-of-experts models (qwen3_moe, qwen2_moe) in the serving engine: a step batches the
// tokens of many sequences, so each expert sees rows of several requests at once; every request
// still gives token for token what it gives alone, its log-probabilities match the full forward,
// and LoRA adapters on the experts keep their per-request rows (the rows an expert receives are
// a subset of the step's, nn/moe.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "autograd/grad_mode.h"
#include "infer/engine.h"
#include "infer/generator.h"
#include "models/lora_test_util.h"

namespace unillm::infer {
namespace {

// 3 layers, the middle one dense (mlp_only_layers); 6 experts of width 12, 2 per token;
// qwen2_moe also with a shared expert of width 20. Weights N(0, 0.2): the routing varies.
std::unique_ptr<models::CausalLM> tiny_moe(const std::string& type) {
  testing::init_cpu();
  const std::string path = testing::temp_dir("moe_cfg") + "/config.json";
  std::ofstream(path) << "{\"model_type\": \"" << type
                      << "\", \"vocab_size\": 61, \"hidden_size\": 32, \"intermediate_size\": 40, "
                         "\"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                         "\"num_experts\": 6, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 12, "
                         "\"mlp_only_layers\": [1], \"norm_topk_prob\": "
                      << (type == "qwen3_moe" ? "true" : "false")
                      << ", \"shared_expert_intermediate_size\": " << (type == "qwen2_moe" ? 20 : 0) << "}";
  auto m = models::build_causal_lm(models::load_model_config(path), DType::f32);
  models::init_weights(*m, 0.2, 7);
  return m;
}

std::vector<std::vector<int32_t>> prompts() {
  std::vector<std::vector<int32_t>> out;
  for (int r = 0; r < 8; ++r) {
    std::vector<int32_t> p{1};
    for (int i = 0; i < 3 + (r * 5) % 11; ++i) p.push_back(2 + (r * 31 + i * 17) % 59);
    out.push_back(p);
  }
  return out;
}

std::map<size_t, std::vector<int32_t>> run_engine(models::CausalLM& model, const std::vector<std::string>& adapters,
                                                  std::map<size_t, std::vector<float>>* logprobs = nullptr) {
  EngineConfig c;
  c.block_size = 4;
  c.num_blocks = 128;
  c.scheduler.max_num_seqs = 16;
  c.scheduler.max_num_batched_tokens = 256;
  Engine e(model, c);
  const auto ps = prompts();
  std::map<int64_t, size_t> which;
  for (size_t i = 0; i < ps.size(); ++i) {
    Request r;
    r.prompt = ps[i];
    r.sampling.temperature = 0;
    r.max_tokens = 10;
    r.ignore_eos = true;
    r.logprobs = logprobs ? 1 : -1;
    if (!adapters.empty()) r.adapter = adapters[i % adapters.size()];
    which[e.add_request(r)] = i;
  }
  std::map<size_t, std::vector<int32_t>> got;
  int64_t steps = 0;
  while (e.has_work() && ++steps < 1000)
    for (const auto& o : e.step()) {
      got[which.at(o.request)].push_back(o.token);
      if (logprobs) (*logprobs)[which.at(o.request)].push_back(o.logprobs.logprob);
    }
  EXPECT_LT(steps, 14) << "the requests share steps";
  return got;
}

std::vector<int32_t> alone(models::CausalLM& model, const std::vector<int32_t>& prompt) {
  GenerateOptions o;
  o.max_new_tokens = 10;
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  o.block_size = 4;
  return generate(model, prompt, o, [](int32_t) { return true; }).tokens;
}

TEST(MoeEngine, BatchedGreedyEqualsAloneAndLogprobsMatchTheFullForward) {
  for (const char* type : {"qwen3_moe", "qwen2_moe"}) {
    SCOPED_TRACE(type);
    auto model = tiny_moe(type);
    std::map<size_t, std::vector<float>> lp;
    const auto got = run_engine(*model, {}, &lp);
    const auto ps = prompts();
    std::set<int32_t> distinct;
    autograd::NoGradGuard no_grad;
    for (size_t i = 0; i < ps.size(); ++i) {
      SCOPED_TRACE("request " + std::to_string(i));
      EXPECT_EQ(got.at(i), alone(*model, ps[i]));
      distinct.insert(got.at(i).begin(), got.at(i).end());
      std::vector<int32_t> seq = ps[i];
      seq.insert(seq.end(), got.at(i).begin(), got.at(i).end() - 1);
      const std::vector<float> all = model->logits_all(seq).to_float_vector();
      const int64_t v = model->config().vocab_size;
      for (size_t j = 0; j < got.at(i).size(); ++j) {
        const float* row = all.data() + (ps[i].size() - 1 + j) * v;
        double mx = row[0], sum = 0;
        for (int64_t t = 0; t < v; ++t) mx = std::max<double>(mx, row[t]);
        for (int64_t t = 0; t < v; ++t) sum += std::exp(row[t] - mx);
        EXPECT_NEAR(lp.at(i)[j], row[got.at(i)[j]] - mx - std::log(sum), 1e-5);
      }
    }
    EXPECT_GE(distinct.size(), 4u) << "the model is not degenerate";
  }
}

TEST(MoeEngine, AdaptersOnTheExpertsKeepTheirRequestsRows) {
  auto model = tiny_moe("qwen3_moe");
  lora_test::add_two_random_adapters(*model);
  bool on_experts = false;
  for (const auto& [name, _] : model->module().named_adapter_parameters("a"))
    on_experts = on_experts || name.find("mlp.experts.") != std::string::npos;
  EXPECT_TRUE(on_experts) << "'all' reaches the experts' projections";
  model->set_active_adapters({});
  const std::vector<std::string> names = {"", "a", "b", "a"};
  const auto got = run_engine(*model, names);
  const auto ps = prompts();
  for (size_t i = 0; i < ps.size(); ++i) {
    const std::string& n = names[i % names.size()];
    SCOPED_TRACE("request " + std::to_string(i) + " adapter '" + n + "'");
    model->set_active_adapters(n.empty() ? std::vector<std::string>{} : std::vector<std::string>{n});
    EXPECT_EQ(got.at(i), alone(*model, ps[i]));
  }
  model->set_active_adapters({});
  const auto base = run_engine(*model, {});
  EXPECT_NE(base.at(1), got.at(1)) << "adapter a changes request 1's tokens";
}

}  // namespace
}  // namespace unillm::infer
