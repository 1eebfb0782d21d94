// llama2.c reader and converter: header and size validation, the RoPE row permutation checked
// against naive adjacent-pair vs rotate_half RoPE, the converted HF directory (config, tensors,
// tokenizer.json), and that the committed assets/stories260K match what the converter writes.
#include "io/llama2c.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>

#include "io/checkpoint.h"
#include "io/json_file.h"
#include "io/llama2c_tokenizer.h"
#include "support/expect.h"

namespace unillm::io {
namespace {
namespace fs = std::filesystem;

std::string stories(const std::string& f) { return testing::source_path("tests/data/stories260K/" + f); }

class Llama2cTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::init_cpu();
    dir_ = fs::temp_directory_path() /
           ("unillm_l2c_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string p(const std::string& f) const { return (dir_ / f).string(); }
  std::string error_of(const std::function<void()>& fn) {
    try {
      fn();
    } catch (const IoError& e) {
      return e.what();
    }
    ADD_FAILURE() << "no error";
    return "";
  }
  fs::path dir_;
};

TEST_F(Llama2cTest, HeaderOfStories260K) {
  Llama2cConfig c = read_llama2c_header(stories("stories260K.bin"));
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(c.head_size(), 8);
  EXPECT_EQ(c.float_count(), 264128);
  EXPECT_EQ(c.file_bytes(), 1056540);
  int32_t raw[7] = {64, 172, 5, 8, 4, -512, 512};
  Llama2cConfig u = parse_llama2c_header(raw, "x");
  EXPECT_FALSE(u.shared_classifier);
  EXPECT_EQ(u.vocab_size, 512);
  EXPECT_EQ(u.float_count(), 264128 + 512 * 64);
}

TEST_F(Llama2cTest, TruncatedOrPaddedOrBadHeaderIsReported) {
  std::string bytes = read_file_bytes(stories("stories260K.bin"));
  write_file_atomic(p("trunc.bin"), bytes.substr(0, bytes.size() - 100));
  std::string m = error_of([&] { read_llama2c_checkpoint(p("trunc.bin")); });
  EXPECT_NE(m.find("[llama2c] " + p("trunc.bin") + ": file is 1056440 bytes, but its header (dim 64, "
                   "hidden_dim 172, n_layers 5, n_heads 8, n_kv_heads 4, vocab_size 512 (shared classifier), "
                   "seq_len 512) needs 1056540 bytes (truncated?)"), std::string::npos) << m;
  write_file_atomic(p("long.bin"), bytes + "xxxx");
  EXPECT_NE(error_of([&] { read_llama2c_header(p("long.bin")); }).find("file is 1056544 bytes"), std::string::npos);
  std::string bad = bytes;
  int32_t zero = 0;
  std::memcpy(bad.data() + 12, &zero, 4);  // n_heads
  write_file_atomic(p("bad.bin"), bad);
  EXPECT_NE(error_of([&] { read_llama2c_header(p("bad.bin")); }).find("header n_heads = 0 is out of range"),
            std::string::npos);
  write_file_atomic(p("tiny.bin"), "abc");
  EXPECT_NE(error_of([&] { read_llama2c_header(p("tiny.bin")); }).find("shorter than the 28-byte header"),
            std::string::npos);
}

// Naive RoPE oracles, written from the two papers' conventions (not from the converter).
// llama2.c: rotates adjacent pairs (v[2m], v[2m+1]) of each head with freq theta^(-2m/D).
std::vector<double> rope_adjacent(std::vector<double> v, int64_t D, int64_t pos) {
  for (size_t h = 0; h < v.size(); h += D)
    for (int64_t m = 0; m < D / 2; ++m) {
      double a = pos * std::pow(10000.0, -2.0 * m / D), c = std::cos(a), s = std::sin(a);
      double x0 = v[h + 2 * m], x1 = v[h + 2 * m + 1];
      v[h + 2 * m] = x0 * c - x1 * s;
      v[h + 2 * m + 1] = x0 * s + x1 * c;
    }
  return v;
}
// HF: q * cos + rotate_half(q) * sin, rotate_half(x) = cat(-x[D/2:], x[:D/2]).
std::vector<double> rope_rotate_half(const std::vector<double>& v, int64_t D, int64_t pos) {
  std::vector<double> out(v.size());
  for (size_t h = 0; h < v.size(); h += D)
    for (int64_t j = 0; j < D; ++j) {
      int64_t m = j % (D / 2);
      double a = pos * std::pow(10000.0, -2.0 * m / D);
      double rot = j < D / 2 ? -v[h + j + D / 2] : v[h + j - D / 2];
      out[h + j] = v[h + j] * std::cos(a) + rot * std::sin(a);
    }
  return out;
}
std::vector<double> matvec(const Tensor& w, const std::vector<double>& x) {
  std::vector<double> y(static_cast<size_t>(w.size(0)), 0.0);
  for (int64_t r = 0; r < w.size(0); ++r)
    for (int64_t c = 0; c < w.size(1); ++c) y[r] += w.item({r, c}) * x[c];
  return y;
}

TEST_F(Llama2cTest, PermutationTurnsAdjacentPairRopeIntoRotateHalf) {
  Llama2cWeights w = read_llama2c_checkpoint(stories("stories260K.bin"));
  const auto& c = w.config;
  const int64_t D = c.head_size(), group = c.n_heads / c.n_kv_heads;
  std::mt19937 rng(7);
  std::normal_distribution<double> nd;
  std::vector<double> xq(c.dim), xk(c.dim);
  for (auto& v : xq) v = nd(rng);
  for (auto& v : xk) v = nd(rng);
  for (int layer : {0, 4}) {
    Tensor wq = w.wq.select(0, layer), wk = w.wk.select(0, layer);
    Tensor wq_hf = permute_rope_rows(wq, c.n_heads), wk_hf = permute_rope_rows(wk, c.n_kv_heads);
    for (int64_t pos : {0, 1, 7, 300}) {
      auto q_l2c = rope_adjacent(matvec(wq, xq), D, pos), q_hf = rope_rotate_half(matvec(wq_hf, xq), D, pos);
      auto k_l2c = rope_adjacent(matvec(wk, xk), D, 3), k_hf = rope_rotate_half(matvec(wk_hf, xk), D, 3);
      // Same rotated vectors up to the within-head reordering.
      for (int64_t h = 0; h < c.n_heads; ++h)
        for (int64_t m = 0; m < D / 2; ++m)
          for (int64_t pair = 0; pair < 2; ++pair)
            ASSERT_NEAR(q_hf[h * D + pair * D / 2 + m], q_l2c[h * D + 2 * m + pair], 1e-9);
      // And the attention logits q_h . k_(h/group) agree, which is what the model sees.
      for (int64_t h = 0; h < c.n_heads; ++h) {
        double s_l2c = 0, s_hf = 0;
        for (int64_t j = 0; j < D; ++j) {
          s_l2c += q_l2c[h * D + j] * k_l2c[(h / group) * D + j];
          s_hf += q_hf[h * D + j] * k_hf[(h / group) * D + j];
        }
        EXPECT_NEAR(s_hf, s_l2c, 1e-9);
      }
    }
  }
}

TEST_F(Llama2cTest, ConvertStories260K) {
  Llama2cConvertOptions o{stories("stories260K.bin"), stories("tok512.bin"), p("out"), false};
  convert_llama2c(o);
  auto cfg = read_json_file(p("out/config.json"));
  EXPECT_EQ(cfg["architectures"], nlohmann::json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(cfg["model_type"], "llama");
  EXPECT_EQ(cfg["hidden_size"], 64);
  EXPECT_EQ(cfg["intermediate_size"], 172);
  EXPECT_EQ(cfg["num_hidden_layers"], 5);
  EXPECT_EQ(cfg["num_attention_heads"], 8);
  EXPECT_EQ(cfg["num_key_value_heads"], 4);
  EXPECT_EQ(cfg["vocab_size"], 512);
  EXPECT_EQ(cfg["max_position_embeddings"], 512);
  EXPECT_DOUBLE_EQ(cfg["rms_norm_eps"].get<double>(), 1e-5);
  EXPECT_DOUBLE_EQ(cfg["rope_theta"].get<double>(), 10000.0);
  EXPECT_EQ(cfg["tie_word_embeddings"], true);
  EXPECT_EQ(cfg["bos_token_id"], 1);
  EXPECT_EQ(cfg["eos_token_id"], 2);
  EXPECT_EQ(cfg["torch_dtype"], "float32");
  EXPECT_EQ(cfg["hidden_act"], "silu");
  auto gen = read_json_file(p("out/generation_config.json"));
  EXPECT_EQ(gen["bos_token_id"], 1);
  EXPECT_EQ(gen["eos_token_id"], 2);

  Llama2cWeights w = read_llama2c_checkpoint(stories("stories260K.bin"));
  auto r = CheckpointReader::open(p("out"));
  EXPECT_EQ(r.names().size(), 1u + 9 * 5 + 1);
  EXPECT_FALSE(r.has("lm_head.weight"));
  testing::expect_close(r.get("model.embed_tokens.weight"), w.token_embedding, 0.0);
  testing::expect_close(r.get("model.layers.3.self_attn.q_proj.weight"), permute_rope_rows(w.wq.select(0, 3), 8), 0.0);
  testing::expect_close(r.get("model.layers.3.self_attn.k_proj.weight"), permute_rope_rows(w.wk.select(0, 3), 4), 0.0);
  testing::expect_close(r.get("model.layers.3.self_attn.v_proj.weight"), w.wv.select(0, 3), 0.0);
  testing::expect_close(r.get("model.layers.3.self_attn.o_proj.weight"), w.wo.select(0, 3), 0.0);
  testing::expect_close(r.get("model.layers.3.mlp.gate_proj.weight"), w.w1.select(0, 3), 0.0);
  testing::expect_close(r.get("model.layers.3.mlp.down_proj.weight"), w.w2.select(0, 3), 0.0);
  testing::expect_close(r.get("model.layers.3.mlp.up_proj.weight"), w.w3.select(0, 3), 0.0);
  testing::expect_close(r.get("model.layers.3.input_layernorm.weight"), w.rms_att.select(0, 3), 0.0);
  testing::expect_close(r.get("model.layers.3.post_attention_layernorm.weight"), w.rms_ffn.select(0, 3), 0.0);
  testing::expect_close(r.get("model.norm.weight"), w.rms_final, 0.0);
  EXPECT_EQ(shape_str(r.info("model.layers.0.self_attn.k_proj.weight").shape), "[32, 64]");
  EXPECT_EQ(shape_str(r.info("model.layers.0.mlp.down_proj.weight").shape), "[64, 172]");

  auto tok = read_json_file(p("out/tokenizer.json"));
  const auto& vocab = tok["model"]["vocab"];
  EXPECT_EQ(vocab.size(), 512u);
  EXPECT_EQ(vocab["<unk>"], 0);
  EXPECT_EQ(vocab["<s>"], 1);
  EXPECT_EQ(vocab["</s>"], 2);
  EXPECT_EQ(vocab["<0x00>"], 3);
  EXPECT_EQ(vocab["<0x0A>"], 13);
  EXPECT_EQ(vocab["\xE2\x96\x81t"], 259);  // ' t' stored with a space becomes '▁t'
  EXPECT_EQ(tok["model"]["type"], "BPE");
  EXPECT_EQ(tok["model"]["byte_fallback"], true);
  EXPECT_EQ(tok["model"]["fuse_unk"], true);
  EXPECT_GT(tok["model"]["merges"].size(), 0u);
  EXPECT_EQ(tok["model"]["merges"][0], "\xE2\x96\x81 t");  // the best-scored merge (score 0)
  EXPECT_EQ(tok["normalizer"]["normalizers"][0]["type"], "Prepend");
  EXPECT_TRUE(tok["pre_tokenizer"].is_null());
  EXPECT_EQ(tok["decoder"]["decoders"].size(), 4u);
  EXPECT_EQ(tok["post_processor"]["special_tokens"]["<s>"]["ids"], nlohmann::json::array({1}));
  EXPECT_EQ(tok["added_tokens"].size(), 3u);
  auto tc = read_json_file(p("out/tokenizer_config.json"));
  EXPECT_EQ(tc["tokenizer_class"], "LlamaTokenizer");
  EXPECT_EQ(tc["add_bos_token"], true);
  EXPECT_EQ(tc["add_eos_token"], false);
  EXPECT_EQ(tc["model_max_length"], 512);

  // A second run refuses the now non-empty directory unless forced.
  EXPECT_NE(error_of([&] { convert_llama2c(o); }).find("directory is not empty (pass --force"), std::string::npos);
  o.overwrite = true;
  convert_llama2c(o);
}

TEST_F(Llama2cTest, MergesFollowScoresThenLengths) {
  // pieces: a b c ab bc abc; "abc" splits as a+bc and ab+c, both with abc's score.
  std::vector<std::string> pieces = {"a", "b", "c", "ab", "bc", "abc"};
  std::vector<float> scores = {0, 0, 0, -1, -2, -0.5f};
  auto m = sentencepiece_bpe_merges(pieces, scores);
  ASSERT_EQ(m.size(), 4u);
  // score -0.5 first; within it the longer left piece first (ab + c before a + bc).
  EXPECT_EQ(m[0], std::make_pair(std::string("ab"), std::string("c")));
  EXPECT_EQ(m[1], std::make_pair(std::string("a"), std::string("bc")));
  EXPECT_EQ(m[2], std::make_pair(std::string("a"), std::string("b")));
  EXPECT_EQ(m[3], std::make_pair(std::string("b"), std::string("c")));
}

TEST_F(Llama2cTest, TokenizerRecordsAreValidated) {
  auto t = read_llama2c_tokenizer(stories("tok512.bin"), 512);
  EXPECT_EQ(t.max_token_length, 7);
  EXPECT_EQ(t.pieces[1], "\n<s>\n");
  EXPECT_EQ(t.pieces[259], " t");
  EXPECT_FLOAT_EQ(t.scores[260], -1.0f);
  EXPECT_EQ(read_llama2c_tokenizer(stories("tok512.bin")).pieces.size(), 512u);
  EXPECT_NE(error_of([&] { read_llama2c_tokenizer(stories("tok512.bin"), 500); })
                .find("bytes remain after 500 tokens; the tokenizer does not match the checkpoint's vocab_size 500"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_llama2c_tokenizer(stories("tok512.bin"), 600); })
                .find("file ends inside the record of token 512"), std::string::npos);
  std::string bytes = read_file_bytes(stories("tok512.bin"));
  write_file_atomic(p("cut.bin"), bytes.substr(0, bytes.size() - 1));
  EXPECT_NE(error_of([&] { read_llama2c_tokenizer(p("cut.bin"), 512); }).find("file ends inside the bytes of token 511"),
            std::string::npos);
}

TEST_F(Llama2cTest, Llama2TokenizerBin) {
  std::string path = testing::source_path("tests/data/llama2-tokenizer/tokenizer.bin");
  if (!fs::exists(path)) GTEST_SKIP() << "tests/data/llama2-tokenizer/tokenizer.bin is not in this checkout";
  auto t = read_llama2c_tokenizer(path, 32000);
  EXPECT_EQ(t.max_token_length, 27);
  auto j = llama2c_tokenizer_json(t, path);
  const auto& vocab = j["model"]["vocab"];
  EXPECT_EQ(vocab.size(), 32000u);
  EXPECT_EQ(vocab["\xE2\x96\x81Hello"], 15043);
  EXPECT_EQ(vocab["\xE2\x96\x81world"], 3186);
  EXPECT_EQ(vocab["<0x0A>"], 13);
  EXPECT_EQ(vocab["<0xFF>"], 258);
  EXPECT_EQ(j["model"]["merges"][0], "\xE2\x96\x81 t");
  EXPECT_GT(j["model"]["merges"].size(), 31000u);
}

TEST_F(Llama2cTest, CommittedAssetsMatchTheConverter) {
  const std::string assets = testing::source_path("assets/stories260K");
  ASSERT_TRUE(fs::exists(assets + "/model.safetensors")) << assets;
  convert_llama2c({stories("stories260K.bin"), stories("tok512.bin"), p("fresh"), false});
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(p("fresh"))) {
    std::string f = e.path().filename().string();
    EXPECT_TRUE(read_file_bytes(e.path().string()) == read_file_bytes(assets + "/" + f))
        << "assets/stories260K/" << f << " differs from the converter's output; regenerate it (see PROVENANCE.md)";
    ++n;
  }
  EXPECT_EQ(n, 6u);
}

}  // namespace
}  // namespace unillm::io
