// Requests for different LoRA adapters (and the base model) batched into one engine step: each
// token row gets its own adapter (the segmented LoRA GEMM), and every request gives token for
// token what it gives alone through infer::generate with that adapter active.
#include <gtest/gtest.h>

#include <map>

#include "autograd/grad_mode.h"
#include "infer/engine.h"
#include "infer/generator.h"
#include "models/lora_test_util.h"
#include "ops/lora_linear.h"

namespace unillm::infer {
namespace {

std::unique_ptr<models::CausalLM> model_with_two_adapters() {
  testing::init_cpu();
  auto m = lora_test::tiny_model("llama");
  lora_test::add_two_random_adapters(*m);
  return m;
}

TEST(EngineAdapters, MixedAdaptersInOneStepEqualEachAlone) {
  auto model = model_with_two_adapters();
  model->set_active_adapters({});
  EngineConfig c;
  c.block_size = 4;
  c.num_blocks = 64;
  c.scheduler.max_num_seqs = 16;
  c.scheduler.max_num_batched_tokens = 256;
  Engine e(*model, c);
  const std::vector<std::string> names = {"", "a", "b", "a", "", "b", "b", "a"};
  std::map<int64_t, size_t> which;
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < names.size(); ++i) {
    std::vector<int32_t> p;
    for (size_t j = 0; j < 3 + i % 4; ++j) p.push_back(static_cast<int32_t>((i * 13 + j * 7 + 1) % 61));
    prompts.push_back(p);
    Request r;
    r.prompt = p;
    r.sampling.temperature = 0;
    r.max_tokens = 8;
    r.ignore_eos = true;
    r.adapter = names[i];
    which[e.add_request(r)] = i;
  }
  std::map<size_t, std::vector<int32_t>> got;
  int64_t steps = 0;
  while (e.has_work() && ++steps < 1000)
    for (const auto& o : e.step()) got[which.at(o.request)].push_back(o.token);
  EXPECT_LT(steps, 12) << "all adapters run in the same steps";
  for (size_t i = 0; i < names.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i) + " adapter '" + names[i] + "'");
    model->set_active_adapters(names[i].empty() ? std::vector<std::string>{} : std::vector<std::string>{names[i]});
    GenerateOptions o;
    o.max_new_tokens = 8;
    o.sampling.temperature = 0;
    o.ignore_eos = true;
    o.block_size = 4;
    EXPECT_EQ(got[i], generate(*model, prompts[i], o, [](int32_t) { return true; }).tokens);
  }
}

TEST(EngineAdapters, RowRangesAreEachSliceAlone) {
  auto model = model_with_two_adapters();
  Tensor x = lora_test::logits_with(*model, std::vector<std::string>{});  // any [11, 61] input
  x = x.slice(1, 0, 32).contiguous();  // [11, 32]: the tiny model's hidden size
  const auto mods = model->adapter_modules("a");
  ASSERT_FALSE(mods.empty());
  nn::FusedLinear* f = mods.front().second;
  nn::LoraRun all{{"a"}, false, 0, {}};
  nn::LoraRun seg{{"a", "b"}, false, 0, {{2, 7}, {7, 11}}};
  nn::LoraRun only_b{{"b"}, false, 0, {}};
  autograd::NoGradGuard no_grad;
  const Tensor y = f->forward(x, &seg);
  const Tensor base = f->forward(x.slice(0, 0, 2).contiguous());
  const Tensor ya = f->forward(x.slice(0, 2, 7).contiguous(), &all);
  const Tensor yb = f->forward(x.slice(0, 7, 11).contiguous(), &only_b);
  EXPECT_LE(testing::max_abs_diff(y.slice(0, 0, 2).contiguous(), base), 1e-6);
  EXPECT_LE(testing::max_abs_diff(y.slice(0, 2, 7).contiguous(), ya), 1e-6);
  EXPECT_LE(testing::max_abs_diff(y.slice(0, 7, 11).contiguous(), yb), 1e-6);
  nn::LoraRun bad{{"a"}, false, 0, {{5, 40}}};
  EXPECT_THROW(f->forward(x, &bad), ShapeError);
}

}  // namespace
}  // namespace unillm::infer
