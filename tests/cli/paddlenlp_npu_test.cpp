// PaddleNLP's Ascend NPU Llama scripts (tests/cli/paddlenlp_npu/, as argument files) under
// mpirun on a tiny Llama whose heads split 8 ways: SFT with tensor_parallel_degree 8, sequence
// parallelism and sharding stage1 on 8 processes; LoRA with tp 4 and sequence parallelism on 4;
// continued pretraining with tp 4 × sharding 2 and sequence parallelism on 8. Each gives the run
// of one process (tensor_parallel_degree 1, the replicas' accumulation) within 1e-5 in f32; the
// SFT file as it is (bf16) runs too, to bf16's rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "run_compare_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;

std::string npu_file(const std::string& name) { return testing::source_path("tests/cli/paddlenlp_npu/" + name); }

struct NpuSetup {
  std::string dir, model, data, corpus;
};

// The tiny model, 8 training and 4 dev records of AdvertiseGen, and a pre-tokenised corpus.
const NpuSetup& setup() {
  static const NpuSetup s = [] {
    NpuSetup s;
    s.dir = testing::temp_dir("paddle_npu");
    s.model = s.dir + "/tiny_llama_8heads";
    auto r = testing::run_unillm("init --config " + npu_file("tiny_llama_8heads.json") + " --tokenizer " +
                                 testing::source_path("assets/stories260K") + " --out " + s.model + " --seed 3");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    s.data = s.dir + "/data";
    fs::create_directories(s.data);
    for (auto [name, n] : {std::pair<const char*, int>{"train.json", 8}, {"dev.json", 4}}) {
      std::ifstream in(testing::source_path("data/advertisegen/") + name);
      std::ofstream out(s.data + "/" + name);
      std::string line;
      for (int i = 0; i < n && std::getline(in, line); ++i) out << line << "\n";
    }
    std::ifstream in(testing::source_path("data/tinyshakespeare.txt"));
    std::ofstream text(s.dir + "/shakes.txt");
    std::string line;
    for (int i = 0; i < 3000 && std::getline(in, line); ++i) text << line << "\n";
    text.close();
    s.corpus = s.dir + "/corpus";
    r = testing::run_unillm("preprocess --quiet --model " + s.model + " --input " + s.dir + "/shakes.txt --output " +
                            s.corpus + "/shakes");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return s;
  }();
  return s;
}

// One file's run: np processes (1: one process with tensor_parallel_degree 1), the paths and a
// few steps set, then `extra`.
testing::CliResult run(const std::string& file, int np, const std::string& out, const std::string& extra) {
  const NpuSetup& s = setup();
  const std::string paths = file == "ppt_N1C8.json"
                                ? " model_name_or_path=" + s.model + " tokenizer_name_or_path=" + s.model +
                                      " input_dir=" + s.corpus + " max_seq_length=64"
                                : " model_name_or_path=" + s.model + " dataset_name_or_path=" + s.data;
  return testing::train_processes(np, npu_file(file) + paths + " output_dir=" + s.dir + "/" + out +
                                          " max_steps=3 save_steps=3 warmup_steps=1" +
                                          (np == 1 ? " tensor_parallel_degree=1" : "") + " " + extra + " --quiet");
}

TEST(PaddleNlpNpu, SftTensorParallel8WithSequenceParallelAndSharding) {
  const NpuSetup& s = setup();
  // learning_rate 1e-3 instead of its 3e-6, so that the weights move enough for the comparison to bite.
  auto one = run("sft_N1C8.json", 1, "sft_one", "gradient_accumulation_steps=2 bf16=false learning_rate=1e-3");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto tp8 = run("sft_N1C8.json", 8, "sft_tp8", "gradient_accumulation_steps=2 bf16=false learning_rate=1e-3");
  ASSERT_EQ(tp8.exit_code, 0) << tp8.err;
  EXPECT_NE(tp8.err.find("tensor parallel: 8 processes"), std::string::npos) << tp8.err;
  EXPECT_NE(tp8.err.find("sequence parallel: each runs the embedding, norms and loss on its share"),
            std::string::npos)
      << tp8.err;
  EXPECT_NE(tp8.err.find("'fuse_attention_qkv' is accepted and ignored by unillm (q/k/v are always one fused"),
            std::string::npos)
      << tp8.err;
  testing::expect_runs_close(s.dir + "/sft_one", s.dir + "/sft_tp8", "sft tp8");
  EXPECT_LE(testing::max_weight_diff(s.dir + "/sft_one/model.safetensors", s.dir + "/sft_tp8/model.safetensors"),
            testing::layout_tol(1e-5));
  // As the file is (bf16 mixed precision): it runs; the losses agree to bf16's rounding.
  auto bone = run("sft_N1C8.json", 1, "sft_bf16_one", "gradient_accumulation_steps=2");
  ASSERT_EQ(bone.exit_code, 0) << bone.err;
  auto btp8 = run("sft_N1C8.json", 8, "sft_bf16_tp8", "gradient_accumulation_steps=2");
  ASSERT_EQ(btp8.exit_code, 0) << btp8.err;
  const auto a = testing::logged_figures(s.dir + "/sft_bf16_one"), b = testing::logged_figures(s.dir + "/sft_bf16_tp8");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i].first, b[i].first, 1e-2 * a[i].first) << i;
}

TEST(PaddleNlpNpu, LoraTensorParallel4WithSequenceParallel) {
  const NpuSetup& s = setup();
  auto one = run("lora_opt.json", 1, "lora_one", "gradient_accumulation_steps=2 bf16=false learning_rate=1e-3");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto tp4 = run("lora_opt.json", 4, "lora_tp4", "gradient_accumulation_steps=2 bf16=false learning_rate=1e-3");
  ASSERT_EQ(tp4.exit_code, 0) << tp4.err;
  testing::expect_runs_close(s.dir + "/lora_one", s.dir + "/lora_tp4", "lora tp4");
  EXPECT_LE(testing::max_weight_diff(s.dir + "/lora_one/adapter_model.safetensors",
                                     s.dir + "/lora_tp4/adapter_model.safetensors"),
            testing::layout_tol(5e-5));
}

TEST(PaddleNlpNpu, PretrainTensorParallel4TimesSharding2) {
  const NpuSetup& s = setup();
  // tp 4 × 2 data-parallel replicas (its sharding_parallel_degree 2: ZeRO over all 8), each
  // accumulating 2 = one process accumulating 4.
  auto one = run("ppt_N1C8.json", 1, "ppt_one", "gradient_accumulation_steps=4 bf16=false learning_rate=1e-3");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto eight = run("ppt_N1C8.json", 8, "ppt_tp4", "gradient_accumulation_steps=2 bf16=false learning_rate=1e-3");
  ASSERT_EQ(eight.exit_code, 0) << eight.err;
  EXPECT_NE(eight.err.find("tensor parallel: 4 processes"), std::string::npos) << eight.err;
  EXPECT_NE(eight.err.find("data parallel: 2 replicas"), std::string::npos) << eight.err;
  EXPECT_NE(eight.err.find("ZeRO shards the optimizer state over all 8 processes"), std::string::npos) << eight.err;
  testing::expect_runs_close(s.dir + "/ppt_one", s.dir + "/ppt_tp4", "ppt tp4 x dp2");
  EXPECT_LE(testing::max_weight_diff(s.dir + "/ppt_one/model.safetensors", s.dir + "/ppt_tp4/model.safetensors"),
            testing::layout_tol(1e-5));
}

}  // namespace
}  // namespace unillm
