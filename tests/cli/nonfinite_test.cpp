// Non-finite values stop generate, eval ppl and train with an error naming the position or the
// step: NaN weights, a learning rate that overflows the update, NaN/inf sampling flags.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::run_unillm;
using testing::shell_quote;
using testing::slurp;
using testing::source_path;

// A copy of the bundled model whose tensor `name` has value v at element 0.
std::string model_with(const std::string& name, float v) {
  const std::string dir = testing::temp_dir("nanmodel");
  fs::copy(source_path("assets/stories260K"), dir, fs::copy_options::recursive);
  const std::string path = dir + "/model.safetensors";
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t hlen = 0;
  f.read(reinterpret_cast<char*>(&hlen), 8);
  std::string header(hlen, '\0');
  f.read(header.data(), static_cast<std::streamsize>(hlen));
  const auto j = nlohmann::json::parse(header);
  EXPECT_EQ(j.at(name).at("dtype"), "F32");
  f.seekp(static_cast<std::streamoff>(8 + hlen + j.at(name).at("data_offsets")[0].get<uint64_t>()));
  f.write(reinterpret_cast<const char*>(&v), sizeof v);
  return dir;
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();

void expect_error(const testing::CliResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("unillm: error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "missing '" << needle << "' in: " << r.err;
}

TEST(NonFinite, NanWeightsStopGenerateAtTheFirstPosition) {
  const std::string model = model_with("model.norm.weight", kNaN);
  for (const char* t : {"0", "0.8"}) {  // greedy and sampled
    auto r = run_unillm("generate --model " + model + " --prompt-ids 1,400,60 --max-new-tokens 5 --quiet --temperature " + t);
    expect_error(r, "logits at position 2");
    EXPECT_EQ(r.out.find("[0, 0"), std::string::npos) << r.out;
  }
  // chat goes through the same generator.
  const std::string in = testing::temp_dir("nanchat") + "/in.txt";
  std::ofstream(in) << "hello\n";
  auto chat = run_unillm("chat --model " + model + " --template alpaca --max-new-tokens 4", in);
  expect_error(chat, "NaN or inf");
}

TEST(NonFinite, NanWeightsStopEvalPpl) {
  const std::string model = model_with("model.norm.weight", kNaN);
  auto r = run_unillm("eval ppl --model " + model + " --file " + source_path("assets/stories260K/llama2c_sample.txt"));
  expect_error(r, "logits at position 0 (scoring token 1)");
  EXPECT_EQ(r.out.find("ppl=nan"), std::string::npos) << r.out;
}

std::string train_config(const std::string& dir, const std::string& model, const std::string& extra) {
  const std::string path = dir + "/cfg.yaml";
  std::ofstream(path) << "model_name_or_path: " << model << "\nstage: pt\nfinetuning_type: full\n"
                      << "do_train: true\ndataset: tinyshakespeare\ndataset_dir: " << source_path("data") << "\n"
                      << "cutoff_len: 32\nmax_samples: 200\nper_device_train_batch_size: 2\n"
                      << "max_steps: 6\nlogging_steps: 1\nsave_steps: 1\noutput_dir: " << dir << "/out\n"
                      << extra;
  return path;
}

TEST(NonFinite, TrainingFromNanWeightsStopsAtStepOne) {
  const std::string dir = testing::temp_dir("nantrain");
  const std::string model = model_with("model.layers.0.mlp.down_proj.weight", kNaN);
  for (const char* type : {"full", "lora"}) {
    auto r = run_unillm("train " + train_config(dir, model, "learning_rate: 1.0e-3\n") +
                        " finetuning_type=" + type + " overwrite_output_dir=true --quiet");
    expect_error(r, "step 1: the loss is NaN");
    EXPECT_NE(r.err.find("no checkpoint was written"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir + "/out/checkpoint-1")) << type;
    EXPECT_FALSE(fs::exists(dir + "/out/model.safetensors")) << type;
    EXPECT_FALSE(fs::exists(dir + "/out/adapter_model.safetensors")) << type;
  }
}

// Every f32 value of a safetensors file is finite.
bool all_finite(const std::string& path) {
  const std::string bytes = slurp(path);
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data(), 8);
  const auto j = nlohmann::json::parse(bytes.substr(8, hlen));
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__" || it.value()["dtype"] != "F32") continue;
    const auto b = it.value()["data_offsets"][0].get<size_t>(), e = it.value()["data_offsets"][1].get<size_t>();
    for (size_t at = 8 + hlen + b; at < 8 + hlen + e; at += 4) {
      float v;
      std::memcpy(&v, bytes.data() + at, 4);
      if (!std::isfinite(v)) return false;
    }
  }
  return true;
}

TEST(NonFinite, AHugeLearningRateStopsTheRunAndKeepsTheLastGoodCheckpoint) {
  const std::string dir = testing::temp_dir("hugelr");
  const std::string model = source_path("assets/stories260K");
  // 1e30: the first update leaves the weights finite but huge; the second step's gradient norm
  // is NaN (its loss still finite: RMSNorm scales the huge activations back).
  auto r = run_unillm("train " + train_config(dir, model, "learning_rate: 1.0e30\n") + " --quiet");
  expect_error(r, "step 2: the gradient norm is NaN");
  EXPECT_NE(r.err.find("last good checkpoint is " + dir + "/out/checkpoint-1"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(dir + "/out/checkpoint-1/trainer_state.json"));
  EXPECT_FALSE(fs::exists(dir + "/out/checkpoint-2"));
  EXPECT_FALSE(fs::exists(dir + "/out/model.safetensors"));
  EXPECT_EQ(testing::log_lines(dir + "/out").size(), 1u);  // step 1 only: no "loss nan" line
  // 1e39 overflows the f32 update itself: the weights turn inf/NaN while step 1's loss and
  // gradient norm were finite; the save of checkpoint-1 refuses them.
  r = run_unillm("train " + train_config(dir, model, "learning_rate: 1.0e39\n") +
                 " overwrite_output_dir=true --quiet");
  expect_error(r, "hold NaN or inf after the optimizer step");
  for (const auto& e : fs::recursive_directory_iterator(dir + "/out"))
    if (e.path().extension() == ".safetensors" && e.path().filename() != "optimizer.safetensors") {
      EXPECT_TRUE(all_finite(e.path().string())) << e.path();
    }
}

TEST(NonFinite, NonFiniteSamplingFlagsAreRefused) {
  const std::string model = source_path("assets/stories260K");
  for (const char* flag : {"--temperature nan", "--temperature inf", "--top-p nan", "--min-p -inf",
                           "--repetition-penalty 1e999"}) {
    auto r = run_unillm("generate --model " + model + " --prompt-ids 1 --max-new-tokens 2 " + flag);
    expect_error(r, "is not a valid finite number");
    EXPECT_NE(r.err.find(std::string(flag).substr(0, std::string(flag).find(' '))), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace unillm
