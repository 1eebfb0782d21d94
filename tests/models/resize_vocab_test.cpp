// Vocabulary growth (models/resize_vocab.h) against a naive re-statement of LLaMA-Factory's
// resize_embedding_layer: padded to 64, old rows kept, the new tokens' rows the mean of all other
// rows (noise off here), tied models stay tied; untie_embeddings; modules_to_save key parsing.
#include "models/resize_vocab.h"

#include <algorithm>
#include <cmath>

#include "lora_test_util.h"
#include "models/adapter.h"

namespace unillm {
namespace {

using lora_test::tiny_model;

std::vector<float> rows_of(const Tensor& t) {
  Tensor h = t.to(DType::f32).contiguous();
  return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
}

// t × k as a new host tensor (no op dispatch needed for a test fixture).
Tensor scaled(const Tensor& t, float k) {
  std::vector<float> v = rows_of(t);
  for (auto& x : v) x *= k;
  return Tensor::from_vector(v, t.shape());
}

Tensor param(models::CausalLM& m, const std::string& name) {
  for (auto& [n, t] : m.named_parameters())
    if (n == name) return t;
  return Tensor();
}

// The mean of every row of w [V, C] but those in skip.
std::vector<double> mean_without(const std::vector<float>& w, int64_t c,
                                 const std::vector<int32_t>& skip) {
  std::vector<double> m(static_cast<size_t>(c), 0.0);
  int64_t n = 0;
  for (int64_t r = 0; r < static_cast<int64_t>(w.size()) / c; ++r) {
    if (std::find(skip.begin(), skip.end(), r) != skip.end()) continue;
    for (int64_t j = 0; j < c; ++j) m[j] += w[r * c + j];
    ++n;
  }
  for (auto& x : m) x /= static_cast<double>(n);
  return m;
}

void check_grown(models::CausalLM& m, const std::string& name, const std::vector<float>& before,
                 const std::vector<int32_t>& ids) {
  const std::vector<float> after = rows_of(param(m, name));
  const int64_t c = 32;
  ASSERT_EQ(after.size(), static_cast<size_t>(64 * c)) << name;  // 61 + 2 -> 64
  for (size_t i = 0; i < before.size(); ++i)
    if (std::find(ids.begin(), ids.end(), static_cast<int32_t>(i / c)) == ids.end()) {
      ASSERT_EQ(after[i], before[i]) << name << " element " << i;
    }
  const auto mean = mean_without(after, c, ids);
  for (int32_t id : ids)
    for (int64_t j = 0; j < c; ++j)
      EXPECT_NEAR(after[id * c + j], mean[j], 1e-6) << name << " row " << id;
  // The padding row (63) gets transformers' normal(0, initializer_range) init, not zeros.
  double sq = 0;
  for (int64_t j = 0; j < c; ++j) sq += after[63 * c + j] * after[63 * c + j];
  EXPECT_GT(sq, 0.0) << name;
}

TEST(ResizeVocab, UntiedGrowsBothMatricesToAMultipleOf64) {
  testing::init_cpu();
  auto m = tiny_model("llama");
  const auto e0 = rows_of(param(*m, "model.embed_tokens.weight"));
  const auto h0 = rows_of(param(*m, "lm_head.weight"));
  models::ResizeVocabOptions o;
  o.tokenizer_size = 63;
  o.new_token_ids = {61, 62};
  o.noise = false;
  Rng rng(1);
  const auto r = models::resize_token_embeddings(*m, o, rng);
  EXPECT_EQ(r.old_rows, 61);
  EXPECT_EQ(r.new_rows, 64);
  EXPECT_EQ(m->config().vocab_size, 64);
  EXPECT_NE(m->config().raw_json.find("\"vocab_size\": 64"), std::string::npos);
  check_grown(*m, "model.embed_tokens.weight", e0, {61, 62});
  check_grown(*m, "lm_head.weight", h0, {61, 62});
  EXPECT_EQ(m->logits_all({1, 61, 62}).size(1), 64);
}

TEST(ResizeVocab, TiedStaysTiedAndWithoutIdsEveryGrownRowIsInitialised) {
  testing::init_cpu();
  auto m = tiny_model("qwen2");
  const auto e0 = rows_of(param(*m, "model.embed_tokens.weight"));
  models::ResizeVocabOptions o;
  o.tokenizer_size = 62;  // LLaMA-Factory's tail fallback: no explicit ids
  o.noise = false;
  Rng rng(1);
  const auto r = models::resize_token_embeddings(*m, o, rng);
  EXPECT_EQ(r.initialised, (std::vector<int32_t>{61, 62, 63}));
  EXPECT_TRUE(m->config().tie_word_embeddings);
  const auto e1 = rows_of(param(*m, "model.embed_tokens.weight"));
  const auto mean = mean_without(e1, 32, {61, 62, 63});
  const auto mean_old = mean_without(e0, 32, {});
  for (int j = 0; j < 32; ++j) EXPECT_NEAR(mean[j], mean_old[j], 1e-6);
  for (int j = 0; j < 32; ++j) EXPECT_NEAR(e1[63 * 32 + j], mean_old[j], 1e-6);
}

TEST(ResizeVocab, NoiseHasLlamaFactorysScale) {
  testing::init_cpu();
  auto m = tiny_model("llama");
  models::ResizeVocabOptions o;
  o.tokenizer_size = 125;  // -> 128 rows
  for (int32_t id = 61; id < 125; ++id) o.new_token_ids.push_back(id);
  Rng rng(5);
  models::resize_token_embeddings(*m, o, rng);
  const auto e = rows_of(param(*m, "model.embed_tokens.weight"));
  const auto mean = mean_without(e, 32, o.new_token_ids);
  double sq = 0;
  for (int32_t id : o.new_token_ids)
    for (int j = 0; j < 32; ++j) sq += (e[id * 32 + j] - mean[j]) * (e[id * 32 + j] - mean[j]);
  const double sd = std::sqrt(sq / (64.0 * 32));
  EXPECT_NEAR(sd, 1.0 / std::sqrt(32.0), 0.02);  // N(0, 1/sqrt(C)), 2048 draws
}

// desc_init, restated naively: a described row = the mean of its description ids' embedding rows
// (new tokens and ids outside the matrix left out; none left: the mean of the non-new rows); an
// untied lm_head takes the same *embedding* means (LLaMA-Factory reads get_input_embeddings()),
// its fallback its own mean; other grown rows keep their normal init.
TEST(ResizeVocab, DescInitRowsAreTheMeanOfTheirDescriptionsEmbeddings) {
  testing::init_cpu();
  auto m = tiny_model("llama");
  const auto e0 = rows_of(param(*m, "model.embed_tokens.weight"));
  const auto h0 = rows_of(param(*m, "lm_head.weight"));
  models::ResizeVocabOptions o;
  o.tokenizer_size = 64;
  o.new_token_ids = {61, 62, 63};
  o.noise = false;
  o.described = {{62, {3, 7, 7, 40}}, {61, {62, 5, 900}}, {63, {61, 62}}};
  Rng rng(3);
  const auto r = models::resize_token_embeddings(*m, o, rng);
  EXPECT_EQ(r.initialised, (std::vector<int32_t>{62, 61, 63}));
  const auto e = rows_of(param(*m, "model.embed_tokens.weight"));
  const auto h = rows_of(param(*m, "lm_head.weight"));
  const int c = 32;
  for (int j = 0; j < c; ++j) {
    const double want62 = (e0[3 * c + j] + 2.0 * e0[7 * c + j] + e0[40 * c + j]) / 4;
    EXPECT_NEAR(e[62 * c + j], want62, 1e-6);
    EXPECT_NEAR(h[62 * c + j], want62, 1e-6);  // the embedding's rows, not lm_head's
    EXPECT_NEAR(e[61 * c + j], e0[5 * c + j], 1e-6);  // 62 is new, 900 outside
    EXPECT_NEAR(h[61 * c + j], e0[5 * c + j], 1e-6);
  }
  const auto fe = mean_without(e0, c, {});
  const auto fh = mean_without(h0, c, {});
  for (int j = 0; j < c; ++j) {  // only new ids: each matrix's own mean
    EXPECT_NEAR(e[63 * c + j], fe[j], 1e-6);
    EXPECT_NEAR(h[63 * c + j], fh[j], 1e-6);
  }
  for (size_t i = 0; i < e0.size(); ++i) ASSERT_EQ(e[i], e0[i]) << i;  // old rows kept
}

TEST(ResizeVocab, DescInitWithNoiseHasLlamaFactorysScaleAndLeavesUndescribedRows) {
  testing::init_cpu();
  auto m = tiny_model("qwen2");  // tied
  const auto e0 = rows_of(param(*m, "model.embed_tokens.weight"));
  models::ResizeVocabOptions o;
  o.tokenizer_size = 125;  // -> 128 rows; 64 described, 61..124
  for (int32_t id = 61; id < 125; ++id) {
    o.new_token_ids.push_back(id);
    o.described.push_back({id, {id % 61, (id * 7) % 61}});
  }
  o.new_token_ids.push_back(125);  // new, not described: keeps the normal(initializer_range) init
  Rng rng(9);
  models::resize_token_embeddings(*m, o, rng);
  const auto e = rows_of(param(*m, "model.embed_tokens.weight"));
  const int c = 32;
  double sq = 0;
  for (const auto& d : o.described)
    for (int j = 0; j < c; ++j) {
      const double base = (e0[d.description_ids[0] * c + j] + e0[d.description_ids[1] * c + j]) / 2;
      sq += (e[d.id * c + j] - base) * (e[d.id * c + j] - base);
    }
  EXPECT_NEAR(std::sqrt(sq / (64.0 * c)), 1.0 / std::sqrt(32.0), 0.02);
  double row125 = 0;
  for (int j = 0; j < c; ++j) row125 += e[125 * c + j] * e[125 * c + j];
  EXPECT_LT(std::sqrt(row125 / c), 0.1);  // std 0.02 draws, not mean + 1/sqrt(C) noise
  EXPECT_GT(row125, 0.0);
}

TEST(ResizeVocab, NothingToDoLeavesTheModel) {
  testing::init_cpu();
  auto m = tiny_model("llama");
  models::ResizeVocabOptions o;
  o.tokenizer_size = 61;
  Rng rng(1);
  const auto r = models::resize_token_embeddings(*m, o, rng);
  EXPECT_EQ(r.new_rows, 61);
  EXPECT_TRUE(r.initialised.empty());
}

TEST(ResizeVocab, UntieCopiesTheEmbeddingAndKeepsTheLogits) {
  testing::init_cpu();
  auto m = tiny_model("qwen2");
  const Tensor before = m->logits_all(lora_test::prompt());
  models::untie_embeddings(*m);
  EXPECT_FALSE(m->config().tie_word_embeddings);
  EXPECT_EQ(rows_of(param(*m, "lm_head.weight")), rows_of(param(*m, "model.embed_tokens.weight")));
  testing::expect_close(m->logits_all(lora_test::prompt()), before, 0, 0);
}

// A LoRA adapter with modules_to_save on a tied model: saved, loaded onto a fresh base (untied
// there, its embedding grown to the file's rows), the same logits.
TEST(ModulesToSave, RoundTripUntiesAndGrows) {
  testing::init_cpu();
  auto m = tiny_model("qwen2");
  models::ResizeVocabOptions o;
  o.tokenizer_size = 62;
  Rng rng(2);
  models::resize_token_embeddings(*m, o, rng);
  nn::LoraConfig c;
  c.rank = 4;
  c.alpha = 8;
  c.target_modules = {"q_proj", "v_proj"};
  m->add_lora("default", c, rng);
  lora_test::randomize_b(*m, "default", 4);
  const auto params = models::modules_to_save_params(*m, {"embed_tokens", "lm_head"});
  EXPECT_FALSE(m->config().tie_word_embeddings);
  ASSERT_EQ(params.size(), 2u);
  for (auto& [name, t] : params) {  // the two copies now differ, as after PEFT training
    Tensor d = t->detach();
    d.copy_from(scaled(*t, name == "lm_head.weight" ? 1.5f : 0.5f));
  }
  m->set_active_adapters({"default"});
  const Tensor want = m->logits_all(lora_test::prompt());
  const std::string dir = testing::temp_dir("mts");
  models::AdapterSaveOptions so;
  so.modules_to_save = {"embed_tokens", "lm_head"};
  models::save_adapter(*m, "default", dir, so);
  auto fresh = tiny_model("qwen2");
  models::load_adapter(*fresh, dir, "x");
  fresh->set_active_adapters({"x"});
  EXPECT_EQ(fresh->config().vocab_size, 64);
  EXPECT_FALSE(fresh->config().tie_word_embeddings);
  testing::expect_close(fresh->logits_all(lora_test::prompt()), want, 1e-6, 1e-6);
}

TEST(ModulesToSave, KeysAndTargets) {
  const std::vector<std::string> t = {"embed_tokens", "lm_head", "norm"};
  EXPECT_EQ(models::modules_to_save_key("base_model.model.model.embed_tokens.weight", t),
            "model.embed_tokens.weight");
  EXPECT_EQ(
      models::modules_to_save_key("base_model.model.lm_head.modules_to_save.default.weight", t),
      "lm_head.weight");
  EXPECT_EQ(
      models::modules_to_save_key("base_model.model.model.layers.1.input_layernorm.weight", t),
      "model.layers.1.input_layernorm.weight");  // PEFT's endswith: "norm" matches every norm
  EXPECT_EQ(models::modules_to_save_key(
                "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", t),
            "");
  testing::init_cpu();
  auto m = tiny_model("llama");
  EXPECT_EQ(models::modules_to_save_params(*m, {"norm"}).size(), 5u);  // 2 x 2 layer norms + final
  testing::expect_throw_with<ConfigError>([&] { models::modules_to_save_params(*m, {"nothing"}); },
                                          "matches no module");
}

}  // namespace
}  // namespace unillm
