// `unillm export --format gguf` and `unillm convert gguf` through the real binary: stories260K
// (llama: q/k permuted) and tiny random qwen2 (biases) and qwen3 (q/k norms) models go out as
// f32 GGUFs and come back bit for bit with the same greedy tokens; quantised exports come back
// within their rounding (q4_0 up to amax/8: a value opposite the block's signed maximum clamps to
// code 15), with the F16 fallback for stories260K's 172-wide down_proj.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/json_file.h"
#include "io/safetensors.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "tiny_qwen_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::run_unillm;
using testing::shell_quote;

std::string stories() { return testing::source_path("assets/stories260K"); }

// Exports dir with the given type and converts the GGUF back; returns the converted dir.
std::string round_trip(const std::string& dir, const std::string& work, const std::string& type,
                       std::string* export_err = nullptr) {
  const std::string gguf = work + "/m-" + type + ".gguf", back = work + "/back-" + type;
  auto e = run_unillm("export --format gguf --model " + shell_quote(dir) + " --output " + gguf +
                      " --quant_type " + type);
  EXPECT_EQ(e.exit_code, 0) << e.err;
  if (export_err) *export_err = e.err;
  auto c = run_unillm("convert gguf --input " + gguf + " --out " + back);
  EXPECT_EQ(c.exit_code, 0) << c.err;
  return back;
}

std::string greedy_ids(const std::string& dir) {
  auto r = run_unillm(
      "generate --model " + shell_quote(dir) +
      " --prompt 'Once upon a time' --temperature 0 --max-new-tokens 24 --output-ids --quiet");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::string out = r.out.substr(0, r.out.find_last_not_of('\n') + 1);
  return out.substr(out.rfind('\n') + 1);
}

void expect_same_tensors(const std::string& a_dir, const std::string& b_dir) {
  auto a = io::SafetensorsFile::open(a_dir + "/model.safetensors");
  auto b = io::SafetensorsFile::open(b_dir + "/model.safetensors");
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (const auto& t : a->tensors()) {
    ASSERT_TRUE(b->has(t.name)) << t.name;
    const Tensor x = a->tensor(t.name), y = b->tensor(t.name);
    EXPECT_EQ(x.dtype(), y.dtype()) << t.name;
    EXPECT_EQ(x.shape(), y.shape()) << t.name;
    EXPECT_EQ(x.to_float_vector(), y.to_float_vector()) << t.name;  // bit for bit (no NaNs here)
  }
}

nlohmann::json config(const std::string& dir) { return io::read_json_file(dir + "/config.json"); }

TEST(GgufCli, StoriesF32GoesOutAndComesBackBitForBit) {
  const std::string work = testing::temp_dir("gguf_f32");
  const std::string back = round_trip(stories(), work, "f32");
  expect_same_tensors(stories(), back);
  const auto a = config(stories()), b = config(back);
  for (const char* k : {"model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
                        "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
                        "max_position_embeddings", "rms_norm_eps", "rope_theta",
                        "tie_word_embeddings", "bos_token_id", "eos_token_id"})
    EXPECT_EQ(a.at(k), b.at(k)) << k;
  EXPECT_EQ(greedy_ids(back), greedy_ids(stories()));
}

TEST(GgufCli, QuantisedExportsComeBackWithinTheirRounding) {
  const std::string work = testing::temp_dir("gguf_quant");
  auto orig = io::SafetensorsFile::open(stories() + "/model.safetensors");
  for (const auto& [type, bound] :
       {std::pair<std::string, double>{"q8_0", 1.0 / 200}, {"q4_0", 1.0 / 7}, {"f16", 1e-3}}) {
    std::string err;
    const std::string back = round_trip(stories(), work, type, &err);
    if (type != "f16") {
      EXPECT_NE(err.find("blk.0.ffn_down.weight: rows of 172 are not whole 32-blocks; written F16"),
                std::string::npos)
          << err;
    }
    auto got = io::SafetensorsFile::open(back + "/model.safetensors");
    for (const auto& t : orig->tensors()) {
      const std::vector<float> x = orig->tensor(t.name).to_float_vector();
      const std::vector<float> y = got->tensor(t.name).to_float_vector();
      float amax = 0, worst = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        amax = std::max(amax, std::fabs(x[i]));
        worst = std::max(worst, std::fabs(x[i] - y[i]));
      }
      EXPECT_LE(worst, bound * amax) << type << " " << t.name;
      if (t.shape.size() == 1) {
        EXPECT_EQ(worst, 0.0f) << type << " " << t.name;  // norms stay f32
      }
    }
    EXPECT_EQ(config(back).at("torch_dtype"), type == "f16" ? "float16" : "float32");
    // A quantised stories260K still tells the story.
    auto r = run_unillm("generate --model " + shell_quote(back) +
                        " --prompt-ids 1 --temperature 0 --max-new-tokens 8 --quiet");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("Once upon a time", 0), 0u) << type << ": " << r.out;
  }
}

// A tiny random model of model_type (unillm init) with stories260K's tokenizer.
std::string tiny_model(const std::string& work, const std::string& model_type) {
  return testing::tiny_qwen(work, model_type, model_type == "qwen3" ? 32 : 16);
}

TEST(GgufCli, Qwen2AndQwen3ComeBackBitForBit) {
  const std::string work = testing::temp_dir("gguf_qwen");
  for (const char* type : {"qwen2", "qwen3"}) {
    const std::string dir = tiny_model(work, type);
    const std::string back = round_trip(dir, work, "f32");
    expect_same_tensors(dir, back);
    const auto a = config(dir), b = config(back);
    for (const char* k :
         {"model_type", "head_dim", "tie_word_embeddings", "rope_theta", "vocab_size"})
      EXPECT_EQ(a.at(k), b.at(k)) << type << " " << k;
    EXPECT_EQ(greedy_ids(back), greedy_ids(dir)) << type;
    fs::remove_all(back);
  }
}

// YaRN goes out as llama.cpp's keys (type, factor, original context length, attn_factor over
// llama.cpp's own 1 + 0.1·ln(factor)) and comes back as the same rope_scaling; llama.cpp's own
// logits on such files are checked by gguf_llama_cpp_check.py. Dynamic NTK has no llama.cpp
// form: refused.
TEST(GgufCli, YarnRopeScalingRoundTripsAndDynamicIsRefused) {
  const std::string work = testing::temp_dir("gguf_yarn");
  const std::string dir = work + "/yarn";
  fs::copy(stories(), dir, fs::copy_options::recursive);
  auto cfg = config(dir);
  cfg["max_position_embeddings"] = 2048;
  cfg["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 512},
                         {"attention_factor", 1.3}};
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  const std::string back = round_trip(dir, work, "f32");
  expect_same_tensors(dir, back);
  EXPECT_EQ(config(back).at("rope_scaling"), cfg["rope_scaling"]);
  EXPECT_EQ(greedy_ids(back), greedy_ids(dir));
  cfg["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  auto r = run_unillm("export --format gguf --model " + dir + " --output " + work + "/dyn.gguf");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("rope_scaling dynamic (NTK) has no llama.cpp equivalent"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(work + "/dyn.gguf"));
}

TEST(GgufCli, BadInputIsAClearError) {
  const std::string work = testing::temp_dir("gguf_bad");
  auto r = run_unillm("export --format onnx --model " + shell_quote(stories()) + " --output " +
                      work + "/x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--format 'onnx' is not supported (gguf is)"), std::string::npos) << r.err;
  r = run_unillm("export --format gguf --model " + shell_quote(stories()) + " --output " + work +
                 "/x --outtype q5_0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("'q5_0' is not a GGUF type"), std::string::npos) << r.err;
  const std::string gguf = work + "/s.gguf";
  ASSERT_EQ(
      run_unillm("export --format gguf --model " + shell_quote(stories()) + " --output " + gguf)
          .exit_code,
      0);
  fs::resize_file(gguf, fs::file_size(gguf) - 1000);
  r = run_unillm("convert gguf --input " + gguf + " --out " + work + "/back");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(gguf + ": tensor '"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("truncated?"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(work + "/back"));
}

}  // namespace
}  // namespace unillm
