// LLaMA-Factory v1 configs end to end (`unillm train V1.yaml`; docs/llamafactory-v1.md) on a tiny
// random Qwen2 with the real Qwen2 tokenizer (its ChatML chat_template): the vendored v1 LoRA
// example with only its paths changed trains and saves a PEFT adapter; the same run spelled in
// v0 keys (the model's own template, torch AdamW's weight decay, a constant rate, global batch 2 as
// accumulation 2) gives the same loss and gradient norm at every step, which checks the
// translation and the v1 data path against the trainer verified elsewhere against PyTorch
// (v1's rendering itself is checked against Python in tests/reference/v1_data_check.py).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/json_file.h"
#include "io/safetensors.h"
#include "run_compare_util.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

using testing::run_unillm;
using testing::source_path;

std::string tiny_qwen2(const std::string& dir) {
  const nlohmann::json c = {{"architectures", {"Qwen2ForCausalLM"}}, {"model_type", "qwen2"},
                            {"hidden_size", 64}, {"intermediate_size", 96}, {"num_hidden_layers", 2},
                            {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"vocab_size", 151936},
                            {"max_position_embeddings", 512}, {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0},
                            {"tie_word_embeddings", true}, {"bos_token_id", 151643}, {"eos_token_id", 151645},
                            {"initializer_range", 0.2}};
  io::write_file_atomic(dir + "/qwen2.json", c.dump());
  auto r = run_unillm("init --config " + dir + "/qwen2.json --out " + dir + "/model --tokenizer " +
                      testing::shell_quote(source_path("tests/data/qwen2-tokenizer")));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dir + "/model";
}

TEST(V1Config, LoraExampleTrainsAndMatchesTheSameRunInV0Keys) {
  const std::string dir = testing::temp_dir("v1config");
  const std::string model = tiny_qwen2(dir);
  // A dataset YAML of v1's form over the bundled identity set (91 single-turn alpaca rows).
  std::ofstream(dir + "/data.yaml") << "identity:\n  path: " << source_path("data/identity.json")
                                    << "\n  source: local\n  converter: alpaca\n";
  const std::string common = " model=" + model + " train_dataset=" + dir +
                             "/data.yaml max_steps=4 cutoff_len=128 bf16=false peft_config.lora_dropout=0 "
                             "global_batch_size=2 --quiet";
  auto v1 = run_unillm("train " + source_path("tests/data/llamafactory_examples/v1/train_lora/train_lora_sft.yaml") +
                       " output_dir=" + dir + "/v1" + common);
  ASSERT_EQ(v1.exit_code, 0) << v1.err;
  // LLaMA-Factory v1 saves the PEFT adapter (its LoraParams r 16, alpha 32) in output_dir.
  const auto adapter = io::read_json_file(dir + "/v1/adapter_config.json");
  EXPECT_EQ(adapter["r"], 16);
  EXPECT_EQ(adapter["lora_alpha"], 32);
  EXPECT_TRUE(std::ifstream(dir + "/v1/adapter_model.safetensors").good());

  std::ofstream(dir + "/v0.yaml") << "model_name_or_path: " << model << "\nstage: sft\ndo_train: true\n"
                                  << "finetuning_type: lora\nlora_rank: 16\nlora_alpha: 32\nlora_dropout: 0\n"
                                  << "lora_target: all\ndataset: identity\ndataset_dir: " << source_path("data")
                                  << "\ntemplate: jinja\ncutoff_len: 128\nper_device_train_batch_size: 1\n"
                                  << "gradient_accumulation_steps: 2\nlearning_rate: 1.0e-4\nweight_decay: 0.01\n"
                                  << "lr_scheduler_type: constant\nmax_grad_norm: 1.0\nmax_steps: 4\n"
                                  << "logging_steps: 1\nsave_strategy: \"no\"\nseed: 42\noutput_dir: " << dir
                                  << "/v0\n";
  auto v0 = run_unillm("train " + dir + "/v0.yaml --quiet");
  ASSERT_EQ(v0.exit_code, 0) << v0.err;
  const auto a = testing::train_lines(dir + "/v1"), b = testing::train_lines(dir + "/v0");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_DOUBLE_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_DOUBLE_EQ(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>()) << "step " << i + 1;
  }
}

// The v1 fsdp2 example (full fine-tuning; dist_config fsdp2 = ZeRO-3) with global_batch_size 2
// on two processes (one micro-batch each) equals one process (two micro-batches): the global
// batch turns into accumulation per process count, and the shards keep v1's decay of every tensor
// (the norms decay in both, or the runs part after the first step).
TEST(V1Config, GlobalBatchUnderTwoProcessesIsOneProcessesStep) {
  const std::string dir = testing::temp_dir("v1dp2");
  const std::string model = tiny_qwen2(dir);
  std::ofstream(dir + "/data.yaml") << "identity:\n  path: " << source_path("data/identity.json")
                                    << "\n  source: local\n  converter: alpaca\n";
  const std::string args = source_path("tests/data/llamafactory_examples/v1/train_full/train_full_fsdp2.yaml") +
                           " model=" + model + " train_dataset=" + dir +
                           "/data.yaml max_steps=3 cutoff_len=96 bf16=false global_batch_size=2 "
                           "learning_rate=1e-3 --quiet output_dir=" + dir;
  auto one = testing::train_processes(1, args + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto two = testing::train_processes(2, args + "/two");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  testing::expect_runs_close(dir + "/one", dir + "/two", "v1 fsdp2: 2 processes vs 1");
  // Decay moves the norms (about 1.0) by lr · 0.01 a step, 3e-5 here: well above the layouts'
  // rounding. (Not every tensor: Adam turns the rounding noise of near-zero gradients, such as the
  // k-projection bias softmax cannot see, into steps of lr.)
  auto one_w = io::SafetensorsFile::open(dir + "/one/model.safetensors");
  auto two_w = io::SafetensorsFile::open(dir + "/two/model.safetensors");
  int norms = 0;
  for (const auto& info : one_w->tensors()) {
    if (info.name.find("norm") == std::string::npos) continue;
    ++norms;
    const auto x = one_w->tensor(info.name).to_float_vector(), y = two_w->tensor(info.name).to_float_vector();
    ASSERT_EQ(x.size(), y.size()) << info.name;
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 2e-6) << info.name << "[" << i << "]";
  }
  EXPECT_EQ(norms, 5);
}

// `llamafactory-cli dpo` on the vendored v1 LoRA DPO example (its demo pairs, native
// chosen_messages / rejected_messages rows): a fresh adapter's policy is its reference, so the
// sigmoid loss of the first step is ln 2 exactly; global batch 2 on two processes (one pair each)
// gives one process's run, the micro-batches weighed by their scored tokens on both.
TEST(V1Config, DpoExampleStartsAtLn2AndTwoProcessesAreOne) {
  const std::string dir = testing::temp_dir("v1dpo");
  const std::string model = tiny_qwen2(dir);
  const std::string args = source_path("tests/data/llamafactory_examples/v1/train_lora/train_lora_dpo.yaml") +
                           " stage=dpo model=" + model + " train_dataset=" + source_path("data/v1_dpo_demo.jsonl") +
                           " max_steps=3 cutoff_len=320 bf16=false global_batch_size=2 learning_rate=1e-3 "
                           "peft_config.lora_dropout=0 --quiet output_dir=" + dir;
  auto one = testing::train_processes(1, args + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const auto lines = testing::train_lines(dir + "/one");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NEAR(lines[0]["loss"].get<double>(), std::log(2.0), 1e-4);  // as logged (4 decimals)
  EXPECT_NE(lines[2]["loss"].get<double>(), lines[0]["loss"].get<double>());
  EXPECT_TRUE(std::ifstream(dir + "/one/adapter_model.safetensors").good());
  auto two = testing::train_processes(2, args + "/two");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  testing::expect_runs_close(dir + "/one", dir + "/two", "v1 dpo: 2 processes vs 1", 5e-5);
  // A pair file under sft, or SFT rows under dpo, is refused naming the line.
  auto r = run_unillm("train " + source_path("tests/data/llamafactory_examples/v1/train_lora/train_lora_dpo.yaml") +
                      " model=" + model + " train_dataset=" + source_path("data/v1_dpo_demo.jsonl") + " output_dir=" +
                      dir + "/sft --quiet");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("v1_dpo_demo.jsonl line 1: a chosen / rejected pair; train pairs with stage=dpo"),
            std::string::npos)
      << r.err;
}

// v1's dynamic_batching and dynamic_padding_free examples (micro-batches cut by a budget of
// cutoff_len × micro_batch_size tokens, the latter packed into one row): each trains, and two
// processes with global batch 4 give one process's run (each reads the step's whole group).
// dynamic_batching without max_steps is refused as v1 refuses it.
TEST(V1Config, DynamicBatchingExamplesTrainAndTwoProcessesAreOne) {
  const std::string dir = testing::temp_dir("v1dyn");
  const std::string model = tiny_qwen2(dir);
  std::ofstream(dir + "/data.yaml") << "identity:\n  path: " << source_path("data/identity.json")
                                    << "\n  source: local\n  converter: alpaca\n";
  for (const std::string strategy : {"dynamic_batching", "dynamic_padding_free"}) {
    const std::string args =
        source_path("tests/data/llamafactory_examples/v1/train_batching_strategy/train_full_fsdp2_" + strategy + ".yaml") +
        " model=" + model + " train_dataset=" + dir + "/data.yaml max_steps=3 cutoff_len=64 bf16=false micro_batch_size=2 "
        "global_batch_size=4 learning_rate=1e-3 --quiet output_dir=" + dir + "/" + strategy;
    auto one = testing::train_processes(1, args + "_one");
    ASSERT_EQ(one.exit_code, 0) << one.err;
    EXPECT_NE(one.err.find("batches: " + strategy + ", each micro-batch the next rows while their"), std::string::npos)
        << one.err;
    EXPECT_NE(one.err.find("stay within 128 (cutoff_len × micro_batch_size)"), std::string::npos) << one.err;
    ASSERT_EQ(testing::train_lines(dir + "/" + strategy + "_one").size(), 3u);
    auto two = testing::train_processes(2, args + "_two");
    ASSERT_EQ(two.exit_code, 0) << two.err;
    testing::expect_runs_close(dir + "/" + strategy + "_one", dir + "/" + strategy + "_two", strategy + ": 2 processes vs 1");
  }
  auto r = run_unillm("train " +
                      source_path("tests/data/llamafactory_examples/v1/train_batching_strategy/train_full_fsdp2_dynamic_batching.yaml") +
                      " model=" + model + " train_dataset=" + dir + "/data.yaml max_steps=null output_dir=" + dir + "/no_steps --quiet");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("batching_strategy dynamic_batching needs max_steps"), std::string::npos) << r.err;
}

// v1's dpo under dynamic_batching: pairs cut by the budget on their concatenated length (the cut
// itself: BatchLoader.TokenBudgetCutsPairsByTheirConcatenatedLength). Whatever the cut, the
// micro-batches' weights (their scored tokens over the step's) add up to one, so a fresh
// adapter's first loss is ln 2; two processes give one process's run. Packing pairs into one row
// (dynamic_padding_free) is refused with the reason.
TEST(V1Config, DpoDynamicBatchingCutsPairsAndTwoProcessesAreOne) {
  const std::string dir = testing::temp_dir("v1dpodyn");
  const std::string model = tiny_qwen2(dir);
  const std::string args = source_path("tests/data/llamafactory_examples/v1/train_lora/train_lora_dpo.yaml") +
                           " stage=dpo model=" + model + " train_dataset=" + source_path("data/v1_dpo_demo.jsonl") +
                           " max_steps=3 cutoff_len=320 bf16=false micro_batch_size=2 global_batch_size=4 "
                           "learning_rate=1e-3 peft_config.lora_dropout=0 --quiet output_dir=" + dir;
  auto one = testing::train_processes(1, args + "/one batching_strategy=dynamic_batching");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.err.find("batches: dynamic_batching, each micro-batch the next pairs while their padded tokens "
                         "(pairs × longest chosen+rejected) stay within 640"),
            std::string::npos)
      << one.err;
  const auto lines = testing::train_lines(dir + "/one");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NEAR(lines[0]["loss"].get<double>(), std::log(2.0), 1e-4);
  auto two = testing::train_processes(2, args + "/two batching_strategy=dynamic_batching");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  testing::expect_runs_close(dir + "/one", dir + "/two", "v1 dpo dynamic_batching: 2 processes vs 1", 5e-5);
  auto r = run_unillm("train " + args + "/packed batching_strategy=dynamic_padding_free");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("batching_strategy dynamic_padding_free with stage dpo: v1 packs several chosen/rejected pairs "
                       "into one row"),
            std::string::npos)
      << r.err;
}

// `llamafactory-cli rm` (v1's rm_trainer) on the vendored v1 examples with stage=rm: the score
// head of a token classifier (v1's initialisation makes every score near 0, so the first loss is
// near ln 2), written as Qwen2ForTokenClassification (score.*, no lm_head) or a TOKEN_CLS adapter
// (that transformers and PEFT load them and score as unillm does: tests/reference/v1_rm_check.py;
// the loss and gradients: V1RmParity). A run killed after its step-2 checkpoint resumes into the
// same run, full and LoRA (the checkpoint is read back as a token classifier); two processes give
// one process's run; `eval reward` reads the score head, also of the LoRA adapter merged by v1's
// export; generating from it is refused.
TEST(V1Config, RewardModelSavesATokenClassifierAndResumes) {
  const std::string dir = testing::temp_dir("v1rm");
  const std::string model = tiny_qwen2(dir);
  const std::string common = " stage=rm model=" + model + " train_dataset=" + source_path("data/v1_dpo_demo.jsonl") +
                             " max_steps=4 cutoff_len=320 bf16=false global_batch_size=2 learning_rate=5e-3 "
                             "save_steps=2 --quiet output_dir=" + dir;
  const std::string full = source_path("tests/data/llamafactory_examples/v1/train_full/train_full_fsdp2.yaml") + common;
  const std::string lora = source_path("tests/data/llamafactory_examples/v1/train_lora/train_lora_sft.yaml") +
                           " peft_config.lora_dropout=0" + common;
  for (const auto& [name, args] : {std::pair{std::string("full"), full}, std::pair{std::string("lora"), lora}}) {
    SCOPED_TRACE(name);
    auto a = run_unillm("train " + args + "/" + name);
    ASSERT_EQ(a.exit_code, 0) << a.err;
    const auto lines = testing::train_lines(dir + "/" + name);
    ASSERT_EQ(lines.size(), 4u);
    EXPECT_NEAR(lines[0]["loss"].get<double>(), std::log(2.0), 0.02);
    EXPECT_NE(lines[3]["loss"].get<double>(), lines[0]["loss"].get<double>());
    auto killed = run_unillm("train " + args + "/" + name + "_b --kill-after-step 2");
    EXPECT_EQ(killed.exit_code, 128 + 9) << killed.err;
    auto resumed = run_unillm("train " + args + "/" + name + "_b resume_from_checkpoint=true");
    ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
    const auto again = testing::train_lines(dir + "/" + name + "_b");
    ASSERT_EQ(again.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(again[i]["loss"], lines[i]["loss"]) << "step " << i + 1;
      EXPECT_EQ(again[i]["grad_norm"], lines[i]["grad_norm"]) << "step " << i + 1;
    }
    const std::string file = name == "full" ? "/model.safetensors" : "/adapter_model.safetensors";
    EXPECT_EQ(testing::slurp(dir + "/" + name + file), testing::slurp(dir + "/" + name + "_b" + file));
  }
  const nlohmann::json cfg = io::read_json_file(dir + "/full/config.json");
  EXPECT_EQ(cfg["architectures"][0], "Qwen2ForTokenClassification");
  EXPECT_EQ(cfg["id2label"].size(), 1u);
  const auto weights = io::SafetensorsFile::open(dir + "/full/model.safetensors");
  EXPECT_TRUE(weights->has("score.weight") && weights->has("score.bias"));
  EXPECT_FALSE(weights->has("lm_head.weight"));
  const nlohmann::json acfg = io::read_json_file(dir + "/lora/adapter_config.json");
  EXPECT_EQ(acfg["task_type"], "TOKEN_CLS");
  EXPECT_TRUE(io::SafetensorsFile::open(dir + "/lora/adapter_model.safetensors")->has("base_model.model.score.weight"));

  auto two = testing::train_processes(2, full + "/two");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  testing::expect_runs_close(dir + "/full", dir + "/two", "v1 rm: 2 processes vs 1", 5e-5);

  // v1's export merges the LoRA reward model into a token classifier (the adapter's score head):
  // it scores pairs as the base with the adapter does.
  std::ofstream(dir + "/export.yaml") << "model: " << model << "\npeft_config:\n  name: lora\n  adapter_name_or_path: "
                                      << dir << "/lora\n  export_dir: " << dir << "/merged\n  infer_dtype: auto\n";
  auto x = run_unillm("export " + dir + "/export.yaml");
  ASSERT_EQ(x.exit_code, 0) << x.err;
  EXPECT_EQ(io::read_json_file(dir + "/merged/config.json")["architectures"][0], "Qwen2ForTokenClassification");
  std::vector<nlohmann::json> evals;
  for (const std::string& m : {" --model " + dir + "/full", " --model " + model + " --adapter " + dir + "/lora",
                               " --model " + dir + "/merged"}) {
    auto e = run_unillm("eval reward" + m + " --file " + source_path("data/dpo_en_demo.json") +
                        " --cutoff-len 64 --json");
    ASSERT_EQ(e.exit_code, 0) << e.err;
    evals.push_back(nlohmann::json::parse(e.out));
    EXPECT_GT(evals.back()["pairs"].get<int>(), 0) << e.out;
  }
  EXPECT_EQ(evals[1]["accuracy"], evals[2]["accuracy"]);
  EXPECT_NEAR(evals[1]["mean_margin"].get<double>(), evals[2]["mean_margin"].get<double>(), 1e-5);
  auto g = run_unillm("generate --model " + dir + "/full --prompt Hi --max-new-tokens 2 --quiet");
  EXPECT_EQ(g.exit_code, 1);
  EXPECT_NE(g.err.find("is a token classifier (*ForTokenClassification: LLaMA-Factory v1's reward model"),
            std::string::npos)
      << g.err;
  auto sft = run_unillm("train " + source_path("tests/data/llamafactory_examples/v1/train_lora/train_lora_sft.yaml") +
                        " model=" + dir + "/full train_dataset=" + source_path("data/v1_sft_demo.yaml") +
                        " max_steps=1 --quiet output_dir=" + dir + "/sft");
  EXPECT_EQ(sft.exit_code, 1);
  EXPECT_NE(sft.err.find("is a token classifier (Qwen2ForTokenClassification"), std::string::npos) << sft.err;
}

// `llamafactory-cli chat` of a v1 config (cli_sampler.run_chat): the model's own chat template and
// transformers' generate — greedy unless generation_config.json samples, generate's defaults for
// what that file leaves out — with max_new_tokens from the config (v1's default 128): the same
// session as the equivalent `chat --model` flags. Training keys in the file are said to be unused;
// a train_dataset (v1 batch-infers it) is refused.
TEST(V1Config, ChatIsTheSameSessionAsItsFlags) {
  const std::string dir = testing::temp_dir("v1chat");
  const std::string model = tiny_qwen2(dir);
  std::ofstream(dir + "/in.txt") << "Hello there.\nAnd then?\n";
  std::ofstream(dir + "/chat.yaml") << "model: " << model << "\nmodel_class: llm\nmicro_batch_size: 2\n"
                                    << "sample_backend: hf\nmax_new_tokens: 6\n";
  auto run = [&](const std::string& args) { return run_unillm(args + " --threads 1", dir + "/in.txt"); };
  std::filesystem::remove(model + "/generation_config.json");
  auto v1 = run("chat " + dir + "/chat.yaml");
  auto flags = run("chat --model " + model + " --temperature 0 --max-new-tokens 6");
  ASSERT_EQ(v1.exit_code, 0) << v1.err;
  ASSERT_EQ(flags.exit_code, 0) << flags.err;
  EXPECT_EQ(v1.out, flags.out);
  EXPECT_NE(v1.out.find("Assistant: "), std::string::npos) << v1.out;
  EXPECT_NE(v1.err.find("key 'per_device_train_batch_size' is not used by `unillm chat`"), std::string::npos) << v1.err;
  // A sampling generation_config.json: its temperature, generate's top_p 1 and top_k 50.
  io::write_file_atomic(model + "/generation_config.json", R"({"do_sample": true, "temperature": 0.7})");
  auto sampled = run("chat " + dir + "/chat.yaml max_new_tokens=5");
  auto sampled_flags = run("chat --model " + model + " --temperature 0.7 --top-p 1 --top-k 50 --max-new-tokens 5");
  ASSERT_EQ(sampled.exit_code, 0) << sampled.err;
  EXPECT_EQ(sampled.out, sampled_flags.out);
  auto greedy = run("chat --model " + model + " --temperature 0 --max-new-tokens 5");
  EXPECT_NE(sampled.out, greedy.out);
  auto r = run("chat " + dir + "/chat.yaml train_dataset=" + source_path("data/v1_sft_demo.yaml"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("command line: LLaMA-Factory v1 train_dataset: under chat"), std::string::npos) << r.err;
}

TEST(V1Config, WhatV1RefusesOrCannotDoHereIsSaidWithItsPlace) {
  const std::string dir = testing::temp_dir("v1refuse");
  const std::string model = tiny_qwen2(dir);
  std::ofstream(dir + "/data.yaml") << "identity:\n  path: " << source_path("data/identity.json")
                                    << "\n  source: local\n  converter: alpaca\n";
  // global_batch_size must be a multiple of micro_batch_size × the data-parallel processes.
  auto r = run_unillm("train " + source_path("tests/data/llamafactory_examples/v1/train_full/train_full_fsdp2.yaml") +
                      " model=" + model + " train_dataset=" + dir + "/data.yaml output_dir=" + dir +
                      "/out micro_batch_size=2 global_batch_size=3 max_steps=1 --quiet");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("global_batch_size 3 must be a multiple of 1 data-parallel processes × micro_batch_size 2"),
            std::string::npos)
      << r.err;
  // A hub dataset needs a network.
  std::ofstream(dir + "/hub.yaml") << "orca:\n  path: HuggingFaceH4/orca_dpo_pairs\n  split: train\n";
  r = run_unillm("train " + source_path("tests/data/llamafactory_examples/v1/train_full/train_full_fsdp2.yaml") +
                 " model=" + model + " train_dataset=" + dir + "/hub.yaml output_dir=" + dir + "/out2 --quiet");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("hub.yaml line 1: dataset 'orca'"), std::string::npos) << r.err;
  // A record that is not a JSON object names its file and line.
  std::ofstream(dir + "/bad.jsonl") << R"({"messages": [{"role": "user", "content": [{"type": "text", "value": "hi"}]}]})"
                                    << "\n[1, 2]\n";
  r = run_unillm("train " + source_path("tests/data/llamafactory_examples/v1/train_full/train_full_fsdp2.yaml") +
                 " model=" + model + " train_dataset=" + dir + "/bad.jsonl output_dir=" + dir + "/out3 --quiet");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("bad.jsonl line 2: not a JSON object"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace unillm
