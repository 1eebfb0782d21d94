// `unillm train` (stage sft) with LoRA / freeze on the bundled model and data, then `export`,
// `generate --adapter`, `eval ppl --adapter` and `chat`, end to end through the binary.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/safetensors.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::run_unillm;
using testing::shell_quote;
using testing::source_path;

using testing::slurp;

// A small SFT config on the bundled alpaca demo; extra lines are appended.
std::string sft_config(const std::string& dir, const std::string& name, const std::string& out,
                       const std::string& extra) {
  std::string path = dir + "/" + name + ".yaml";
  std::ofstream(path) << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
                      << "stage: sft\ndo_train: true\n"
                      << "dataset: alpaca_en_demo\ndataset_dir: " << source_path("data") << "\n"
                      << "template: alpaca\ncutoff_len: 128\nmax_samples: 120\n"
                      << "output_dir: " << out << "\n"
                      << "per_device_train_batch_size: 4\nlearning_rate: 5.0e-3\n"
                      << "max_steps: 12\nlogging_steps: 1\nsave_steps: 6\nseed: 3\n"
                      << extra;
  return path;
}

using testing::log_lines;

const char* kPrompt =
    "Below is an instruction that describes a task. Write a response that appropriately "
    "completes the request.\n\n### Instruction:\nName a color.\n\n### Response:\n";

TEST(Sft, LoraTrainResumeExportGenerate) {
  std::string dir = testing::temp_dir("lora_sft");
  const std::string extra = "finetuning_type: lora\nlora_rank: 4\nlora_dropout: 0.1\n";
  auto a = run_unillm("train " + sft_config(dir, "a", dir + "/a", extra) + " --quiet");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  // A PEFT adapter dir, not a full model.
  EXPECT_TRUE(fs::exists(dir + "/a/adapter_model.safetensors"));
  EXPECT_FALSE(fs::exists(dir + "/a/model.safetensors"));
  auto cfg = nlohmann::json::parse(slurp(dir + "/a/adapter_config.json"));
  EXPECT_EQ(cfg["r"], 4);
  EXPECT_EQ(cfg["lora_alpha"], 8);  // 2 x rank
  EXPECT_EQ(cfg["peft_type"], "LORA");
  auto f = io::SafetensorsFile::open(dir + "/a/adapter_model.safetensors");
  EXPECT_TRUE(f->has("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"));
  EXPECT_TRUE(f->has("base_model.model.model.layers.4.mlp.down_proj.lora_B.weight"));
  auto logs = log_lines(dir + "/a");
  ASSERT_EQ(logs.size(), 12u);
  EXPECT_LT(logs.back()["loss"].get<double>(), logs.front()["loss"].get<double>());

  // kill -9 after step 6's checkpoint, resume: the same losses and the same adapter bytes
  // (dropout masks come from the checkpointed RNG).
  std::string b_cfg = sft_config(dir, "b", dir + "/b", extra);
  auto killed = run_unillm("train " + b_cfg + " --quiet --kill-after-step 6");
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.err;
  auto resumed = run_unillm("train " + b_cfg + " resume_from_checkpoint=true --quiet");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  auto lb = log_lines(dir + "/b");
  ASSERT_EQ(lb.size(), 12u);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(logs[i]["loss"], lb[i]["loss"]) << "step " << i + 1;
  EXPECT_EQ(slurp(dir + "/a/adapter_model.safetensors"), slurp(dir + "/b/adapter_model.safetensors"));

  // export merges; the merged model generates exactly what base + adapter generates.
  std::ofstream(dir + "/merge.yaml") << "model_name_or_path: " << source_path("assets/stories260K")
                                     << "\nadapter_name_or_path: " << dir << "/a\n"
                                     << "template: alpaca\nfinetuning_type: lora\n"
                                     << "export_dir: " << dir << "/merged\n";
  auto ex = run_unillm("export " + dir + "/merge.yaml");
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  ASSERT_TRUE(fs::exists(dir + "/merged/model.safetensors"));
  const std::string gen = " --prompt " + shell_quote(kPrompt) +
                          " --temperature 0 --max-new-tokens 24 --output-ids --quiet";
  auto g1 = run_unillm("generate --model " + dir + "/merged" + gen);
  auto g2 = run_unillm("generate --model " + source_path("assets/stories260K") + " --adapter " +
                       dir + "/a" + gen);
  auto g0 = run_unillm("generate --model " + source_path("assets/stories260K") + gen);
  ASSERT_EQ(g1.exit_code, 0) << g1.err;
  ASSERT_EQ(g2.exit_code, 0) << g2.err;
  EXPECT_EQ(g1.out, g2.out);
  EXPECT_NE(g0.out, g2.out) << "the adapter changed nothing";
  // export_size in GB per shard: 0.0003 GB = 300 kB shards of the ~1 MB model, with an index.
  auto sh = run_unillm("export " + dir + "/merge.yaml export_size=0.0003 export_dir=" + dir + "/sharded");
  ASSERT_EQ(sh.exit_code, 0) << sh.err;
  EXPECT_TRUE(fs::exists(dir + "/sharded/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir + "/sharded/model.safetensors"));
  auto g3 = run_unillm("generate --model " + dir + "/sharded" + gen);
  EXPECT_EQ(g3.out, g1.out);

  // eval ppl: merged = base + adapter (f32 rounding apart).
  std::ofstream(dir + "/text.txt") << kPrompt << "Blue is a color of the sky.";
  auto p1 = run_unillm("eval ppl --json --model " + dir + "/merged --file " + dir + "/text.txt");
  auto p2 = run_unillm("eval ppl --json --model " + source_path("assets/stories260K") +
                       " --adapter " + dir + "/a --file " + dir + "/text.txt");
  ASSERT_EQ(p1.exit_code, 0) << p1.err;
  ASSERT_EQ(p2.exit_code, 0) << p2.err;
  double n1 = nlohmann::json::parse(p1.out)["nll"], n2 = nlohmann::json::parse(p2.out)["nll"];
  EXPECT_NEAR(n1, n2, 1e-5);
}

TEST(Sft, ChatIsMultiTurnWithClearAndExit) {
  const std::string model = source_path("assets/stories260K");
  const std::string flags = " --template alpaca --temperature 0 --max-new-tokens 12";
  // After /clear the reply to "Hi" equals a fresh session's; lines after /exit are never read.
  std::string dir = testing::temp_dir("chat");
  std::ofstream(dir + "/in1.txt") << "Tell me a story.\n/clear\nHi\n/exit\nNever read\n";
  std::ofstream(dir + "/in2.txt") << "Hi\n";
  std::ofstream(dir + "/in3.txt") << "Tell me a story.\nHi\n";
  auto c1 = run_unillm("chat --model " + model + flags, dir + "/in1.txt");
  auto c2 = run_unillm("chat --model " + model + flags, dir + "/in2.txt");
  auto c3 = run_unillm("chat --model " + model + flags, dir + "/in3.txt");
  ASSERT_EQ(c1.exit_code, 0) << c1.err;
  ASSERT_EQ(c2.exit_code, 0) << c2.err;
  ASSERT_EQ(c3.exit_code, 0) << c3.err;
  auto lines = [](const std::string& s) {
    std::vector<std::string> out;
    std::istringstream is(s);
    for (std::string l; std::getline(is, l);) out.push_back(l);
    return out;
  };
  auto l1 = lines(c1.out), l2 = lines(c2.out), l3 = lines(c3.out);
  ASSERT_GE(l1.size(), 3u) << c1.out;
  ASSERT_GE(l3.size(), 2u) << c3.out;
  EXPECT_EQ(l1[0].rfind("Assistant: ", 0), 0u) << c1.out;
  EXPECT_EQ(l1[1], "History has been removed.");
  EXPECT_EQ(l1.back(), l2.back()) << "after /clear the history must be gone";
  EXPECT_NE(l3.back(), l2.back()) << "multi-turn: the first turn must shape the second";
  EXPECT_EQ(c1.out.find("Never read"), std::string::npos);
}

TEST(Sft, FreezeTrainsOnlyTheChosenLayers) {
  std::string dir = testing::temp_dir("freeze");
  auto r = run_unillm("train " +
                      sft_config(dir, "f", dir + "/f",
                                 "finetuning_type: freeze\nfreeze_trainable_layers: 1\n"
                                 "freeze_trainable_modules: mlp\nfreeze_extra_modules: norm\n") +
                      " max_steps=3 --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto base = io::SafetensorsFile::open(source_path("assets/stories260K/model.safetensors"));
  auto got = io::SafetensorsFile::open(dir + "/f/model.safetensors");
  int changed = 0;
  for (const auto& info : base->tensors()) {
    const std::string& name = info.name;
    // LLaMA-Factory matches patterns as substrings: "norm" selects every norm weight.
    const bool trainable = name.find("layers.4.mlp.") != std::string::npos ||
                           name.find("norm") != std::string::npos;
    Tensor a = base->tensor(name).to(DType::f32), b = got->tensor(name).to(DType::f32);
    bool same = a.numel() == b.numel() &&
                std::memcmp(a.raw_data(), b.raw_data(), a.numel() * sizeof(float)) == 0;
    EXPECT_EQ(same, !trainable) << name;
    changed += !same;
  }
  EXPECT_EQ(changed, 3 + 11);  // layers.4 gate/up/down + 2 norms x 5 layers + model.norm
}

TEST(Sft, PaddleNlpSrcTgtTrainsFromDirectory) {
  std::string dir = testing::temp_dir("paddle");
  std::string cfg = dir + "/p.yaml";
  std::ofstream(cfg) << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
                     << "stage: sft\nfinetuning_type: full\ndo_train: true\n"
                     << "dataset_name_or_path: " << source_path("tests/data/sft/paddle") << "\n"
                     << "src_length: 48\nmax_length: 96\nzero_padding: true\n"
                     << "output_dir: " << dir << "/out\nper_device_train_batch_size: 2\n"
                     << "max_steps: 3\nlogging_steps: 1\neval_strategy: steps\neval_steps: 3\n";
  auto r = run_unillm("train " + cfg + " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("{src,tgt}"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(dir + "/out/eval_results.json"));  // dev.json is the eval set
}

TEST(Sft, PaddleNlpJsonArgsTrainTheSameModelAsYaml) {
  std::string dir = testing::temp_dir("paddle_json");
  const std::string model = source_path("assets/stories260K"), data = source_path("tests/data/sft/paddle");
  std::ofstream(dir + "/args.json") << "{\n  \"model_name_or_path\": \"" << model << "\",\n"
                                    << "  \"dataset_name_or_path\": \"" << data << "\",\n"
                                    << "  \"output_dir\": \"" << dir << "/json\",\n"
                                    << "  \"per_device_train_batch_size\": 2,\n  \"learning_rate\": 3e-03,\n"
                                    << "  \"max_steps\": 4,\n  \"src_length\": 48,\n  \"max_length\": 96,\n"
                                    << "  \"lora\": true,\n  \"lora_rank\": 4,\n  \"recompute\": true,\n"
                                    << "  \"do_train\": true,\n  \"use_flash_attention\": true,\n"
                                    << "  \"tensor_parallel_degree\": 1\n}\n";
  std::ofstream(dir + "/same.yaml") << "model_name_or_path: " << model << "\nstage: sft\n"
                                    << "finetuning_type: lora\nlora_rank: 4\ndo_train: true\n"
                                    << "dataset_name_or_path: " << data << "\nsrc_length: 48\n"
                                    << "max_length: 96\noutput_dir: " << dir << "/yaml\n"
                                    << "per_device_train_batch_size: 2\nlearning_rate: 3.0e-3\n"
                                    << "max_steps: 4\n";
  auto j = run_unillm("train " + dir + "/args.json --quiet");
  auto y = run_unillm("train " + dir + "/same.yaml --quiet");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  ASSERT_EQ(y.exit_code, 0) << y.err;
  EXPECT_NE(j.err.find("PaddleNLP key 'use_flash_attention' is accepted and ignored"), std::string::npos) << j.err;
  ASSERT_TRUE(fs::exists(dir + "/json/adapter_model.safetensors"));
  EXPECT_EQ(slurp(dir + "/json/adapter_model.safetensors"), slurp(dir + "/yaml/adapter_model.safetensors"));
}

TEST(Sft, MalformedRecordsNameFileAndLineOrAreSkipped) {
  std::string dir = testing::temp_dir("bad_sft");
  std::ofstream(dir + "/dataset_info.json")
      << R"({"bad": {"file_name": "bad.jsonl", "formatting": "sharegpt"}})";
  std::ofstream(dir + "/bad.jsonl")
      << R"({"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]})" "\n"
      << R"({"conversations": [{"from": "gpt", "value": "Hi"}, {"from": "human", "value": "x"}]})" "\n"
      << R"({"conversations": [{"from": "human", "value": "Yo"}, {"from": "gpt", "value": "Hey"}]})" "\n";
  std::string cfg = dir + "/c.yaml";
  std::ofstream(cfg) << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
                     << "stage: sft\nfinetuning_type: lora\ndo_train: true\ntemplate: default\n"
                     << "dataset: bad\ndataset_dir: " << dir << "\noutput_dir: " << dir
                     << "/out\nmax_steps: 1\nper_device_train_batch_size: 2\n";
  auto r = run_unillm("train " + cfg + " --quiet");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("bad.jsonl line 2"), std::string::npos) << r.err;
  auto s = run_unillm("train " + cfg + " skip_bad_records=true --quiet");
  EXPECT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.err.find("skipped 1 bad records"), std::string::npos) << s.err;
}

// dataset_info.json's num_samples: 30 rows drawn from the 1000 of alpaca_en_demo, 2500 (every
// row, then 1500 drawn again) or max_samples of the drawn ones; which rows is checked against
// LLaMA-Factory in tests/data_layer/num_samples_test.cpp. eval_on_each_dataset, which reads each
// eval dataset again on its own, refuses it on an eval dataset.
TEST(Sft, NumSamplesDrawsRowsOfEachDataset) {
  const std::string dir = testing::temp_dir("num_samples");
  const std::string file = source_path("data/alpaca_en_demo.json");
  std::ofstream(dir + "/dataset_info.json")
      << R"({"few": {"file_name": ")" << file << R"(", "num_samples": 30},)"
      << R"( "many": {"file_name": ")" << file << R"(", "num_samples": 2500}})";
  auto rows = [&](const std::string& name, const std::string& extra) {
    const auto r = run_unillm("train " + sft_config(dir, name, dir + "/" + name, "") +
                              " dataset_dir=" + dir + " max_steps=1 max_samples=null " + extra);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const size_t n = r.err.find(" train rows");
    const size_t at = r.err.rfind("data: ", n);
    return at == std::string::npos || n == std::string::npos ? std::string("?")
                                                              : r.err.substr(at + 6, n - at - 6);
  };
  EXPECT_EQ(rows("few", "dataset=few"), "30");
  EXPECT_EQ(rows("many", "dataset=many"), "2500");
  EXPECT_EQ(rows("both", "dataset=few,many max_samples=100"), "130");
  const auto each = run_unillm("train " + sft_config(dir, "each", dir + "/each", "eval_on_each_dataset: true\n") +
                               " dataset_dir=" + dir + " dataset=many eval_dataset=few");
  EXPECT_NE(each.exit_code, 0);
  EXPECT_NE(each.err.find("eval_on_each_dataset with num_samples on an eval dataset ('few') is not implemented yet"),
            std::string::npos) << each.err;
}

// formatting: openai trains end to end (tool calls and tool results through qwen's tool format);
// the conversion itself is checked in tests/data_layer/sft_reader_test.cpp.
TEST(Sft, OpenAiFormattingWithToolCallsTrains) {
  const std::string dir = testing::temp_dir("openai_sft");
  const auto r = run_unillm("train " + sft_config(dir, "c", dir + "/out", "resize_vocab: true\n") +
                            " dataset=openai_tools,openai_messages dataset_dir=" + source_path("tests/data/sft") +
                            " template=qwen max_steps=1 max_samples=null");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("data: 7 train rows"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace unillm
