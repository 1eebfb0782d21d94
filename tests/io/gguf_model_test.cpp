// The Llama-family GGUF conventions: tensor names both ways, the q/k RoPE permutation (checked
// against llama.cpp's reshape/swapaxes definition and against llama2.c's layout, which is the
// GGUF one), the F16 fallback for rows of partial blocks, and tokenizers through GGUF and back
// (same ids as the original for SentencePiece and byte-level BPE vocabularies).
#include "io/gguf_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "io/gguf.h"
#include "io/gguf_vocab.h"
#include "io/json_file.h"
#include "io/llama2c.h"
#include "support/expect.h"

namespace unillm::io {
namespace {

namespace fs = std::filesystem;

TEST(GgufNames, HfAndGgufNamesMapBothWays) {
  const std::pair<const char*, const char*> cases[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
      {"model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight"},
      {"model.layers.11.self_attn.o_proj.weight", "blk.11.attn_output.weight"},
      {"model.layers.3.self_attn.k_proj.bias", "blk.3.attn_k.bias"},
      {"model.layers.2.self_attn.q_norm.weight", "blk.2.attn_q_norm.weight"},
      {"model.layers.1.mlp.down_proj.weight", "blk.1.ffn_down.weight"},
      {"model.layers.1.input_layernorm.weight", "blk.1.attn_norm.weight"},
      {"model.layers.1.post_attention_layernorm.weight", "blk.1.ffn_norm.weight"},
  };
  for (const auto& [hf, gg] : cases) {
    EXPECT_EQ(gguf_tensor_name(hf), gg);
    EXPECT_EQ(hf_tensor_name(gg), hf);
  }
  EXPECT_EQ(gguf_tensor_name("model.layers.x.mlp.up_proj.weight"), "");
  EXPECT_EQ(hf_tensor_name("rope_freqs.weight"), "");
  // Mixture of experts: the router and the shared expert by name; experts stacked per layer.
  EXPECT_EQ(gguf_tensor_name("model.layers.4.mlp.gate.weight"), "blk.4.ffn_gate_inp.weight");
  EXPECT_EQ(hf_tensor_name("blk.4.ffn_gate_inp_shexp.weight"), "model.layers.4.mlp.shared_expert_gate.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.0.mlp.shared_expert.down_proj.weight"), "blk.0.ffn_down_shexp.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.0.mlp.experts.3.up_proj.weight"), "");
  int64_t layer = -1, expert = -1;
  std::string proj;
  EXPECT_TRUE(split_expert_name("model.layers.12.mlp.experts.37.down_proj.weight", &layer, &expert, &proj));
  EXPECT_EQ(layer, 12);
  EXPECT_EQ(expert, 37);
  EXPECT_EQ(proj, "down_proj");
  EXPECT_EQ(gguf_experts_name(layer, proj), "blk.12.ffn_down_exps.weight");
  EXPECT_TRUE(split_gguf_experts_name("blk.12.ffn_gate_exps.weight", &layer, &proj));
  EXPECT_EQ(proj, "gate_proj");
  EXPECT_FALSE(split_expert_name("model.layers.1.mlp.experts.x.up_proj.weight", &layer, &expert, &proj));
  EXPECT_FALSE(split_expert_name("model.layers.1.mlp.shared_expert.up_proj.weight", &layer, &expert, &proj));
  EXPECT_FALSE(split_gguf_experts_name("blk.1.ffn_gate.weight", &layer, &proj));
  EXPECT_EQ(gguf_arch_for_model_type("qwen3_moe"), "qwen3moe");
  EXPECT_EQ(gguf_arch_for_model_type("qwen2_moe"), "qwen2moe");
  EXPECT_EQ(gguf_arch_for_model_type("mistral"), "llama");
  EXPECT_EQ(gguf_arch_for_model_type("qwen3"), "qwen3");
  EXPECT_THROW(gguf_arch_for_model_type("gpt2"), ConfigError);
  EXPECT_TRUE(gguf_arch_permutes_qk("llama"));
  EXPECT_FALSE(gguf_arch_permutes_qk("qwen2"));
}

TEST(GgufPermute, MatchesLlamaCppDefinitionAndInverts) {
  // llama.cpp's converter: w.reshape(H, 2, D/2, C).swapaxes(1, 2).reshape(H·D, C), i.e. GGUF row
  // (h, i, c) [i < D/2, c < 2] is HF row (h, c, i).
  const int64_t H = 3, D = 8, C = 5;
  std::vector<float> hf(static_cast<size_t>(H * D * C));
  for (size_t i = 0; i < hf.size(); ++i) hf[i] = static_cast<float>(i);
  const std::string gguf =
      permute_rope_rows(reinterpret_cast<const uint8_t*>(hf.data()), H * D, C * 4, H, true);
  const auto* g = reinterpret_cast<const float*>(gguf.data());
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < D / 2; ++i)
      for (int64_t c = 0; c < 2; ++c)
        for (int64_t k = 0; k < C; ++k)
          EXPECT_EQ(g[((h * D / 2 + i) * 2 + c) * C + k], hf[((h * 2 + c) * D / 2 + i) * C + k]);
  const std::string back =
      permute_rope_rows(reinterpret_cast<const uint8_t*>(gguf.data()), H * D, C * 4, H, false);
  EXPECT_EQ(std::memcmp(back.data(), hf.data(), back.size()), 0);
  // llama2.c stores q/k in the GGUF layout: its HF conversion is our inverse.
  testing::init_cpu();
  Tensor gt = Tensor::from_vector(std::vector<float>(g, g + hf.size()), {H * D, C});
  EXPECT_EQ(io::permute_rope_rows(gt, H).to_float_vector(), hf);
  EXPECT_THROW(permute_rope_rows(reinterpret_cast<const uint8_t*>(hf.data()), 9, 4, 2, true),
               ConfigError);
}

TEST(GgufPermute, QkTensorsArePermutedOnlyForLlamaAndPartialRowsFallBackToF16) {
  testing::init_cpu();
  std::vector<float> v(16 * 64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 97) / 97.0f;
  const Tensor w = Tensor::from_vector(v, {16, 64});
  std::string note;
  GgufTensorOut llama = gguf_tensor_from_hf("model.layers.0.self_attn.k_proj.weight", w,
                                            {GgmlType::kF32, "llama", 4, 2}, &note);
  EXPECT_EQ(llama.name, "blk.0.attn_k.weight");
  const std::string want =
      permute_rope_rows(reinterpret_cast<const uint8_t*>(v.data()), 16, 64 * 4, 2, true);
  EXPECT_EQ(llama.bytes(), want);
  GgufTensorOut qwen = gguf_tensor_from_hf("model.layers.0.self_attn.k_proj.weight", w,
                                           {GgmlType::kF32, "qwen2", 4, 2}, &note);
  EXPECT_EQ(qwen.bytes(), std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
  EXPECT_TRUE(note.empty());
  const Tensor down = Tensor::from_vector(std::vector<float>(64 * 172, 0.25f), {64, 172});
  GgufTensorOut d = gguf_tensor_from_hf("model.layers.0.mlp.down_proj.weight", down,
                                        {GgmlType::kQ4_0, "llama", 4, 2}, &note);
  EXPECT_EQ(d.type, GgmlType::kF16);
  EXPECT_NE(note.find("rows of 172 are not whole 32-blocks; written F16"), std::string::npos)
      << note;
  EXPECT_EQ(d.bytes().size(), 64u * 172 * 2);
  const Tensor norm = Tensor::from_vector(std::vector<float>(64, 1.0f), {64});
  EXPECT_EQ(
      gguf_tensor_from_hf("model.norm.weight", norm, {GgmlType::kQ8_0, "llama", 4, 2}, &note).type,
      GgmlType::kF32);
  EXPECT_THROW(
      gguf_tensor_from_hf("model.rotary.inv_freq", norm, {GgmlType::kF32, "llama", 4, 2}, &note),
      ConfigError);
}

TEST(GgufRope, Llama3FactorsFollowTheThreeBands) {
  const std::vector<float> f = llama3_rope_factors(500000.0, 128, 8.0, 1.0, 4.0, 8192);
  ASSERT_EQ(f.size(), 64u);
  EXPECT_EQ(f.front(), 1.0f);  // high frequencies untouched
  EXPECT_EQ(f.back(), 8.0f);   // low frequencies divided by factor
  for (size_t i = 1; i < f.size(); ++i) EXPECT_GE(f[i], f[i - 1]);
}

// ---- tokenizers through GGUF ----

class GgufVocabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::init_cpu();
    dir_ = fs::temp_directory_path() /
           ("unillm_ggufvocab_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "hf");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Exports src's tokenizer into a GGUF (no tensors), rebuilds HF files from it and loads them.
  std::unique_ptr<Tokenizer> round_trip(const std::string& src, const std::string& model_type,
                                        int64_t vocab) {
    auto tok = Tokenizer::load(src);
    GgufMetadata md;
    GgufVocabOptions o;
    o.vocab_size = vocab;
    o.model_type = model_type;
    o.tokenizer_dir = src;
    add_gguf_vocab(*tok, o, md, nullptr);
    const std::string path = (dir_ / "v.gguf").string();
    write_gguf(path, md, {});
    file_ = GgufFile::open(path);
    const HfTokenizerFiles files = hf_tokenizer_from_gguf(*file_, 512);
    write_file_atomic((dir_ / "hf" / "tokenizer.json").string(), files.tokenizer_json);
    write_file_atomic((dir_ / "hf" / "tokenizer_config.json").string(),
                      files.tokenizer_config_json);
    return Tokenizer::load((dir_ / "hf").string());
  }

  void expect_same_ids(const Tokenizer& a, const Tokenizer& b) {
    const char* texts[] = {"Once upon a time, there was a little girl named Lily.",
                           "  two  spaces\nand\ttabs, ünïcödé ☃ 日本語 12345 don't",
                           "<s> special </s> text", ""};
    for (const char* t : texts) EXPECT_EQ(a.encode(t), b.encode(t)) << t;
    for (int32_t id = 0; id < a.vocab_size(); id += 7)
      EXPECT_EQ(a.decode({id}), b.decode({id})) << id;
    EXPECT_EQ(a.bos_id(), b.bos_id());
    EXPECT_EQ(a.eos_id(), b.eos_id());
    EXPECT_EQ(a.adds_bos(), b.adds_bos());
  }
  fs::path dir_;
  std::shared_ptr<GgufFile> file_;
};

TEST_F(GgufVocabTest, SentencePieceFromTokenizerJsonComesBackWithTheSameIds) {
  const std::string src = testing::source_path("assets/stories260K");
  auto back = round_trip(src, "llama", 512);
  EXPECT_EQ(file_->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(file_->find("tokenizer.ggml.tokens")->strings.size(), 512u);
  const auto& types = file_->find("tokenizer.ggml.token_type")->ints;
  EXPECT_EQ(types[0], 2);  // <unk>
  EXPECT_EQ(types[1], 3);  // <s>
  EXPECT_EQ(types[3], 6);  // <0x00>
  EXPECT_EQ(types[300], 1);
  EXPECT_EQ(file_->get_int("tokenizer.ggml.add_bos_token"), 1);
  expect_same_ids(*Tokenizer::load(src), *back);
}

TEST_F(GgufVocabTest, SentencePieceModelKeepsItsScores) {
  const std::string src = testing::source_path("assets/llama2-tokenizer");
  auto back = round_trip(src, "llama", 32000);
  const auto& scores = file_->find("tokenizer.ggml.scores")->floats;
  ASSERT_EQ(scores.size(), 32000u);
  EXPECT_EQ(file_->find("tokenizer.ggml.tokens")->strings[29871], "\xE2\x96\x81");  // "▁"
  EXPECT_LT(scores[10000], scores[1000]);
  expect_same_ids(*Tokenizer::load(src), *back);
}

TEST_F(GgufVocabTest, ByteLevelBpeKeepsMergesAndNamesThePreTokenizer) {
  const std::string src = testing::source_path("tests/data/qwen2-tokenizer");
  auto orig = Tokenizer::load(src);
  const int64_t padded = orig->vocab_size() + 3;  // embedding rows beyond the tokenizer
  // The mixture-of-experts Qwens name the same pre-tokenizer (vocab.json + merges.txt: by model_type).
  for (const char* moe : {"qwen2_moe", "qwen3_moe"}) {
    round_trip(src, moe, padded);
    EXPECT_EQ(file_->get_string("tokenizer.ggml.pre"), "qwen2") << moe;
  }
  auto back = round_trip(src, "qwen2", padded);
  EXPECT_EQ(file_->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(file_->get_string("tokenizer.ggml.pre"), "qwen2");
  const auto& tokens = file_->find("tokenizer.ggml.tokens")->strings;
  ASSERT_EQ(static_cast<int64_t>(tokens.size()), padded);
  EXPECT_EQ(tokens.back(), "[PAD" + std::to_string(padded - 1) + "]");
  EXPECT_EQ(file_->find("tokenizer.ggml.token_type")->ints.back(), 5);
  EXPECT_EQ(file_->find("tokenizer.ggml.merges")->strings.front(), "Ġ Ġ");
  expect_same_ids(*orig, *back);
  EXPECT_EQ(back->vocab_size(), orig->vocab_size());
}

TEST_F(GgufVocabTest, TiktokenOnlyTokenizersAreRefused) {
  auto tok = Tokenizer::load(testing::source_path("tests/data/llama3-tokenizer"));
  GgufMetadata md;
  testing::expect_throw_with<ConfigError>([&] { add_gguf_vocab(*tok, {}, md, nullptr); },
                                          "tiktoken tokenizer has no merges");
}

}  // namespace
}  // namespace unillm::io
